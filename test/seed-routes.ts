/**
 * Every route of ../shared/seed/interface.md, written from the document ("Endpoints").
 * The optional `{fileName?}` of the picture route is two OpenAPI paths.
 */
const DVS = '/api/administration/tasks-2/templates/fields/default-value-sources';

export const SEED_ROUTES = [
  // Task field default value sources
  `POST ${DVS}`,
  `PUT ${DVS}/{defaultValueSource}`,
  `DELETE ${DVS}/{defaultValueSource}`,
  `POST ${DVS}/form-field-value/form-fields`,
  `POST ${DVS}/form-field-value/form-fields/filters`,
  `POST ${DVS}/form-field-value/form-fields/filters/{filterKey}/options`,
  'GET /api/tasks-2/executions/{taskExecution}/default-values',
  // Users
  'GET /api/users',
  'GET /api/users/deleted',
  'GET /api/users/current',
  'GET /api/users/{userWithTrashed}',
  'GET /users/{user}/profile-picture',
  'GET /users/{user}/profile-picture/{fileName}',
  'GET /api/users/import-template',
  'POST /api/users',
  'POST /api/users/csv',
  'PUT /api/users/{user}',
  'POST /api/users/logout/{user}',
  'POST /api/users/restore/{userWithTrashed}',
  'DELETE /api/users/{user}',
  'DELETE /api/users/blackout/{userWithTrashed}',
  // Menu items
  'GET /api/menu/items',
  'GET /api/menu/items/{menuItem}',
  'GET /api/administration/menu/items',
  'GET /api/administration/menu/items/{menuItem}',
  'POST /api/administration/menu/items',
  'PUT /api/administration/menu/items/{menuItem}',
  'DELETE /api/administration/menu/items/{menuItem}',
  // User login tokens
  'GET /api/administration/users/login-tokens',
  'GET /api/administration/users/login-tokens/{userLoginToken}',
  'POST /api/administration/users/login-tokens',
  'POST /api/administration/users/login-tokens/email',
  'DELETE /api/administration/users/login-tokens/{userLoginToken}',
  // Departments
  'GET /api/departments',
  'GET /api/departments/{department}',
  'GET /api/departments/availability-information',
  'POST /api/departments',
  'PUT /api/departments/{department}',
  'DELETE /api/departments/{department}',
  // Notifications and notification settings
  'GET /api/notifications',
  'GET /api/notifications/count',
  'GET /api/notifications/type/{targetableType}',
  'GET /api/notifications/type/{targetableType}/{targetableId}',
  'GET /api/notifications/{notification}',
  'POST /api/notifications',
  'PUT /api/notifications',
  'PUT /api/notifications/type/{targetableType}',
  'PUT /api/notifications/type/{targetableType}/{targetableId}',
  'PUT /api/notifications/{notification}',
  'GET /api/notification-settings',
  'GET /api/notification-settings/{notificationSetting}',
  'DELETE /api/administration/notifications/reset',
];

/**
 * Seed routes that open issues have not yet brought into the spec, by issue. The test
 * fails when one of them appears in the spec, so this list only ever shrinks.
 */
export const PENDING: Record<string, string[]> = {
};
