ALTER TABLE "audit_events" ADD COLUMN "client_request_id" text;--> statement-breakpoint
CREATE INDEX "audit_events_client_request_idx" ON "audit_events" USING btree ("tenant_id","client_request_id") WHERE "audit_events"."client_request_id" IS NOT NULL;--> statement-breakpoint
-- The trail is append-only for the application role (docs/audit.md#append-only): a request
-- may write events and read its tenant's, never change or remove one. The retention purge
-- runs as the owner; the blackout's rewrite goes through the function below.
REVOKE UPDATE, DELETE, TRUNCATE ON "audit_events" FROM atrium_app;
--> statement-breakpoint
-- Erasure in the trail (docs/audit.md#erasure), the one rewrite the application may ask
-- for: in the transaction's tenant only, and only of a user whom a blackout has already
-- cleared (blacked_out_at set). Their anonymized username becomes the label of every event
-- about them or by them, and each field of p_values, where an event about them changed it,
-- takes that value on both sides. Ids, actions, times and everyone else's events stay.
-- Runs as the table owner (the application role may not update the table), with a fixed
-- search_path. Answers the number of events rewritten.
CREATE FUNCTION atrium_anonymize_audit_trail(p_user_id bigint, p_values jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  v_tenant bigint := nullif(current_setting('atrium.tenant_id', true), '')::bigint;
  v_label text;
  v_count integer;
BEGIN
  IF v_tenant IS NULL THEN
    RAISE EXCEPTION 'atrium_anonymize_audit_trail needs the transaction''s tenant' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF jsonb_typeof(p_values) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'atrium_anonymize_audit_trail takes the anonymized values as an object' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT username INTO v_label FROM users
  WHERE tenant_id = v_tenant AND id = p_user_id AND blacked_out_at IS NOT NULL;
  IF v_label IS NULL THEN
    RAISE EXCEPTION 'user % of the tenant is not blacked out', p_user_id USING ERRCODE = 'insufficient_privilege';
  END IF;
  UPDATE audit_events SET
    target_label = CASE WHEN target_type = 'user' AND target_id = p_user_id::text THEN v_label ELSE target_label END,
    actor_label = CASE WHEN actor_type = 'user' AND actor_id = p_user_id THEN v_label ELSE actor_label END,
    changes = CASE WHEN target_type = 'user' AND target_id = p_user_id::text THEN coalesce((
      SELECT jsonb_object_agg(c.key, CASE
        WHEN p_values ? c.key AND NOT (c.value ? 'changed')
          THEN jsonb_build_object('from', p_values -> c.key, 'to', p_values -> c.key)
        ELSE c.value END)
      FROM jsonb_each(changes) c), '{}'::jsonb) ELSE changes END
  WHERE tenant_id = v_tenant
    AND ((target_type = 'user' AND target_id = p_user_id::text) OR (actor_type = 'user' AND actor_id = p_user_id));
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_anonymize_audit_trail(bigint, jsonb) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_anonymize_audit_trail(bigint, jsonb) TO atrium_app;
