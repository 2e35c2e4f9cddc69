-- The functions that run before a tenant is known (a bearer token's or SCIM token's look-up,
-- a tenant by its slug, a login token's tenant) and a login token's consumption, defined
-- again in PL/pgSQL with the same signature, attributes and query. An SQL-language function
-- that is not inlined (a security-definer one never is) parses and plans its query on every
-- call: about 0.3 ms of the server's time a call on a quiet 2-core machine, where the same
-- query as a prepared statement takes 0.07 to 0.09 ms and the PL/pgSQL function 0.08 to
-- 0.09, because PL/pgSQL keeps the plan for the rest of the session. Every request whose
-- token is not remembered pays one such call, and a write that holds the caller's session
-- one more (docs/performance.md#authentication-functions). Citus cannot plan such an SQL
-- function's parameters across shards either; `citus:distribute` used to redefine them in
-- PL/pgSQL for that reason (docs/scaling.md). `#variable_conflict use_column`: the output
-- columns are variables in PL/pgSQL, and the queries' columns of the same names win, as
-- they do in SQL.
CREATE OR REPLACE FUNCTION public.atrium_authenticate(p_token_hash bytea)
 RETURNS TABLE(tenant_id bigint, user_id bigint, token_id bigint, permissions text[], password_change_required boolean, first_name text, last_name text, username text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
  RETURN QUERY
    SELECT t.tenant_id, t.user_id, t.id,
           CASE WHEN r.active THEN r.permissions ELSE '{}'::text[] END,
           u.request_password_change,
           u.first_name, u.last_name, u.username
    FROM access_tokens t
    JOIN users u ON u.tenant_id = t.tenant_id AND u.id = t.user_id
    JOIN roles r ON r.tenant_id = u.tenant_id AND r.id = u.role_id
    WHERE t.token_hash = p_token_hash
      AND t.revoked_at IS NULL
      AND t.expires_at > now()
      AND u.active
      AND u.deleted_at IS NULL
      AND (u.logout_marked_at IS NULL OR t.created_at > u.logout_marked_at);
END
$function$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION public.atrium_authenticate_scim(p_token_hash bytea)
 RETURNS TABLE(tenant_id bigint, token_id bigint, permissions text[], last_used_at timestamp with time zone, name text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
  RETURN QUERY
    SELECT t.tenant_id, t.id, r.permissions, t.last_used_at, t.name
    FROM scim_tokens t
    JOIN users u ON u.tenant_id = t.tenant_id AND u.id = t.user_id
    JOIN roles r ON r.tenant_id = u.tenant_id AND r.id = u.role_id
    WHERE t.token_hash = p_token_hash
      AND (t.expires_at IS NULL OR t.expires_at > now())
      AND u.active
      AND u.deleted_at IS NULL
      AND (u.logout_marked_at IS NULL OR t.created_at > u.logout_marked_at)
      AND r.active
      AND r.permissions @> ARRAY['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative'];
END
$function$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION public.atrium_find_tenant(p_slug text)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
  RETURN (
    SELECT id FROM tenants WHERE slug = p_slug
  );
END
$function$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION public.atrium_login_token_tenant(p_token_hash bytea)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
  RETURN (
    SELECT tenant_id FROM user_login_tokens WHERE token_hash = p_token_hash ORDER BY tenant_id LIMIT 1
  );
END
$function$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION public.atrium_consume_login_token(p_token_hash bytea)
 RETURNS TABLE(tenant_id bigint, login_user_id bigint, first_name text, last_name text, username text)
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
  RETURN QUERY
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
    RETURNING t.tenant_id, t.login_user_id, u.first_name, u.last_name, u.username;
END
$function$;
