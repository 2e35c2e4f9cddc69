/** Every operation of the spec and its handler. A missing or mistyped one fails `tsc`. */
import type { Handlers } from './platform/http/handler.ts';
import { authHandlers } from './resources/auth/handlers.ts';
import { automationHandlers } from './resources/automations/handlers.ts';
import { healthHandlers } from './resources/health/handlers.ts';
import { notificationSettingHandlers } from './resources/notification-settings/handlers.ts';
import { userHandlers } from './resources/users/handlers.ts';

export const handlers: Handlers = {
  ...healthHandlers,
  ...authHandlers,
  ...userHandlers,
  ...notificationSettingHandlers,
  ...automationHandlers,
};
