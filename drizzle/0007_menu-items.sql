CREATE TABLE "menu_items" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "menu_items_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"tenant_id" bigint NOT NULL,
	"lang_id" text NOT NULL,
	"icon_id" integer NOT NULL,
	"menu_identifier" text NOT NULL,
	"type" text NOT NULL,
	"title" text NOT NULL,
	"link" text NOT NULL,
	"allow_iframe_access" boolean DEFAULT true NOT NULL,
	"iframe_access" boolean NOT NULL,
	"user_confirmation_required" boolean DEFAULT false NOT NULL,
	"sort_number" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"deleted_at" timestamp with time zone,
	CONSTRAINT "menu_items_tenant_id_id_key" UNIQUE("tenant_id","id"),
	CONSTRAINT "menu_items_type_known" CHECK ("menu_items"."type" IN ('link', 'iframe', 'route'))
);
--> statement-breakpoint
ALTER TABLE "menu_items" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "menu_items" ADD CONSTRAINT "menu_items_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "menu_items" ADD CONSTRAINT "menu_items_language_fk" FOREIGN KEY ("tenant_id","lang_id") REFERENCES "public"."languages"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "menu_items_tenant_order_idx" ON "menu_items" USING btree ("tenant_id","sort_number","id");--> statement-breakpoint
CREATE POLICY "menu_items_tenant_isolation" ON "menu_items" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);