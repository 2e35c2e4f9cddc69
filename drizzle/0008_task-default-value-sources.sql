CREATE TABLE "default_value_sources" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "default_value_sources_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"form_field_id" bigint NOT NULL,
	"type" text NOT NULL,
	"config" jsonb NOT NULL,
	"source_entity_type" text,
	"source_entity_id" bigint,
	"sort_number" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "default_value_sources_tenant_id_id_key" UNIQUE("tenant_id","id"),
	CONSTRAINT "default_value_sources_type_known" CHECK ("default_value_sources"."type" IN ('formFieldValue', 'systemVariable')),
	CONSTRAINT "default_value_sources_entity_pair" CHECK ("default_value_sources"."source_entity_id" IS NULL OR "default_value_sources"."source_entity_type" IS NOT NULL)
);
--> statement-breakpoint
ALTER TABLE "default_value_sources" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "form_fields" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "form_fields_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"form_id" bigint,
	"task_template_id" bigint,
	"name" text NOT NULL,
	"field_type" text NOT NULL,
	"options" jsonb,
	"sort_number" integer NOT NULL,
	"deleted_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "form_fields_tenant_id_id_key" UNIQUE("tenant_id","id"),
	CONSTRAINT "form_fields_one_parent" CHECK (("form_fields"."form_id" IS NULL) <> ("form_fields"."task_template_id" IS NULL)),
	CONSTRAINT "form_fields_type_known" CHECK ("form_fields"."field_type" IN ('text', 'number', 'date', 'boolean', 'select'))
);
--> statement-breakpoint
ALTER TABLE "form_fields" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "form_submissions" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "form_submissions_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"form_id" bigint,
	"task_template_id" bigint,
	"user_id" bigint NOT NULL,
	"values" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "form_submissions_tenant_id_id_key" UNIQUE("tenant_id","id"),
	CONSTRAINT "form_submissions_one_parent" CHECK (("form_submissions"."form_id" IS NULL) <> ("form_submissions"."task_template_id" IS NULL))
);
--> statement-breakpoint
ALTER TABLE "form_submissions" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "forms" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "forms_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"title" text NOT NULL,
	"form_type" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "forms_tenant_id_id_key" UNIQUE("tenant_id","id")
);
--> statement-breakpoint
ALTER TABLE "forms" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "task_executions" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "task_executions_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"task_template_id" bigint NOT NULL,
	"user_id" bigint NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "task_executions_tenant_id_id_key" UNIQUE("tenant_id","id")
);
--> statement-breakpoint
ALTER TABLE "task_executions" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "task_templates" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "task_templates_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"title" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "task_templates_tenant_id_id_key" UNIQUE("tenant_id","id")
);
--> statement-breakpoint
ALTER TABLE "task_templates" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "default_value_sources" ADD CONSTRAINT "default_value_sources_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "default_value_sources" ADD CONSTRAINT "default_value_sources_form_field_fk" FOREIGN KEY ("tenant_id","form_field_id") REFERENCES "public"."form_fields"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_fields" ADD CONSTRAINT "form_fields_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_fields" ADD CONSTRAINT "form_fields_form_fk" FOREIGN KEY ("tenant_id","form_id") REFERENCES "public"."forms"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_fields" ADD CONSTRAINT "form_fields_task_template_fk" FOREIGN KEY ("tenant_id","task_template_id") REFERENCES "public"."task_templates"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_submissions" ADD CONSTRAINT "form_submissions_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_submissions" ADD CONSTRAINT "form_submissions_form_fk" FOREIGN KEY ("tenant_id","form_id") REFERENCES "public"."forms"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_submissions" ADD CONSTRAINT "form_submissions_task_template_fk" FOREIGN KEY ("tenant_id","task_template_id") REFERENCES "public"."task_templates"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_submissions" ADD CONSTRAINT "form_submissions_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "forms" ADD CONSTRAINT "forms_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_executions" ADD CONSTRAINT "task_executions_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_executions" ADD CONSTRAINT "task_executions_task_template_fk" FOREIGN KEY ("tenant_id","task_template_id") REFERENCES "public"."task_templates"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_executions" ADD CONSTRAINT "task_executions_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_templates" ADD CONSTRAINT "task_templates_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "default_value_sources_field_order_idx" ON "default_value_sources" USING btree ("tenant_id","form_field_id","sort_number","id");--> statement-breakpoint
CREATE INDEX "default_value_sources_source_idx" ON "default_value_sources" USING btree ("tenant_id","source_entity_type","source_entity_id");--> statement-breakpoint
CREATE INDEX "form_fields_form_idx" ON "form_fields" USING btree ("tenant_id","form_id");--> statement-breakpoint
CREATE INDEX "form_fields_task_template_idx" ON "form_fields" USING btree ("tenant_id","task_template_id");--> statement-breakpoint
CREATE INDEX "form_submissions_latest_idx" ON "form_submissions" USING btree ("tenant_id","user_id","form_id","task_template_id","created_at","id");--> statement-breakpoint
CREATE INDEX "task_executions_user_idx" ON "task_executions" USING btree ("tenant_id","user_id");--> statement-breakpoint
CREATE POLICY "default_value_sources_tenant_isolation" ON "default_value_sources" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "form_fields_tenant_isolation" ON "form_fields" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "form_submissions_tenant_isolation" ON "form_submissions" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "forms_tenant_isolation" ON "forms" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "task_executions_tenant_isolation" ON "task_executions" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "task_templates_tenant_isolation" ON "task_templates" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);