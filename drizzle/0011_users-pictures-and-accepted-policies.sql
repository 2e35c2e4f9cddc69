CREATE TABLE "accepted_policies" (
	"tenant_id" bigint NOT NULL,
	"user_id" bigint NOT NULL,
	"terms_of_use_id" bigint NOT NULL,
	"accepted_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "accepted_policies_tenant_id_user_id_terms_of_use_id_pk" PRIMARY KEY("tenant_id","user_id","terms_of_use_id")
);
--> statement-breakpoint
ALTER TABLE "accepted_policies" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "terms_of_use" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "terms_of_use_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"title" text NOT NULL,
	"version" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "terms_of_use_tenant_id_id_key" UNIQUE("tenant_id","id")
);
--> statement-breakpoint
ALTER TABLE "terms_of_use" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
CREATE TABLE "user_profile_pictures" (
	"tenant_id" bigint NOT NULL,
	"user_id" bigint NOT NULL,
	"media_type" text NOT NULL,
	"file_name" text NOT NULL,
	"content" "bytea" NOT NULL,
	"etag" text NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "user_profile_pictures_tenant_id_user_id_pk" PRIMARY KEY("tenant_id","user_id")
);
--> statement-breakpoint
ALTER TABLE "user_profile_pictures" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "accepted_policies" ADD CONSTRAINT "accepted_policies_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "accepted_policies" ADD CONSTRAINT "accepted_policies_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "accepted_policies" ADD CONSTRAINT "accepted_policies_terms_fk" FOREIGN KEY ("tenant_id","terms_of_use_id") REFERENCES "public"."terms_of_use"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "terms_of_use" ADD CONSTRAINT "terms_of_use_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_profile_pictures" ADD CONSTRAINT "user_profile_pictures_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_profile_pictures" ADD CONSTRAINT "user_profile_pictures_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "accepted_policies_user_idx" ON "accepted_policies" USING btree ("tenant_id","user_id");--> statement-breakpoint
CREATE POLICY "accepted_policies_tenant_isolation" ON "accepted_policies" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "terms_of_use_tenant_isolation" ON "terms_of_use" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
CREATE POLICY "user_profile_pictures_tenant_isolation" ON "user_profile_pictures" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);