-- Signing in with a one-time login token consumes the token and writes the new session in
-- one transaction. The consumption ran as the table owner (`atrium_consume_login_token`,
-- security definer) and the session as `atrium_app`; Citus refuses a transaction that
-- reaches a tenant's shards as a second role once the first one wrote there
-- (docs/scaling.md). Now only the look-up of the token's tenant runs as the owner, and it
-- only reads: sign-in sets that tenant, then consumes the token as `atrium_app`, under
-- row-level security, with the same function, checks and row locking as before
-- (migration `credential-lifetimes`). A hash that names no token yields no tenant.
CREATE FUNCTION atrium_login_token_tenant(p_token_hash bytea) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
  SELECT tenant_id FROM user_login_tokens WHERE token_hash = p_token_hash ORDER BY tenant_id LIMIT 1
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_login_token_tenant(bytea) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_login_token_tenant(bytea) TO atrium_app;
--> statement-breakpoint
ALTER FUNCTION atrium_consume_login_token(bytea) SECURITY INVOKER;
