-- A tenant's open webhook deliveries, counted (those due) when another is queued: its job
-- then waits behind that many of the tenant's own, not behind other tenants' backlogs
-- (docs/outbound-delivery.md#concurrency).
CREATE INDEX "webhook_deliveries_open_idx" ON "webhook_deliveries" USING btree ("tenant_id") WHERE "webhook_deliveries"."status" IN ('pending', 'retrying');
