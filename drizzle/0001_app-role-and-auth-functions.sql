-- The application connects with role atrium_app (see src/platform/database/database.ts):
-- no superuser, no BYPASSRLS, and it owns no table, so every row-level security policy
-- applies to it (docs/tenancy-and-security.md). The migrating role owns the tables.
DO $$
BEGIN
  CREATE ROLE atrium_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
EXCEPTION
  -- Roles are cluster-wide; several databases (tests) may race to create it.
  WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;
--> statement-breakpoint
DO $$
BEGIN
  EXECUTE format('GRANT atrium_app TO %I', current_user);
EXCEPTION
  WHEN duplicate_object OR unique_violation OR invalid_grant_operation THEN NULL;
END
$$;
--> statement-breakpoint
GRANT USAGE ON SCHEMA public TO atrium_app;
--> statement-breakpoint
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO atrium_app;
--> statement-breakpoint
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO atrium_app;
--> statement-breakpoint
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO atrium_app;
--> statement-breakpoint
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO atrium_app;
--> statement-breakpoint
-- Tenants are not writable by the application role; tenant:create runs as the owner.
REVOKE INSERT, UPDATE, DELETE ON tenants FROM atrium_app;
--> statement-breakpoint
-- Sign-in needs the tenant before any tenant context exists: this is the only way the
-- application role can look a tenant up by slug.
CREATE FUNCTION atrium_find_tenant(p_slug text) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
  SELECT id FROM tenants WHERE slug = p_slug
$$;
--> statement-breakpoint
-- Bearer authentication: a token hash to the identity behind it, only while the token is
-- valid (not revoked or expired, user active and not deleted, not issued before the user
-- was marked for logout). The tenant comes from the token, never from the request.
CREATE FUNCTION atrium_authenticate(p_token_hash bytea)
RETURNS TABLE (tenant_id bigint, user_id bigint, token_id bigint, permissions text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
  SELECT t.tenant_id, t.user_id, t.id,
         CASE WHEN r.active THEN r.permissions ELSE '{}'::text[] END
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
REVOKE ALL ON FUNCTION atrium_find_tenant(text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_authenticate(bytea) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_find_tenant(text) TO atrium_app;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_authenticate(bytea) TO atrium_app;
