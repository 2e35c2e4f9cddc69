CREATE TABLE "audit_events" (
	"id" uuid DEFAULT gen_random_uuid() NOT NULL,
	"tenant_id" bigint NOT NULL,
	"occurred_at" timestamp with time zone DEFAULT now() NOT NULL,
	"action" text NOT NULL,
	"actor_type" text NOT NULL,
	"actor_id" bigint,
	"actor_label" text,
	"target_type" text NOT NULL,
	"target_id" text,
	"target_label" text,
	"changes" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"details" jsonb,
	"operation_id" text,
	"request_id" text,
	"client_address" text,
	"user_agent" text,
	"command" text,
	"job" text,
	CONSTRAINT "audit_events_tenant_id_id_pk" PRIMARY KEY("tenant_id","id")
);
--> statement-breakpoint
ALTER TABLE "audit_events" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "roles" DROP CONSTRAINT "roles_permissions_known";--> statement-breakpoint
ALTER TABLE "audit_events" ADD CONSTRAINT "audit_events_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "audit_events_occurred_idx" ON "audit_events" USING btree ("tenant_id","occurred_at" DESC NULLS LAST,"id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "audit_events_actor_idx" ON "audit_events" USING btree ("tenant_id","actor_id","occurred_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "audit_events_target_idx" ON "audit_events" USING btree ("tenant_id","target_type","target_id","occurred_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "audit_events_action_idx" ON "audit_events" USING btree ("tenant_id","action" text_pattern_ops);--> statement-breakpoint
CREATE INDEX "audit_events_request_idx" ON "audit_events" USING btree ("tenant_id","request_id") WHERE "audit_events"."request_id" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "audit_events_purge_idx" ON "audit_events" USING btree ("occurred_at");--> statement-breakpoint
ALTER TABLE "roles" ADD CONSTRAINT "roles_permissions_known" CHECK ("roles"."permissions" <@ ARRAY['users.view', 'users.view-personal', 'users.view-administrative', 'users.administer', 'departments.manage', 'menu-items.administer', 'login-tokens.administer', 'notifications.send', 'notifications.administer', 'tasks.administer', 'automations.administer', 'audit.view']::text[]);--> statement-breakpoint
CREATE POLICY "audit_events_tenant_isolation" ON "audit_events" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
-- The seeded Administrator role holds every permission: it gains the new one. A role of that name that no longer holds all the others was changed on purpose and is left as it is.
UPDATE "roles" SET "permissions" = array_append("permissions", 'audit.view')
WHERE "name" = 'Administrator'
  AND "permissions" @> ARRAY['users.view', 'users.view-personal', 'users.view-administrative', 'users.administer', 'departments.manage', 'menu-items.administer', 'login-tokens.administer', 'notifications.send', 'notifications.administer', 'tasks.administer', 'automations.administer']::text[]
  AND NOT ('audit.view' = ANY("permissions"));
