CREATE TABLE "user_login_tokens" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "user_login_tokens_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"uuid" uuid DEFAULT gen_random_uuid() NOT NULL,
	"user_id" bigint NOT NULL,
	"login_user_id" bigint NOT NULL,
	"token_hash" "bytea" NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"used_at" timestamp with time zone,
	"deleted_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
	CONSTRAINT "user_login_tokens_tenant_id_id_key" UNIQUE("tenant_id","id"),
	CONSTRAINT "user_login_tokens_tenant_id_uuid_key" UNIQUE("tenant_id","uuid"),
	CONSTRAINT "user_login_tokens_tenant_id_token_hash_key" UNIQUE("tenant_id","token_hash")
);
--> statement-breakpoint
ALTER TABLE "user_login_tokens" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "user_login_tokens" ADD CONSTRAINT "user_login_tokens_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_login_tokens" ADD CONSTRAINT "user_login_tokens_creator_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_login_tokens" ADD CONSTRAINT "user_login_tokens_login_user_fk" FOREIGN KEY ("tenant_id","login_user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "user_login_tokens_token_hash_idx" ON "user_login_tokens" USING btree ("token_hash");--> statement-breakpoint
CREATE POLICY "user_login_tokens_tenant_isolation" ON "user_login_tokens" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);