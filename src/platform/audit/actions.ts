/**
 * Every action an audit event may name (openapi/components/audit-events.yaml#/AuditAction
 * lists the same, and a test compares them): `<target type>.<past participle>`, stable
 * once released.
 */
export const AUDIT_ACTIONS = [
  'tenant.created',
  'user.created',
  'user.updated',
  'user.deleted',
  'user.restored',
  'user.blacked_out',
  'user.marked_for_logout',
  'user.password_changed',
  'user_settings.updated',
  'access_token.created',
  'role.created',
  'role.updated',
  'role.deleted',
  'login_token.created',
  'login_token.deleted',
  'login_token.consumed',
  'department.created',
  'department.updated',
  'department.deleted',
  'menu_item.created',
  'menu_item.updated',
  'menu_item.deleted',
  'attribute_set.created',
  'attribute_set.updated',
  'attribute_set.deleted',
  'automation.created',
  'automation.updated',
  'automation.deleted',
  'automation.run',
  'form.created',
  'form.updated',
  'form.deleted',
  'task_template.created',
  'task_template.updated',
  'task_template.deleted',
  'form_field.created',
  'form_field.updated',
  'form_field.deleted',
  'default_value_source.created',
  'default_value_source.updated',
  'default_value_source.deleted',
  'push_subscription.created',
  'push_subscription.deleted',
  'notification.sent',
  'notifications.reset',
  'scim_token.created',
  'scim_token.revoked',
] as const;

export type AuditAction = (typeof AUDIT_ACTIONS)[number];

/** Who may act: a signed-in user, an identity provider's SCIM token, an operator at the command line, or Atrium itself (a job). */
export const ACTOR_TYPES = ['user', 'scim_token', 'command_line', 'system'] as const;
export type ActorType = (typeof ACTOR_TYPES)[number];
