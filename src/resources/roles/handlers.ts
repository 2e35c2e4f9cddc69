import { changesBetween } from '../../platform/audit/audit.ts';
import { presentedTokenHash } from '../../platform/auth/auth.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { coded, invalid, notFound } from '../../platform/http/problem.ts';
import { CONFERS_ENTITY_RIGHTS, membershipsConferringRights } from '../entity-permissions/rules.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import { audit } from '../audit-events/record.ts';
import { holdSession } from '../auth/credentials.ts';
import { revokeLoginTokensCreatedUnder } from '../users/queries.ts';
import { insertRole, lockAdministration, lockRole, roleIdOf, updateRoleRow } from './queries.ts';
import { assertMayAdministerRole, newRoleName, roleChangeErrors } from './rules.ts';
import { roleListing, roleView } from './view.ts';

/** Whether two lists without repeats hold the same permissions, in whatever order. */
function samePermissions(sent: readonly string[], stored: readonly string[]): boolean {
  const held = new Set(stored);
  return sent.length === held.size && sent.every((permission) => held.has(permission));
}

export const roleHandlers = {
  async listRoles({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, roleListing, query, auth) };
  },

  async getRole({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, roleListing, query, auth, { key: params.role }, 'The role');
    return { status: 200, body };
  },

  async createRole(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const permissions = body.permissions ?? [];
    const errors = roleChangeErrors(auth, { permissions: [], active: true, ownRole: false }, { permissions, active: body.active ?? true });
    if (Object.keys(errors).length > 0) throw invalid(errors);
    const created = await db.tenant(auth.tenantId, async (tx) => {
      // The permissions are judged again as the caller holds them now (a demotion under way is waited for).
      await lockAdministration(tx, auth, undefined, 'shared');
      const name = await newRoleName(tx, body.name);
      const role = await insertRole(tx, { tenantId: auth.tenantId, name, active: body.active ?? true, permissions });
      await audit(tx, ctx, {
        action: 'role.created',
        target: { type: 'role', id: role.id, label: role.name },
        changes: changesBetween(null, { name: role.name, active: role.active, permissions: role.permissions }),
      });
      return role;
    });
    const [record] = await presentAll(roleView, null, [created], auth);
    return { status: 201, body: record! };
  },

  async updateRole(ctx) {
    const {
      auth,
      params,
      body,
      services: { db },
    } = ctx;
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      await lockAdministration(tx, auth);
      const role = await lockRole(tx, auth.tenantId, params.role);
      if (!role) throw notFound('The role');
      // A role's permissions (or its reactivation) reach every holder of it: the session changing them is held, as one
      // updating another user is, once the role's row is, so that a session ended while the write waited changes none.
      await holdSession(tx, auth, presentedTokenHash(ctx.request)!);
      assertMayAdministerRole(auth, role);
      // Permissions are a set (the spec's uniqueItems): the same ones in another order are kept as stored, no change.
      const permissions = body.permissions && !samePermissions(body.permissions, role.permissions) ? body.permissions : role.permissions;
      const next = { name: body.name ?? role.name, active: body.active ?? role.active, permissions };
      const ownRole = (await roleIdOf(tx, auth.userId)) === role.id;
      const errors = roleChangeErrors(auth, { ...role, ownRole }, next);
      // Reactivated, the role gives its holders again what entity permissions naming it confer: the caller must have it.
      if (!role.active && next.active && (await membershipsConferringRights(tx, auth, [{ userId: null, roleId: role.id }]))[0]!.role) {
        (errors.active ??= []).push(coded('confers_rights', CONFERS_ENTITY_RIGHTS));
      }
      if (Object.keys(errors).length > 0) throw invalid(errors);
      // A name sent back unchanged is not judged again (it may predate these rules).
      if (next.name !== role.name) next.name = await newRoleName(tx, next.name, role.id);
      // A write that changes nothing (the role sent back as it was read) leaves updated_at as it was and records no event.
      const changes = changesBetween({ name: role.name, active: role.active, permissions: role.permissions }, next);
      const updated = await updateRoleRow(tx, role.id, next, { changed: Object.keys(changes).length > 0 });
      // Authority taken from the role's holders ends the login tokens they created (docs/security.md, one-time login tokens).
      const lost = (role.active && !next.active) || role.permissions.some((permission) => !next.permissions.includes(permission));
      if (lost) await revokeLoginTokensCreatedUnder(tx, role.id);
      if (Object.keys(changes).length > 0)
        await audit(tx, ctx, { action: 'role.updated', target: { type: 'role', id: role.id, label: updated.name }, changes });
      return updated;
    });
    const [record] = await presentAll(roleView, null, [updated], auth);
    return { status: 200, body: record! };
  },
} satisfies Partial<Handlers>;
