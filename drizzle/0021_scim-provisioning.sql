CREATE TABLE "scim_external_ids" (
	"tenant_id" bigint NOT NULL,
	"user_id" bigint NOT NULL,
	"external_id" text NOT NULL,
	CONSTRAINT "scim_external_ids_tenant_id_user_id_pk" PRIMARY KEY("tenant_id","user_id")
);
--> statement-breakpoint
ALTER TABLE "scim_external_ids" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "scim_settings" (
	"tenant_id" bigint PRIMARY KEY NOT NULL,
	"default_role_id" bigint
);
--> statement-breakpoint
ALTER TABLE "scim_settings" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "scim_tokens" (
	"id" bigint GENERATED ALWAYS AS IDENTITY (sequence name "scim_tokens_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"name" text NOT NULL,
	"user_id" bigint NOT NULL,
	"token_hash" "bytea" NOT NULL,
	"expires_at" timestamp with time zone,
	"last_used_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
	CONSTRAINT "scim_tokens_tenant_id_id_pk" PRIMARY KEY("tenant_id","id"),
	CONSTRAINT "scim_tokens_tenant_id_token_hash_key" UNIQUE("tenant_id","token_hash")
);
--> statement-breakpoint
ALTER TABLE "scim_tokens" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "scim_external_ids" ADD CONSTRAINT "scim_external_ids_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "scim_external_ids" ADD CONSTRAINT "scim_external_ids_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "scim_settings" ADD CONSTRAINT "scim_settings_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "scim_tokens" ADD CONSTRAINT "scim_tokens_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "scim_tokens" ADD CONSTRAINT "scim_tokens_creator_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "scim_external_ids_external_id_idx" ON "scim_external_ids" USING btree ("tenant_id","external_id");--> statement-breakpoint
CREATE INDEX "scim_tokens_token_hash_idx" ON "scim_tokens" USING btree ("token_hash");--> statement-breakpoint
CREATE POLICY "scim_external_ids_tenant_isolation" ON "scim_external_ids" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "scim_settings_tenant_isolation" ON "scim_settings" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "scim_tokens_tenant_isolation" ON "scim_tokens" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);