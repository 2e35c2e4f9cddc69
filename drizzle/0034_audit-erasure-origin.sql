-- Erasure in the trail (docs/audit.md#erasure) also clears, in every event the person made,
-- the address their request came from, their user agent and the request id their client
-- sent: what their device and client sent, tied to their account id, left as they were.
-- Events about them made by others keep those others' origin. The function is 0029's
-- otherwise; the statement after it clears the same in the events of people blacked out
-- before this migration, whose erasure has run.
CREATE OR REPLACE FUNCTION atrium_anonymize_audit_trail(p_user_id bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  v_tenant bigint := nullif(current_setting('atrium.tenant_id', true), '')::bigint;
  v_label text := 'deleted-user-' || p_user_id;
  v_erased jsonb := jsonb_build_object(
    'username', 'deleted-user-' || p_user_id,
    'first_name', null, 'last_name', null, 'email', null, 'phone', null, 'street', null,
    'zipcode', null, 'city', null, 'birthdate', null, 'gender', null, 'staff_number', null,
    'entering_date', null, 'leaving_date', null, 'default_route', null,
    'active', false, 'request_password_change', false, 'prevent_logout', false,
    'wants_email_notifications', false);
  v_values jsonb;
  v_count integer;
BEGIN
  IF v_tenant IS NULL THEN
    RAISE EXCEPTION 'atrium_anonymize_audit_trail needs the transaction''s tenant' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM users WHERE tenant_id = v_tenant AND id = p_user_id AND blacked_out_at IS NOT NULL) THEN
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
    client_address = CASE WHEN actor_type = 'user' AND actor_id = p_user_id THEN NULL ELSE client_address END,
    user_agent = CASE WHEN actor_type = 'user' AND actor_id = p_user_id THEN NULL ELSE user_agent END,
    client_request_id = CASE WHEN actor_type = 'user' AND actor_id = p_user_id THEN NULL ELSE client_request_id END,
    changes = CASE WHEN target_type = 'user' AND target_id = p_user_id::text THEN coalesce((
      SELECT jsonb_object_agg(c.key, CASE
        WHEN v_erased ? c.key AND NOT (c.value ? 'changed')
          THEN jsonb_set(jsonb_set('{}'::jsonb, '{from}', v_erased -> c.key), '{to}', v_erased -> c.key)
        ELSE c.value END)
      FROM jsonb_each(changes) c), '{}'::jsonb) ELSE changes END
  WHERE tenant_id = v_tenant
    AND ((target_type = 'user' AND target_id = p_user_id::text) OR (actor_type = 'user' AND actor_id = p_user_id));
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END
$$;
--> statement-breakpoint
UPDATE audit_events e SET client_address = NULL, user_agent = NULL, client_request_id = NULL
FROM users u
WHERE e.actor_type = 'user' AND u.tenant_id = e.tenant_id AND u.id = e.actor_id AND u.blacked_out_at IS NOT NULL
  AND (e.client_address IS NOT NULL OR e.user_agent IS NOT NULL OR e.client_request_id IS NOT NULL);
