-- Audit labels known before the insert, and the trail's erasure in a form Citus accepts.
--
-- 1. An audit event names its actor by label: the signed-in user's name, a SCIM token's
--    name. They were subqueries among the event's INSERT values, which Citus refuses
--    ("subqueries are not supported within INSERT queries"). The look-ups that find the
--    actor now answer what the label is made of, so the label is plain text before the
--    insert: bearer authentication the user's first name, last name and username; SCIM
--    authentication the token's name; a login token's consumption the name of the user it
--    signs in. Adding output columns changes each function's result type, which CREATE OR
--    REPLACE cannot do: each is dropped and created again, with the same checks, the same
--    privileges, and (the consumption) the same caller's rights as before (migrations
--    `credential-lifetimes`, `scim-authentication`, `login-token-consumption-as-app`).
DROP FUNCTION atrium_authenticate(bytea);
--> statement-breakpoint
CREATE FUNCTION atrium_authenticate(p_token_hash bytea)
RETURNS TABLE (tenant_id bigint, user_id bigint, token_id bigint, permissions text[], password_change_required boolean,
               first_name text, last_name text, username text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
    AND (u.logout_marked_at IS NULL OR t.created_at > u.logout_marked_at)
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_authenticate(bytea) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_authenticate(bytea) TO atrium_app;
--> statement-breakpoint
DROP FUNCTION atrium_authenticate_scim(bytea);
--> statement-breakpoint
CREATE FUNCTION atrium_authenticate_scim(p_token_hash bytea)
RETURNS TABLE (tenant_id bigint, token_id bigint, permissions text[], last_used_at timestamptz, name text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
    AND r.permissions @> ARRAY['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative']
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_authenticate_scim(bytea) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_authenticate_scim(bytea) TO atrium_app;
--> statement-breakpoint
DROP FUNCTION atrium_consume_login_token(bytea);
--> statement-breakpoint
CREATE FUNCTION atrium_consume_login_token(p_token_hash bytea)
RETURNS TABLE (tenant_id bigint, login_user_id bigint, first_name text, last_name text, username text)
LANGUAGE sql VOLATILE SECURITY INVOKER SET search_path = public, pg_temp AS $$
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
  RETURNING t.tenant_id, t.login_user_id, u.first_name, u.last_name, u.username
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_consume_login_token(bytea) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_consume_login_token(bytea) TO atrium_app;
--> statement-breakpoint
-- 2. The blackout's rewrite of the trail (migration `audit-append-only`) built each
--    anonymized change with `jsonb_build_object`, which is only stable, inside CASE and
--    coalesce: Citus refuses a function that is not immutable there. `jsonb_set` on an
--    empty object builds the same `{"from": v, "to": v}` and is immutable. Same checks,
--    same rows rewritten, same answer.
CREATE OR REPLACE FUNCTION atrium_anonymize_audit_trail(p_user_id bigint, p_values jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  v_tenant bigint := nullif(current_setting('atrium.tenant_id', true), '')::bigint;
  v_label text;
  v_count integer;
BEGIN
  IF v_tenant IS NULL THEN
    RAISE EXCEPTION 'atrium_anonymize_audit_trail needs the transaction''s tenant' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF jsonb_typeof(p_values) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'atrium_anonymize_audit_trail takes the anonymized values as an object' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT username INTO v_label FROM users
  WHERE tenant_id = v_tenant AND id = p_user_id AND blacked_out_at IS NOT NULL;
  IF v_label IS NULL THEN
    RAISE EXCEPTION 'user % of the tenant is not blacked out', p_user_id USING ERRCODE = 'insufficient_privilege';
  END IF;
  UPDATE audit_events SET
    target_label = CASE WHEN target_type = 'user' AND target_id = p_user_id::text THEN v_label ELSE target_label END,
    actor_label = CASE WHEN actor_type = 'user' AND actor_id = p_user_id THEN v_label ELSE actor_label END,
    changes = CASE WHEN target_type = 'user' AND target_id = p_user_id::text THEN coalesce((
      SELECT jsonb_object_agg(c.key, CASE
        WHEN p_values ? c.key AND NOT (c.value ? 'changed')
          THEN jsonb_set(jsonb_set('{}'::jsonb, '{from}', p_values -> c.key), '{to}', p_values -> c.key)
        ELSE c.value END)
      FROM jsonb_each(changes) c), '{}'::jsonb) ELSE changes END
  WHERE tenant_id = v_tenant
    AND ((target_type = 'user' AND target_id = p_user_id::text) OR (actor_type = 'user' AND actor_id = p_user_id));
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
