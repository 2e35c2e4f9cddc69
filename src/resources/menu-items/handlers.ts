import { and, asc, eq, isNull, sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import { loadSubjectLists, replaceSubjectLists, type SubjectLists } from '../entity-permissions/queries.ts';
import { missingSubjects } from '../entity-permissions/rules.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { invalid, notFound, type FieldErrors } from '../../platform/http/problem.ts';
import { present, readControls } from '../../platform/result-controls/result-controls.ts';
import { languages } from '../languages/table.ts';
import { findUser } from '../users/queries.ts';
import { permissionsLacking, type Permission } from '../../platform/auth/permissions.ts';
import { iframeAccess, LINK_VARIABLES, linkProblems } from './link.ts';
import { MENU_ITEM_ENTITY_TYPE, menuItems, type MenuItemType } from './table.ts';
import { findMenuItem, forAdministration, forCaller, menuItemView, visibleMenuItems, type MenuItemRow, type MenuItemViewer } from './view.ts';

const userScope = (auth: Auth): MenuItemViewer => ({ auth, scope: 'user' });
const administrationScope = (auth: Auth): MenuItemViewer => ({ auth, scope: 'administration' });
const allFields = { selects: null, relations: [] };

interface MenuItemDraft {
  type: MenuItemType;
  link: string;
  /** Undefined: the tenant's system language. */
  langId: string | undefined;
  entityPermissions: Partial<SubjectLists> | undefined;
  /** Whether the link is new (create, or changed by an update): its placeholders are then checked against the author. */
  newLink: boolean;
  /**
   * Whether an update changes who sees the item (its entity permissions): the link's
   * placeholders are then checked against the caller too, since the new audience is sent
   * to the link's target with its values.
   */
  newAudience: boolean;
}

const READ_USERS: Permission[] = ['users.view'];
/**
 * What the author of a link must hold for each placeholder. A link resolves, for every
 * reader, to that reader's values and takes them to the link's target, which the author
 * chooses: so it may carry only user fields the author may read of other users
 * (`users.view`, plus the field's permission for personal and administrative fields).
 */
const PLACEHOLDER_PERMISSIONS: Record<string, Permission[]> = {
  'user.id': READ_USERS,
  'user.username': READ_USERS,
  'user.first_name': READ_USERS,
  'user.last_name': READ_USERS,
  'user.full_name': READ_USERS,
  'user.lang_id': READ_USERS,
  'user.email': ['users.view', 'users.view-personal'],
  'user.staff_number': ['users.view', 'users.view-administrative'],
};
const STRICTEST: Permission[] = ['users.view', 'users.view-personal', 'users.view-administrative'];

/** The placeholders of `link` whose permissions `auth` lacks, with the permissions lacking. */
function placeholderProblems(auth: Auth, link: string): string[] {
  const problems: string[] = [];
  for (const name of Object.keys(LINK_VARIABLES)) {
    const used = new RegExp(`\\{\\{\\s*${name.replace(/\./g, '\\.')}\\s*\\}\\}`).test(link);
    const lacking = used ? permissionsLacking(auth, PLACEHOLDER_PERMISSIONS[name] ?? STRICTEST) : [];
    if (lacking.length > 0) problems.push(`the placeholder ${name} needs ${lacking.join(' and ')}: it sends each reader's value to the link's target`);
  }
  return problems;
}

/** The lists as sets, so that order and duplicates do not count as a change. */
function sameSubjects(a: Partial<SubjectLists>, b: SubjectLists): boolean {
  const same = (x: number[] | undefined, y: number[]) => {
    const left = new Set(x ?? []);
    const right = new Set(y);
    return left.size === right.size && [...left].every((id) => right.has(id));
  };
  return same(a.user_ids, b.user_ids) && same(a.role_ids, b.role_ids) && same(a.department_ids, b.department_ids);
}

/**
 * Checks what the schema cannot: the link suits the type, the language exists (or the
 * tenant has a system language to default to), the entity-permission IDs exist. A link
 * that is new, or whose audience changes, may carry only placeholders the caller may
 * read (the same rule for both: each decides whose values go to the link's target). All
 * problems at once, as one 422. Returns the language to store.
 */
async function validateDraft(tx: Tx, auth: Auth, draft: MenuItemDraft): Promise<string> {
  const errors: FieldErrors = {};
  const linkErrors = linkProblems(draft.link, draft.type);
  const placeholders = linkErrors.length === 0 && (draft.newLink || draft.newAudience) ? placeholderProblems(auth, draft.link) : [];
  if (draft.newLink) linkErrors.push(...placeholders);
  if (linkErrors.length > 0) errors.link = linkErrors;
  if (draft.newAudience && placeholders.length > 0) {
    errors.entity_permissions = [
      `who sees this item can be changed only by a caller who may read every user field its link sends: ${placeholders.join('; ')}`,
    ];
  }
  const [language] = await tx
    .select({ id: languages.id })
    .from(languages)
    .where(draft.langId === undefined ? eq(languages.isSystem, true) : eq(languages.id, draft.langId))
    .limit(1);
  if (!language) errors.lang_id = [draft.langId === undefined ? 'is required: the tenant has no system language' : `no language "${draft.langId}" exists`];
  if (draft.entityPermissions) Object.assign(errors, await missingSubjects(tx, draft.entityPermissions, 'entity_permissions'));
  if (Object.keys(errors).length > 0) throw invalid(errors);
  return language!.id;
}

/** "Last + 1 within the tenant"; the lock keeps two concurrent creates from taking one number. */
async function nextSortNumber(tx: Tx, tenantId: number): Promise<number> {
  await lockTenantScope(tx, 'menu_items.sort_number');
  const [row] = await tx.select({ next: sql<number>`coalesce(max(${menuItems.sortNumber}), 0)::int + 1` }).from(menuItems);
  return row!.next;
}

async function presentForAdministration(tx: Tx, auth: Auth, row: MenuItemRow) {
  const [record] = await present(menuItemView, tx, await forAdministration(tx, [row]), allFields, administrationScope(auth));
  return record!;
}

export const menuItemHandlers = {
  async listMenuItems({ auth, query, services: { db } }) {
    const viewer = userScope(auth);
    const controls = readControls(menuItemView, query, viewer);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const caller = await findUser(tx, auth.userId);
      if (!caller) throw notFound('The user');
      const base = tx
        .select()
        .from(menuItems)
        .where(and(visibleMenuItems(auth.userId), controls.where))
        .orderBy(asc(menuItems.sortNumber), asc(menuItems.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(menuItemView, tx, forCaller(rows, caller), controls, viewer);
    });
    return { status: 200, body };
  },

  async getMenuItem({ auth, query, params, services: { db } }) {
    const viewer = userScope(auth);
    const controls = readControls(menuItemView, query, viewer);
    const [body] = await db.tenant(auth.tenantId, async (tx) => {
      const caller = await findUser(tx, auth.userId);
      const row = await findMenuItem(tx, params.menuItem, visibleMenuItems(auth.userId));
      if (!caller || !row) throw notFound('The menu item');
      return present(menuItemView, tx, forCaller([row], caller), controls, viewer);
    });
    return { status: 200, body: body! };
  },

  async listAdministeredMenuItems({ auth, query, services: { db } }) {
    const viewer = administrationScope(auth);
    const controls = readControls(menuItemView, query, viewer);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx.select().from(menuItems).where(controls.where).orderBy(asc(menuItems.sortNumber), asc(menuItems.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(menuItemView, tx, await forAdministration(tx, rows), controls, viewer);
    });
    return { status: 200, body };
  },

  async getAdministeredMenuItem({ auth, query, params, services: { db } }) {
    const viewer = administrationScope(auth);
    const controls = readControls(menuItemView, query, viewer);
    const [body] = await db.tenant(auth.tenantId, async (tx) => {
      const row = await findMenuItem(tx, params.menuItem);
      if (!row) throw notFound('The menu item');
      return present(menuItemView, tx, await forAdministration(tx, [row]), controls, viewer);
    });
    return { status: 200, body: body! };
  },

  async createMenuItem({ auth, body, services: { db } }) {
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const langId = await validateDraft(tx, auth, {
        type: body.type,
        link: body.link,
        langId: body.lang_id,
        entityPermissions: body.entity_permissions,
        newLink: true,
        newAudience: false,
      });
      const allowIframeAccess = body.allow_iframe_access ?? true;
      const [row] = await tx
        .insert(menuItems)
        .values({
          tenantId: auth.tenantId,
          langId,
          iconId: body.icon_id,
          menuIdentifier: body.menu_identifier,
          type: body.type,
          title: body.title,
          link: body.link,
          allowIframeAccess,
          iframeAccess: iframeAccess(allowIframeAccess, body.link),
          userConfirmationRequired: body.user_confirmation_required ?? false,
          sortNumber: body.sort_number ?? (await nextSortNumber(tx, auth.tenantId)),
        })
        .returning();
      if (body.entity_permissions) await replaceSubjectLists(tx, auth.tenantId, MENU_ITEM_ENTITY_TYPE, row!.id, body.entity_permissions);
      return presentForAdministration(tx, auth, row!);
    });
    return { status: 201, body: created };
  },

  async updateMenuItem({ auth, params, body, services: { db } }) {
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      const current = await findMenuItem(tx, params.menuItem, isNull(menuItems.deletedAt));
      if (!current) throw notFound('The menu item');
      const type = body.type ?? current.type;
      const link = body.link ?? current.link;
      const allowIframeAccess = body.allow_iframe_access ?? current.allowIframeAccess;
      const sent = body.entity_permissions;
      const newAudience = sent !== undefined && !sameSubjects(sent, (await loadSubjectLists(tx, MENU_ITEM_ENTITY_TYPE, [current.id])).get(current.id)!);
      const langId = await validateDraft(tx, auth, {
        type,
        link,
        langId: body.lang_id ?? current.langId,
        entityPermissions: body.entity_permissions,
        newLink: link !== current.link,
        newAudience,
      });
      const [row] = await tx
        .update(menuItems)
        .set({
          langId,
          iconId: body.icon_id ?? current.iconId,
          menuIdentifier: body.menu_identifier ?? current.menuIdentifier,
          type,
          title: body.title ?? current.title,
          link,
          allowIframeAccess,
          // Seed: recalculated whenever the link or the iframe preference changes.
          iframeAccess: iframeAccess(allowIframeAccess, link),
          userConfirmationRequired: body.user_confirmation_required ?? current.userConfirmationRequired,
          sortNumber: body.sort_number ?? current.sortNumber,
          updatedAt: sql`now()`,
        })
        .where(eq(menuItems.id, current.id))
        .returning();
      if (body.entity_permissions) await replaceSubjectLists(tx, auth.tenantId, MENU_ITEM_ENTITY_TYPE, current.id, body.entity_permissions);
      return presentForAdministration(tx, auth, row!);
    });
    return { status: 200, body: updated };
  },

  async deleteMenuItem({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      const [row] = await tx
        .update(menuItems)
        .set({ deletedAt: sql`now()`, updatedAt: sql`now()` })
        .where(and(eq(menuItems.id, params.menuItem), isNull(menuItems.deletedAt)))
        .returning({ id: menuItems.id });
      if (!row) throw notFound('The menu item');
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
