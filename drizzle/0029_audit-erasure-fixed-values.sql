-- Erasure in the trail takes only the values a blackout gives an account. The function of
-- 0027 wrote into the person's past events whatever `audit_erasures.anonymized_values`
-- held, and the application role may insert that row: a request able to run SQL could
-- have rewritten a blacked-out person's history with values of its choosing, or left
-- fields out so that they were never erased. The values a blackout gives are fixed
-- (`blackoutValues`, src/resources/users/rules.ts): the username `deleted-user-<id>`, every
-- personal field null, every flag false. The function now writes those, whatever the row
-- records (the row only says that an erasure is due), and labels with that username.
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
