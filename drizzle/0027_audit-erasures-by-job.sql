CREATE TABLE "audit_erasures" (
	"tenant_id" bigint NOT NULL,
	"user_id" bigint NOT NULL,
	"anonymized_values" jsonb NOT NULL,
	"requested_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "audit_erasures_tenant_id_user_id_pk" PRIMARY KEY("tenant_id","user_id"),
	CONSTRAINT "audit_erasures_values_object" CHECK (jsonb_typeof("audit_erasures"."anonymized_values") = 'object')
);
--> statement-breakpoint
ALTER TABLE "audit_erasures" ENABLE ROW LEVEL SECURITY;--> statement-breakpoint
ALTER TABLE "audit_erasures" ADD CONSTRAINT "audit_erasures_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE POLICY "audit_erasures_tenant_isolation" ON "audit_erasures" AS PERMISSIVE FOR ALL TO public USING (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint) WITH CHECK (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint);--> statement-breakpoint
-- The blackout's erasure of the trail (docs/audit.md#erasure) leaves the blackout's
-- transaction: the blackout records in `audit_erasures`, as the application role, that the
-- person's events await it, and the job `audit.erase` rewrites them in a transaction of its
-- own through the function below, which runs as the table owner. Two roles writing one
-- tenant's rows in one transaction is what Citus refuses ("cannot perform query on
-- placements that were modified in this transaction by a different user"), and a job run
-- twice must leave the trail as once: the function removes the row itself, in its own
-- statement as the owner, and finds nothing left to do the second time.
-- Like the trail, the rows are append-only for the application role: a request may record
-- an erasure, never cancel one.
REVOKE UPDATE, DELETE, TRUNCATE ON "audit_erasures" FROM atrium_app;
--> statement-breakpoint
DROP FUNCTION atrium_anonymize_audit_trail(bigint, jsonb);
--> statement-breakpoint
-- Erasure in the trail, the one rewrite the application may ask for: in the transaction's
-- tenant only, and only of a user whom a blackout has cleared (blacked_out_at set) and whose
-- erasure is recorded (a row of audit_erasures). Their anonymized username becomes the label
-- of every event about them or by them, and each field of the recorded values, where an
-- event about them changed it, takes that value on both sides; the row is removed. Ids,
-- actions, times and everyone else's events stay. Answers the number of events rewritten:
-- 0 when no erasure awaits (done already), so that a job run again changes nothing. The
-- row's removal comes first: a second run waits on its lock and then finds none.
CREATE FUNCTION atrium_anonymize_audit_trail(p_user_id bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  v_tenant bigint := nullif(current_setting('atrium.tenant_id', true), '')::bigint;
  v_label text;
  v_values jsonb;
  v_count integer;
BEGIN
  IF v_tenant IS NULL THEN
    RAISE EXCEPTION 'atrium_anonymize_audit_trail needs the transaction''s tenant' USING ERRCODE = 'insufficient_privilege';
  END IF;
  SELECT username INTO v_label FROM users
  WHERE tenant_id = v_tenant AND id = p_user_id AND blacked_out_at IS NOT NULL;
  IF v_label IS NULL THEN
    RAISE EXCEPTION 'user % of the tenant is not blacked out', p_user_id USING ERRCODE = 'insufficient_privilege';
  END IF;
  DELETE FROM audit_erasures
  WHERE tenant_id = v_tenant AND user_id = p_user_id
  RETURNING anonymized_values INTO v_values;
  IF v_values IS NULL THEN
    RETURN 0;
  END IF;
  UPDATE audit_events SET
    target_label = CASE WHEN target_type = 'user' AND target_id = p_user_id::text THEN v_label ELSE target_label END,
    actor_label = CASE WHEN actor_type = 'user' AND actor_id = p_user_id THEN v_label ELSE actor_label END,
    changes = CASE WHEN target_type = 'user' AND target_id = p_user_id::text THEN coalesce((
      SELECT jsonb_object_agg(c.key, CASE
        WHEN v_values ? c.key AND NOT (c.value ? 'changed')
          THEN jsonb_set(jsonb_set('{}'::jsonb, '{from}', v_values -> c.key), '{to}', v_values -> c.key)
        ELSE c.value END)
      FROM jsonb_each(changes) c), '{}'::jsonb) ELSE changes END
  WHERE tenant_id = v_tenant
    AND ((target_type = 'user' AND target_id = p_user_id::text) OR (actor_type = 'user' AND actor_id = p_user_id));
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION atrium_anonymize_audit_trail(bigint) FROM PUBLIC;
--> statement-breakpoint
GRANT EXECUTE ON FUNCTION atrium_anonymize_audit_trail(bigint) TO atrium_app;
