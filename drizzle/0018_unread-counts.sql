CREATE TABLE "notification_unread_counts" (
	"tenant_id" bigint NOT NULL,
	"user_id" bigint NOT NULL,
	"unread" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "notification_unread_counts_tenant_id_user_id_pk" PRIMARY KEY("tenant_id","user_id")
);
--> statement-breakpoint
ALTER TABLE "notification_unread_counts" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "notification_unread_counts" ADD CONSTRAINT "notification_unread_counts_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "notification_unread_counts" ADD CONSTRAINT "notification_unread_counts_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE POLICY "notification_unread_counts_tenant_isolation" ON "notification_unread_counts" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
-- Hand-written below.
-- The counts are kept by the triggers alone: the application role only reads them.
REVOKE INSERT, UPDATE, DELETE ON notification_unread_counts FROM atrium_app;
--> statement-breakpoint
-- Each trigger runs once per statement over the rows it changed (transition tables), so a
-- delivery batch of thousands of notifications costs one statement more, not one per row.
-- SECURITY DEFINER: the counts follow every change to notifications, whichever role sends
-- it (the application role under its tenant, or the owner's jobs across tenants); the
-- transition tables hold only rows that statement was allowed to change.
CREATE FUNCTION atrium_unread_counts_after_insert() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  INSERT INTO notification_unread_counts AS c (tenant_id, user_id, unread)
  SELECT tenant_id, notifiable_id, count(*) FROM inserted
  WHERE notifiable_type = 'user' AND read_at IS NULL
  GROUP BY tenant_id, notifiable_id ORDER BY tenant_id, notifiable_id
  ON CONFLICT (tenant_id, user_id) DO UPDATE SET unread = c.unread + excluded.unread;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE FUNCTION atrium_unread_counts_after_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  INSERT INTO notification_unread_counts AS c (tenant_id, user_id, unread)
  SELECT n.tenant_id, n.notifiable_id, sum((n.read_at IS NULL)::int - (o.read_at IS NULL)::int)
  FROM updated n JOIN previous o ON o.tenant_id = n.tenant_id AND o.id = n.id
  WHERE n.notifiable_type = 'user' AND (n.read_at IS NULL) <> (o.read_at IS NULL)
  GROUP BY n.tenant_id, n.notifiable_id ORDER BY n.tenant_id, n.notifiable_id
  ON CONFLICT (tenant_id, user_id) DO UPDATE SET unread = c.unread + excluded.unread;
  RETURN NULL;
END
$$;
--> statement-breakpoint
-- Deleting only lowers existing counts: when the user (or tenant) itself is deleted, its
-- count row may already be gone, and none is made again.
CREATE FUNCTION atrium_unread_counts_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
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
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_unread_counts_after_insert(), atrium_unread_counts_after_update(), atrium_unread_counts_after_delete() FROM PUBLIC;
--> statement-breakpoint
CREATE TRIGGER notifications_unread_counts_insert AFTER INSERT ON notifications
REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION atrium_unread_counts_after_insert();
--> statement-breakpoint
CREATE TRIGGER notifications_unread_counts_update AFTER UPDATE ON notifications
REFERENCING OLD TABLE AS previous NEW TABLE AS updated FOR EACH STATEMENT EXECUTE FUNCTION atrium_unread_counts_after_update();
--> statement-breakpoint
CREATE TRIGGER notifications_unread_counts_delete AFTER DELETE ON notifications
REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION atrium_unread_counts_after_delete();
--> statement-breakpoint
-- The counts of the notifications already stored (the triggers hold writes off until this commits).
INSERT INTO notification_unread_counts (tenant_id, user_id, unread)
SELECT tenant_id, notifiable_id, count(*) FROM notifications
WHERE notifiable_type = 'user' AND read_at IS NULL
GROUP BY tenant_id, notifiable_id;
