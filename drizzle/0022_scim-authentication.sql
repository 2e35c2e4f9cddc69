-- A SCIM token authenticates an identity provider before any tenant is known, so its hash
-- is looked up by this function, which runs as the table owner, past row-level security.
-- A token yields its tenant only while it has not expired and the administrator who
-- minted it still stands: active, not deleted, not marked for logout since the token was
-- created, their role active and listing `users.administer` and every permission that
-- shows user fields (`users.view`, `users.view-personal`, `users.view-administrative`:
-- SCIM reads and writes all of them). It answers that administrator's permissions: SCIM writes are judged
-- against them (no escalation through a token), and `last_used_at` for the caller to
-- decide whether to record this use.
CREATE FUNCTION atrium_authenticate_scim(p_token_hash bytea)
RETURNS TABLE (tenant_id bigint, token_id bigint, permissions text[], last_used_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
  SELECT t.tenant_id, t.id, r.permissions, t.last_used_at
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
