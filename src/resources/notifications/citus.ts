/**
 * The unread counts on Citus (docs/scaling.md#functions-citus-cannot-run-as-they-are).
 * The counts are kept by statement-level triggers on `notifications` (migration 0018):
 * each statement adds up its rows per user and writes the sums in one `INSERT … SELECT`
 * from its transition table. On Citus the triggers run on each shard of `notifications`, over that shard's
 * rows, and Citus plans a statement on a distributed table as a distributed one, which
 * cannot read the transition table ("could not find named tuplestore"). These forms read
 * the transition table alone (a plain query) and write each user's sum with a statement
 * of its own, which Citus routes to the co-located shard of `notification_unread_counts`
 * on the same node (a trigger on a shard may write there, and nowhere else). Same sums,
 * same signatures: `atrium citus:distribute` defines them in place of the others.
 */
export const unreadCountTriggersOnCitus: readonly string[] = [
  `CREATE OR REPLACE FUNCTION atrium_unread_counts_after_insert() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT tenant_id, notifiable_id AS user_id, count(*) AS n FROM inserted
           WHERE notifiable_type = 'user' AND read_at IS NULL
           GROUP BY tenant_id, notifiable_id ORDER BY tenant_id, notifiable_id LOOP
    INSERT INTO notification_unread_counts AS c (tenant_id, user_id, unread) VALUES (r.tenant_id, r.user_id, r.n)
    ON CONFLICT (tenant_id, user_id) DO UPDATE SET unread = c.unread + excluded.unread;
  END LOOP;
  RETURN NULL;
END
$$`,
  `CREATE OR REPLACE FUNCTION atrium_unread_counts_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT n.tenant_id, n.notifiable_id AS user_id, sum((n.read_at IS NULL)::int - (o.read_at IS NULL)::int) AS n
           FROM updated n JOIN previous o ON o.tenant_id = n.tenant_id AND o.id = n.id
           WHERE n.notifiable_type = 'user' AND (n.read_at IS NULL) <> (o.read_at IS NULL)
           GROUP BY n.tenant_id, n.notifiable_id ORDER BY n.tenant_id, n.notifiable_id LOOP
    INSERT INTO notification_unread_counts AS c (tenant_id, user_id, unread) VALUES (r.tenant_id, r.user_id, r.n)
    ON CONFLICT (tenant_id, user_id) DO UPDATE SET unread = c.unread + excluded.unread;
  END LOOP;
  RETURN NULL;
END
$$`,
  `CREATE OR REPLACE FUNCTION atrium_unread_counts_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT tenant_id, notifiable_id AS user_id, count(*) AS n FROM deleted
           WHERE notifiable_type = 'user' AND read_at IS NULL
           GROUP BY tenant_id, notifiable_id ORDER BY tenant_id, notifiable_id LOOP
    UPDATE notification_unread_counts c SET unread = c.unread - r.n WHERE c.tenant_id = r.tenant_id AND c.user_id = r.user_id;
  END LOOP;
  RETURN NULL;
END
$$`,
];
