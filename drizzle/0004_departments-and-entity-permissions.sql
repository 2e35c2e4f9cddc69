CREATE TABLE "department_users" (
	"tenant_id" bigint NOT NULL,
	"department_id" bigint NOT NULL,
	"user_id" bigint NOT NULL,
	CONSTRAINT "department_users_tenant_id_department_id_user_id_pk" PRIMARY KEY("tenant_id","department_id","user_id")
);
--> statement-breakpoint
ALTER TABLE "department_users" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "departments" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "departments_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"name" text NOT NULL,
	"user_id" bigint,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "departments_tenant_id_id_key" UNIQUE("tenant_id","id"),
	CONSTRAINT "departments_tenant_id_name_key" UNIQUE("tenant_id","name")
);
--> statement-breakpoint
ALTER TABLE "departments" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "entity_permissions" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "entity_permissions_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"entity_type" text NOT NULL,
	"entity_id" bigint NOT NULL,
	"subject_type" text NOT NULL,
	"subject_id" bigint NOT NULL,
	CONSTRAINT "entity_permissions_unique" UNIQUE("tenant_id","entity_type","entity_id","subject_type","subject_id"),
	CONSTRAINT "entity_permissions_subject_known" CHECK ("entity_permissions"."subject_type" IN ('user', 'role', 'department'))
);
--> statement-breakpoint
ALTER TABLE "entity_permissions" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "department_users" ADD CONSTRAINT "department_users_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_users" ADD CONSTRAINT "department_users_department_fk" FOREIGN KEY ("tenant_id","department_id") REFERENCES "public"."departments"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_users" ADD CONSTRAINT "department_users_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "departments" ADD CONSTRAINT "departments_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "departments" ADD CONSTRAINT "departments_creator_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "entity_permissions" ADD CONSTRAINT "entity_permissions_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "department_users_user_idx" ON "department_users" USING btree ("tenant_id","user_id");--> statement-breakpoint
CREATE INDEX "entity_permissions_subject_idx" ON "entity_permissions" USING btree ("tenant_id","subject_type","subject_id");--> statement-breakpoint
CREATE POLICY "department_users_tenant_isolation" ON "department_users" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "departments_tenant_isolation" ON "departments" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "entity_permissions_tenant_isolation" ON "entity_permissions" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);