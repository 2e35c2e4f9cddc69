-- The e-mail job claims each copy before it sends it, so that a run whose lease was lost
-- (its worker frozen or cut off from the database while the retry started) sends no copy
-- the retry sends too (docs/notifications.md#e-mail-copies). Nullable, no default: adding
-- them rewrites no row.
ALTER TABLE "notifications" ADD COLUMN "email_claim" uuid;--> statement-breakpoint
ALTER TABLE "notifications" ADD COLUMN "email_claimed_until" timestamp with time zone;