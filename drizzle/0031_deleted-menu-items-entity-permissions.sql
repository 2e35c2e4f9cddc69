-- A deleted menu item is shown to no one, so its entity permissions grant nothing any more.
-- Before this, deleting an item kept them: they still counted as rights when a user got a
-- new role or department or a new password, and a department they named could never be
-- deleted, since a deleted item cannot be updated to name it out. Deleting an item now
-- removes them (deleteMenuItem); this removes those of the items deleted before.
DELETE FROM "entity_permissions" p
USING "menu_items" m
WHERE p."entity_type" = 'menuItem'
  AND m."tenant_id" = p."tenant_id"
  AND m."id" = p."entity_id"
  AND m."deleted_at" IS NOT NULL;
