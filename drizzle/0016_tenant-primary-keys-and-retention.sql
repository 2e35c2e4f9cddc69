-- Primary keys of tenant-owned tables become (tenant_id, id), so that the distribution
-- column is part of every key (docs/scaling.md). drizzle-kit cannot name the old primary
-- keys and would drop the unique (tenant_id, id) constraints while foreign keys still use
-- them, so its statements are ordered by hand: the foreign keys that point at those
-- constraints are dropped, each table's key is replaced in one statement, and the same
-- foreign keys are added again (now bound to the new primary keys). Rows are untouched.
ALTER TABLE "accepted_policies" DROP CONSTRAINT "accepted_policies_terms_fk";--> statement-breakpoint
ALTER TABLE "accepted_policies" DROP CONSTRAINT "accepted_policies_user_fk";--> statement-breakpoint
ALTER TABLE "access_tokens" DROP CONSTRAINT "access_tokens_user_fk";--> statement-breakpoint
ALTER TABLE "default_value_sources" DROP CONSTRAINT "default_value_sources_form_field_fk";--> statement-breakpoint
ALTER TABLE "department_attribute_sets" DROP CONSTRAINT "department_attribute_sets_department_fk";--> statement-breakpoint
ALTER TABLE "department_attribute_sets" DROP CONSTRAINT "department_attribute_sets_set_fk";--> statement-breakpoint
ALTER TABLE "department_notification_settings" DROP CONSTRAINT "department_notification_settings_department_fk";--> statement-breakpoint
ALTER TABLE "department_notification_settings" DROP CONSTRAINT "department_notification_settings_setting_fk";--> statement-breakpoint
ALTER TABLE "department_users" DROP CONSTRAINT "department_users_department_fk";--> statement-breakpoint
ALTER TABLE "department_users" DROP CONSTRAINT "department_users_user_fk";--> statement-breakpoint
ALTER TABLE "departments" DROP CONSTRAINT "departments_creator_fk";--> statement-breakpoint
ALTER TABLE "form_fields" DROP CONSTRAINT "form_fields_form_fk";--> statement-breakpoint
ALTER TABLE "form_fields" DROP CONSTRAINT "form_fields_task_template_fk";--> statement-breakpoint
ALTER TABLE "form_submissions" DROP CONSTRAINT "form_submissions_form_fk";--> statement-breakpoint
ALTER TABLE "form_submissions" DROP CONSTRAINT "form_submissions_task_template_fk";--> statement-breakpoint
ALTER TABLE "form_submissions" DROP CONSTRAINT "form_submissions_user_fk";--> statement-breakpoint
ALTER TABLE "form_submissions" DROP CONSTRAINT "form_submissions_task_execution_fk";--> statement-breakpoint
ALTER TABLE "notifications" DROP CONSTRAINT "notifications_notifiable_fk";--> statement-breakpoint
ALTER TABLE "push_subscriptions" DROP CONSTRAINT "push_subscriptions_user_fk";--> statement-breakpoint
ALTER TABLE "task_executions" DROP CONSTRAINT "task_executions_task_template_fk";--> statement-breakpoint
ALTER TABLE "task_executions" DROP CONSTRAINT "task_executions_user_fk";--> statement-breakpoint
ALTER TABLE "user_login_tokens" DROP CONSTRAINT "user_login_tokens_creator_fk";--> statement-breakpoint
ALTER TABLE "user_login_tokens" DROP CONSTRAINT "user_login_tokens_login_user_fk";--> statement-breakpoint
ALTER TABLE "user_profile_pictures" DROP CONSTRAINT "user_profile_pictures_user_fk";--> statement-breakpoint
ALTER TABLE "users" DROP CONSTRAINT "users_role_fk";--> statement-breakpoint
ALTER TABLE "webhook_deliveries" DROP CONSTRAINT "webhook_deliveries_automation_fk";--> statement-breakpoint
ALTER TABLE "webhook_delivery_attempts" DROP CONSTRAINT "webhook_delivery_attempts_delivery_fk";--> statement-breakpoint
ALTER TABLE "access_tokens" DROP CONSTRAINT "access_tokens_pkey", ADD CONSTRAINT "access_tokens_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "attribute_sets" DROP CONSTRAINT "attribute_sets_pkey", DROP CONSTRAINT "attribute_sets_tenant_id_id_key", ADD CONSTRAINT "attribute_sets_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "automations" DROP CONSTRAINT "automations_pkey", DROP CONSTRAINT "automations_tenant_id_id_key", ADD CONSTRAINT "automations_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "default_value_sources" DROP CONSTRAINT "default_value_sources_pkey", DROP CONSTRAINT "default_value_sources_tenant_id_id_key", ADD CONSTRAINT "default_value_sources_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "departments" DROP CONSTRAINT "departments_pkey", DROP CONSTRAINT "departments_tenant_id_id_key", ADD CONSTRAINT "departments_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "entity_permissions" DROP CONSTRAINT "entity_permissions_pkey", ADD CONSTRAINT "entity_permissions_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "form_fields" DROP CONSTRAINT "form_fields_pkey", DROP CONSTRAINT "form_fields_tenant_id_id_key", ADD CONSTRAINT "form_fields_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "form_submissions" DROP CONSTRAINT "form_submissions_pkey", DROP CONSTRAINT "form_submissions_tenant_id_id_key", ADD CONSTRAINT "form_submissions_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "forms" DROP CONSTRAINT "forms_pkey", DROP CONSTRAINT "forms_tenant_id_id_key", ADD CONSTRAINT "forms_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "menu_items" DROP CONSTRAINT "menu_items_pkey", DROP CONSTRAINT "menu_items_tenant_id_id_key", ADD CONSTRAINT "menu_items_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "notification_dispatches" DROP CONSTRAINT "notification_dispatches_pkey", DROP CONSTRAINT "notification_dispatches_tenant_id_id_key", ADD CONSTRAINT "notification_dispatches_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "notification_settings" DROP CONSTRAINT "notification_settings_pkey", DROP CONSTRAINT "notification_settings_tenant_id_id_key", ADD CONSTRAINT "notification_settings_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "notifications" DROP CONSTRAINT "notifications_pkey", ADD CONSTRAINT "notifications_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "push_subscriptions" DROP CONSTRAINT "push_subscriptions_pkey", DROP CONSTRAINT "push_subscriptions_tenant_id_id_key", ADD CONSTRAINT "push_subscriptions_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "roles" DROP CONSTRAINT "roles_pkey", DROP CONSTRAINT "roles_tenant_id_id_key", ADD CONSTRAINT "roles_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "task_executions" DROP CONSTRAINT "task_executions_pkey", DROP CONSTRAINT "task_executions_tenant_id_id_key", ADD CONSTRAINT "task_executions_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "task_templates" DROP CONSTRAINT "task_templates_pkey", DROP CONSTRAINT "task_templates_tenant_id_id_key", ADD CONSTRAINT "task_templates_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "terms_of_use" DROP CONSTRAINT "terms_of_use_pkey", DROP CONSTRAINT "terms_of_use_tenant_id_id_key", ADD CONSTRAINT "terms_of_use_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "user_login_tokens" DROP CONSTRAINT "user_login_tokens_pkey", DROP CONSTRAINT "user_login_tokens_tenant_id_id_key", ADD CONSTRAINT "user_login_tokens_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "users" DROP CONSTRAINT "users_pkey", DROP CONSTRAINT "users_tenant_id_id_key", ADD CONSTRAINT "users_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "webhook_deliveries" DROP CONSTRAINT "webhook_deliveries_pkey", DROP CONSTRAINT "webhook_deliveries_tenant_id_id_key", ADD CONSTRAINT "webhook_deliveries_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "webhook_delivery_attempts" DROP CONSTRAINT "webhook_delivery_attempts_pkey", DROP CONSTRAINT "webhook_delivery_attempts_tenant_id_id_key", ADD CONSTRAINT "webhook_delivery_attempts_tenant_id_id_pk" PRIMARY KEY("tenant_id","id");--> statement-breakpoint
ALTER TABLE "accepted_policies" ADD CONSTRAINT "accepted_policies_terms_fk" FOREIGN KEY ("tenant_id","terms_of_use_id") REFERENCES "public"."terms_of_use"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "accepted_policies" ADD CONSTRAINT "accepted_policies_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "access_tokens" ADD CONSTRAINT "access_tokens_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "default_value_sources" ADD CONSTRAINT "default_value_sources_form_field_fk" FOREIGN KEY ("tenant_id","form_field_id") REFERENCES "public"."form_fields"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_attribute_sets" ADD CONSTRAINT "department_attribute_sets_department_fk" FOREIGN KEY ("tenant_id","department_id") REFERENCES "public"."departments"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_attribute_sets" ADD CONSTRAINT "department_attribute_sets_set_fk" FOREIGN KEY ("tenant_id","attribute_set_id") REFERENCES "public"."attribute_sets"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_notification_settings" ADD CONSTRAINT "department_notification_settings_department_fk" FOREIGN KEY ("tenant_id","department_id") REFERENCES "public"."departments"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_notification_settings" ADD CONSTRAINT "department_notification_settings_setting_fk" FOREIGN KEY ("tenant_id","notification_setting_id") REFERENCES "public"."notification_settings"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_users" ADD CONSTRAINT "department_users_department_fk" FOREIGN KEY ("tenant_id","department_id") REFERENCES "public"."departments"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "department_users" ADD CONSTRAINT "department_users_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "departments" ADD CONSTRAINT "departments_creator_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_fields" ADD CONSTRAINT "form_fields_form_fk" FOREIGN KEY ("tenant_id","form_id") REFERENCES "public"."forms"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_fields" ADD CONSTRAINT "form_fields_task_template_fk" FOREIGN KEY ("tenant_id","task_template_id") REFERENCES "public"."task_templates"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_submissions" ADD CONSTRAINT "form_submissions_form_fk" FOREIGN KEY ("tenant_id","form_id") REFERENCES "public"."forms"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_submissions" ADD CONSTRAINT "form_submissions_task_template_fk" FOREIGN KEY ("tenant_id","task_template_id") REFERENCES "public"."task_templates"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_submissions" ADD CONSTRAINT "form_submissions_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "form_submissions" ADD CONSTRAINT "form_submissions_task_execution_fk" FOREIGN KEY ("tenant_id","task_execution_id") REFERENCES "public"."task_executions"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "notifications" ADD CONSTRAINT "notifications_notifiable_fk" FOREIGN KEY ("tenant_id","notifiable_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "push_subscriptions" ADD CONSTRAINT "push_subscriptions_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_executions" ADD CONSTRAINT "task_executions_task_template_fk" FOREIGN KEY ("tenant_id","task_template_id") REFERENCES "public"."task_templates"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_executions" ADD CONSTRAINT "task_executions_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_login_tokens" ADD CONSTRAINT "user_login_tokens_creator_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_login_tokens" ADD CONSTRAINT "user_login_tokens_login_user_fk" FOREIGN KEY ("tenant_id","login_user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_profile_pictures" ADD CONSTRAINT "user_profile_pictures_user_fk" FOREIGN KEY ("tenant_id","user_id") REFERENCES "public"."users"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "users" ADD CONSTRAINT "users_role_fk" FOREIGN KEY ("tenant_id","role_id") REFERENCES "public"."roles"("tenant_id","id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_automation_fk" FOREIGN KEY ("tenant_id","automation_id") REFERENCES "public"."automations"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_delivery_attempts" ADD CONSTRAINT "webhook_delivery_attempts_delivery_fk" FOREIGN KEY ("tenant_id","delivery_id") REFERENCES "public"."webhook_deliveries"("tenant_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
-- Indexes of the retention purge (docs/running.md).
CREATE INDEX "notification_dispatches_delivered_idx" ON "notification_dispatches" USING btree ("delivered_at") WHERE "notification_dispatches"."delivered_at" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "notifications_read_at_idx" ON "notifications" USING btree ("read_at") WHERE "notifications"."read_at" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "notifications_unread_created_idx" ON "notifications" USING btree ("created_at") WHERE "notifications"."read_at" IS NULL;--> statement-breakpoint
CREATE INDEX "webhook_deliveries_completed_idx" ON "webhook_deliveries" USING btree ("completed_at") WHERE "webhook_deliveries"."completed_at" IS NOT NULL;
