/** Every table, for drizzle-kit (drizzle.config.ts) to generate migrations from. Tables live with their resource. */
export { tenants } from './platform/database/tenancy.ts';
export { languages } from './resources/languages/table.ts';
export { roles } from './resources/roles/table.ts';
export { users, userProfilePictures, requiredProfileKeys } from './resources/users/table.ts';
export { termsOfUse, acceptedPolicies } from './resources/terms-of-use/table.ts';
export { accessTokens, loginFailures } from './resources/auth/table.ts';
export { departments, departmentUsers, departmentNotificationSettings, departmentAttributeSets } from './resources/departments/table.ts';
export { attributeSets } from './resources/attribute-sets/table.ts';
export { entityPermissions } from './resources/entity-permissions/table.ts';
export { instanceSecrets } from './platform/secrets/table.ts';
export { notificationSettings } from './resources/notification-settings/table.ts';
export { userLoginTokens } from './resources/login-tokens/table.ts';
export { menuItems } from './resources/menu-items/table.ts';
export { forms, taskTemplates, formFields, taskExecutions, formSubmissions } from './resources/forms/table.ts';
export { defaultValueSources } from './resources/default-value-sources/table.ts';
export { automations, webhookDeliveries, webhookDeliveryAttempts } from './resources/automations/table.ts';
export { notificationDispatches, notifications } from './resources/notifications/table.ts';
export { pushSubscriptions } from './resources/push/table.ts';
