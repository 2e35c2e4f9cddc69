-- A delete of notifications lowered the counts in the order its join met them, while a
-- delivery's insert (and a read's update) raises them in (tenant_id, user_id) order: a
-- purge of several users' notifications and a delivery to the same users could lock the
-- same count rows in opposite orders and deadlock. The counts are now locked in key order
-- first, as the other two triggers take them. Where `atrium citus:distribute` has
-- distributed `notifications`, it has put its own forms of the three functions in place
-- (src/resources/notifications/citus.ts), which already take the counts one by one in key
-- order: they are left as they are.
DO $migration$
DECLARE
  distributed boolean := false;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = ''notifications''::regclass)' INTO distributed;
  END IF;
  IF distributed THEN
    RETURN;
  END IF;
  CREATE OR REPLACE FUNCTION atrium_unread_counts_after_delete() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
  BEGIN
    PERFORM 1 FROM notification_unread_counts c
    WHERE (c.tenant_id, c.user_id) IN (
      SELECT tenant_id, notifiable_id FROM deleted WHERE notifiable_type = 'user' AND read_at IS NULL
    )
    ORDER BY c.tenant_id, c.user_id
    FOR UPDATE OF c;
    UPDATE notification_unread_counts c SET unread = c.unread - d.n
    FROM (
      SELECT tenant_id, notifiable_id, count(*) AS n FROM deleted
      WHERE notifiable_type = 'user' AND read_at IS NULL
      GROUP BY tenant_id, notifiable_id
    ) d
    WHERE c.tenant_id = d.tenant_id AND c.user_id = d.notifiable_id;
    RETURN NULL;
  END
  $$;
END
$migration$;
