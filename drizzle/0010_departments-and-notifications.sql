CREATE TABLE "attribute_sets" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "attribute_sets_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"name" text NOT NULL,
	"fields" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "attribute_sets_tenant_id_id_key" UNIQUE("tenant_id","id"),
	CONSTRAINT "attribute_sets_tenant_id_name_key" UNIQUE("tenant_id","name")
);
--> statement-breakpoint
ALTER TABLE "attribute_sets" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "department_attribute_sets" (
	"tenant_id" bigint NOT NULL,
	"department_id" bigint NOT NULL,
	"attribute_set_id" bigint NOT NULL,
	"sort_number" integer DEFAULT 0 NOT NULL,
	CONSTRAINT "department_attribute_sets_tenant_id_department_id_attribute_set_id_pk" PRIMARY KEY("tenant_id","department_id","attribute_set_id")
);
--> statement-breakpoint
ALTER TABLE "department_attribute_sets" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "department_notification_settings" (
	"tenant_id" bigint NOT NULL,
	"department_id" bigint NOT NULL,
	"notification_setting_id" bigint NOT NULL,
	CONSTRAINT "department_notification_settings_tenant_id_department_id_notification_setting_id_pk" PRIMARY KEY("tenant_id","department_id","notification_setting_id")
);
--> statement-breakpoint
ALTER TABLE "department_notification_settings" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "notification_dispatches" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"tenant_id" bigint NOT NULL,
	"type" text NOT NULL,
	"targetable_type" text,
	"targetable_id" bigint,
	"data" jsonb NOT NULL,
	"user_ids" bigint[] DEFAULT '{}'::bigint[] NOT NULL,
	"department_ids" bigint[] DEFAULT '{}'::bigint[] NOT NULL,
	"created_by" bigint,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"delivered_at" timestamp with time zone,
	CONSTRAINT "notification_dispatches_tenant_id_id_key" UNIQUE("tenant_id","id")
);
--> statement-breakpoint
ALTER TABLE "notification_dispatches" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "notifications" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"tenant_id" bigint NOT NULL,
	"dispatch_id" uuid NOT NULL,
	"type" text NOT NULL,
	"notifiable_type" text DEFAULT 'user' NOT NULL,
	"notifiable_id" bigint NOT NULL,
	"targetable_type" text,
	"targetable_id" bigint,
	"data" jsonb NOT NULL,
	"seen_at" timestamp with time zone,
	"read_at" timestamp with time zone,
	"emailed_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "notifications_dispatch_recipient_key" UNIQUE("tenant_id","dispatch_id","notifiable_id")
);
--> statement-breakpoint
ALTER TABLE "notifications" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "departments" ADD COLUMN "tags" text[] DEFAULT '{}'::text[] NOT NULL;--> statement-breakpoint
ALTER TABLE "departments" ADD COLUMN "attributes" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "attribute_sets" ADD CONSTRAINT "attribute_sets_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_attribute_sets" ADD CONSTRAINT "department_attribute_sets_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_attribute_sets" ADD CONSTRAINT "department_attribute_sets_department_fk" FOREIGN KEY ("tenant_id","department_id") REFERENCES "public"."departments"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_attribute_sets" ADD CONSTRAINT "department_attribute_sets_set_fk" FOREIGN KEY ("tenant_id","attribute_set_id") REFERENCES "public"."attribute_sets"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_notification_settings" ADD CONSTRAINT "department_notification_settings_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_notification_settings" ADD CONSTRAINT "department_notification_settings_department_fk" FOREIGN KEY ("tenant_id","department_id") REFERENCES "public"."departments"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_notification_settings" ADD CONSTRAINT "department_notification_settings_setting_fk" FOREIGN KEY ("tenant_id","notification_setting_id") REFERENCES "public"."notification_settings"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "notification_dispatches" ADD CONSTRAINT "notification_dispatches_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "notifications" ADD CONSTRAINT "notifications_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "notifications" ADD CONSTRAINT "notifications_notifiable_fk" FOREIGN KEY ("tenant_id","notifiable_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "department_attribute_sets_set_idx" ON "department_attribute_sets" USING btree ("tenant_id","attribute_set_id");--> statement-breakpoint
CREATE INDEX "notification_dispatches_pending_idx" ON "notification_dispatches" USING btree ("created_at") WHERE "notification_dispatches"."delivered_at" IS NULL;--> statement-breakpoint
CREATE INDEX "notifications_recipient_created_idx" ON "notifications" USING btree ("tenant_id","notifiable_id","created_at" DESC NULLS FIRST,"id" DESC NULLS FIRST);--> statement-breakpoint
CREATE INDEX "notifications_unread_idx" ON "notifications" USING btree ("tenant_id","notifiable_type","notifiable_id") WHERE "notifications"."read_at" IS NULL;--> statement-breakpoint
CREATE INDEX "notifications_recipient_target_idx" ON "notifications" USING btree ("tenant_id","notifiable_id","targetable_type","targetable_id");--> statement-breakpoint
CREATE INDEX "departments_tags_idx" ON "departments" USING gin ("tags");--> statement-breakpoint
CREATE POLICY "attribute_sets_tenant_isolation" ON "attribute_sets" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "department_attribute_sets_tenant_isolation" ON "department_attribute_sets" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "department_notification_settings_tenant_isolation" ON "department_notification_settings" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "notification_dispatches_tenant_isolation" ON "notification_dispatches" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "notifications_tenant_isolation" ON "notifications" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);