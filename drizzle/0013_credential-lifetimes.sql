-- Credentials die with the authority behind them.
--
-- 1. Bearer authentication also says whether the user must change their password
--    (`request_password_change`), so the server can restrict such a session in the same
--    single query. Adding an output column changes the function's result type, which
--    CREATE OR REPLACE cannot do: it is dropped and created again (same checks as before).
DROP FUNCTION atrium_authenticate(bytea);
--> statement-breakpoint
CREATE FUNCTION atrium_authenticate(p_token_hash bytea)
RETURNS TABLE (tenant_id bigint, user_id bigint, token_id bigint, permissions text[], password_change_required boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
  SELECT t.tenant_id, t.user_id, t.id,
         CASE WHEN r.active THEN r.permissions ELSE '{}'::text[] END,
         u.request_password_change
  FROM access_tokens t
  JOIN users u ON u.tenant_id = t.tenant_id AND u.id = t.user_id
  JOIN roles r ON r.tenant_id = u.tenant_id AND r.id = u.role_id
  WHERE t.token_hash = p_token_hash
    AND t.revoked_at IS NULL
    AND t.expires_at > now()
    AND u.active
    AND u.deleted_at IS NULL
    AND (u.logout_marked_at IS NULL OR t.created_at > u.logout_marked_at)
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_authenticate(bytea) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_authenticate(bytea) TO atrium_app;
--> statement-breakpoint
-- 2. A one-time login token signs its user in only while the authority that issued it
--    still stands, judged at consumption as at creation:
--    - the creator exists, is active, not deleted, and still holds `login-tokens.administer`
--      (an inactive role grants nothing), and was not marked for logout after the token
--      was created (a session that may have been stolen ends with what it minted);
--    - the user it signs in holds no permission the creator lacks, judged by what the
--      user's role lists, active or not (an inactive role can be reactivated at any time);
--    - the user it signs in holds no right through entity permissions that the creator
--      lacks: no entity (form, task template, menu item) whose permissions name the user
--      directly, through their role or through a department, unless they name the creator
--      too or the creator's role lists the permission administering that type of entity
--      (`tasks.administer` for forms and task templates, `menu-items.administer` for menu
--      items). The same rule as `usersHoldingRightsBeyond` in
--      src/resources/entity-permissions/rules.ts, where the token is created;
--    - the user it signs in is active, not deleted, and was not marked for logout after the
--      token was created (a logout mark ends pending tokens like it ends sessions).
--    A token failing any check is left untouched and yields nothing (401 to the caller).
--    Same signature and row locking as before: of two concurrent uses exactly one wins.
--    This function runs as the table owner, past row-level security: every lookup is
--    bound to the token's tenant.
CREATE OR REPLACE FUNCTION atrium_consume_login_token(p_token_hash bytea)
RETURNS TABLE (tenant_id bigint, login_user_id bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
  UPDATE user_login_tokens t
     SET used_at = now(), deleted_at = now()
    FROM users u
    JOIN roles ur ON ur.tenant_id = u.tenant_id AND ur.id = u.role_id,
         users c
    JOIN roles cr ON cr.tenant_id = c.tenant_id AND cr.id = c.role_id
   WHERE t.token_hash = p_token_hash
     AND t.deleted_at IS NULL
     AND t.expires_at > now()
     AND u.tenant_id = t.tenant_id
     AND u.id = t.login_user_id
     AND u.active
     AND u.deleted_at IS NULL
     AND (u.logout_marked_at IS NULL OR u.logout_marked_at < t.created_at)
     AND c.tenant_id = t.tenant_id
     AND c.id = t.user_id
     AND c.active
     AND c.deleted_at IS NULL
     AND (c.logout_marked_at IS NULL OR c.logout_marked_at < t.created_at)
     AND cr.active
     AND 'login-tokens.administer' = ANY (cr.permissions)
     AND ur.permissions <@ cr.permissions
     AND NOT EXISTS (
       SELECT 1
         FROM entity_permissions e
        WHERE e.tenant_id = t.tenant_id
          AND ((e.subject_type = 'user' AND e.subject_id = u.id)
            OR (e.subject_type = 'role' AND e.subject_id = u.role_id)
            OR (e.subject_type = 'department' AND e.subject_id IN (
                  SELECT du.department_id FROM department_users du
                   WHERE du.tenant_id = t.tenant_id AND du.user_id = u.id)))
          AND NOT (e.entity_type IN ('form', 'taskTemplate') AND 'tasks.administer' = ANY (cr.permissions))
          AND NOT (e.entity_type = 'menuItem' AND 'menu-items.administer' = ANY (cr.permissions))
          AND NOT EXISTS (
            SELECT 1
              FROM entity_permissions p
             WHERE p.tenant_id = t.tenant_id
               AND p.entity_type = e.entity_type
               AND p.entity_id = e.entity_id
               AND ((p.subject_type = 'user' AND p.subject_id = c.id)
                 OR (p.subject_type = 'role' AND p.subject_id = c.role_id)
                 OR (p.subject_type = 'department' AND p.subject_id IN (
                       SELECT du.department_id FROM department_users du
                        WHERE du.tenant_id = t.tenant_id AND du.user_id = c.id)))))
  RETURNING t.tenant_id, t.login_user_id
$$;
