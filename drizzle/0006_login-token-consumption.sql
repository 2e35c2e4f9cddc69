-- Signing in with a one-time login token (POST /api/auth/login-token) happens before any
-- tenant context exists, so row-level security would hide every token from atrium_app.
-- This narrow function is the only way around it: given the hash of a (signature-checked)
-- token value, it consumes the token and says whom it signs in. The UPDATE takes the row
-- lock and re-checks `deleted_at IS NULL` after a concurrent consumer commits, so of two
-- concurrent uses exactly one gets a row back. Tokens whose user is inactive or deleted
-- are left untouched and yield nothing.
CREATE FUNCTION atrium_consume_login_token(p_token_hash bytea)
RETURNS TABLE (tenant_id bigint, login_user_id bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
  UPDATE user_login_tokens t
     SET used_at = now(), deleted_at = now()
    FROM users u
   WHERE t.token_hash = p_token_hash
     AND t.deleted_at IS NULL
     AND t.expires_at > now()
     AND u.tenant_id = t.tenant_id
     AND u.id = t.login_user_id
     AND u.active
     AND u.deleted_at IS NULL
  RETURNING t.tenant_id, t.login_user_id
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_consume_login_token(bytea) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_consume_login_token(bytea) TO atrium_app;
