-- A tenant the planner's statistics do not yet know (created, or grown from nothing, since
-- the last ANALYZE) was estimated at no rows: the statistics' list of common tenants held
-- every sampled row, so what it leaves out was taken for empty. Every index that begins
-- with tenant_id then looked as good as any other for a look-up in that tenant, and the
-- statements prepared in that state kept a plan that reads the tenant's users one by one:
-- a SCIM look-up by userName, the any-case userName check and the read of a user by id
-- each scanned every user of a tenant being provisioned (3 to 5 ms at 10,000 users,
-- against 0.02), until autovacuum analyzed the table again, which it does after a tenth
-- of its rows changed. With a statistics target of 1 on users.tenant_id, the planner keeps
-- the largest tenant's share and estimates any other tenant at the average of the rest, so
-- a look-up by (tenant_id, username_lower) or by the primary key stays the index scan it
-- is (docs/performance.md#scim-provisioning). Where `atrium citus:distribute` has
-- distributed `users`, each worker plans its shard's statements with the shard's own
-- statistics, and Citus refuses SET STATISTICS on a distributed table: nothing is done.
DO $migration$
DECLARE
  distributed boolean := false;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = ''users''::regclass)' INTO distributed;
  END IF;
  IF distributed THEN
    RETURN;
  END IF;
  ALTER TABLE users ALTER COLUMN tenant_id SET STATISTICS 1;
  ANALYZE users (tenant_id);
END
$migration$;
