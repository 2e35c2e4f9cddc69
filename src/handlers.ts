/** Every operation of the spec and its handler. A missing or mistyped one fails `tsc`. */
import type { Handlers } from './platform/http/handler.ts';
import { auditEventHandlers } from './resources/audit-events/handlers.ts';
import { attributeSetHandlers } from './resources/attribute-sets/handlers.ts';
import { authHandlers } from './resources/auth/handlers.ts';
import { defaultValueSourceHandlers } from './resources/default-value-sources/handlers.ts';
import { formHandlers } from './resources/forms/handlers.ts';
import { automationHandlers } from './resources/automations/handlers.ts';
import { healthHandlers } from './resources/health/handlers.ts';
import { roleHandlers } from './resources/roles/handlers.ts';
import { loginTokenHandlers } from './resources/login-tokens/handlers.ts';
import { menuItemHandlers } from './resources/menu-items/handlers.ts';
import { departmentHandlers } from './resources/departments/handlers.ts';
import { notificationHandlers } from './resources/notifications/handlers.ts';
import { problemHandlers } from './resources/problems/handlers.ts';
import { pushHandlers } from './resources/push/handlers.ts';
import { notificationSettingHandlers } from './resources/notification-settings/handlers.ts';
import { scimTokenHandlers } from './resources/scim/handlers.ts';
import { userHandlers } from './resources/users/handlers.ts';

export const handlers: Handlers = {
  ...healthHandlers,
  ...authHandlers,
  ...userHandlers,
  ...roleHandlers,
  ...notificationSettingHandlers,
  ...loginTokenHandlers,
  ...menuItemHandlers,
  ...formHandlers,
  ...defaultValueSourceHandlers,
  ...automationHandlers,
  ...departmentHandlers,
  ...attributeSetHandlers,
  ...notificationHandlers,
  ...pushHandlers,
  ...problemHandlers,
  ...auditEventHandlers,
  ...scimTokenHandlers,
};
