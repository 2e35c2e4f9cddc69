CREATE TABLE "required_profile_keys" (
	"tenant_id" bigint NOT NULL,
	"key" text NOT NULL,
	CONSTRAINT "required_profile_keys_tenant_id_key_pk" PRIMARY KEY("tenant_id","key"),
	CONSTRAINT "required_profile_keys_key_known" CHECK ("required_profile_keys"."key" IN ('profile_picture', 'street', 'zipcode', 'city', 'email', 'phone', 'birthdate', 'gender'))
);
--> statement-breakpoint
ALTER TABLE "required_profile_keys" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "required_profile_keys" ADD CONSTRAINT "required_profile_keys_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE POLICY "required_profile_keys_tenant_isolation" ON "required_profile_keys" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);