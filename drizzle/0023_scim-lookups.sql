-- SCIM look-ups as index scans per tenant (docs/scim.md). `username_lower` serves
-- `filter=userName eq "…"` (case-insensitive, RFC 7643 §4.1.1): under row-level security a
-- condition on lower(username) cannot use an index, as lower() is not leakproof; one on a
-- column can. Adding it rewrites `users` once. A Group's `externalId` is kept on its
-- department, not unique: RFC 7643 §3.1 leaves that to each provisioning client.
ALTER TABLE "departments" ADD COLUMN "external_id" text;--> statement-breakpoint
ALTER TABLE "users" ADD COLUMN "username_lower" text GENERATED ALWAYS AS (lower(username)) STORED NOT NULL;--> statement-breakpoint
CREATE INDEX "departments_tenant_id_external_id_idx" ON "departments" USING btree ("tenant_id","external_id");--> statement-breakpoint
CREATE INDEX "users_tenant_id_username_lower_idx" ON "users" USING btree ("tenant_id","username_lower");