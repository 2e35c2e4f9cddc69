import { and, asc, count, eq, sql } from 'drizzle-orm';
import type { Handlers } from '../../platform/http/handler.ts';
import { forbidden, invalid, notFound } from '../../platform/http/problem.ts';
import { present } from '../../platform/result-controls/result-controls.ts';
import { users } from '../users/table.ts';
import { subscriptionErrors, type SubscriptionInput } from './subscription-input.ts';
import { pushSubscriptions } from './table.ts';
import { vapidKeys } from './vapid.ts';
import { pushSubscriptionView } from './view.ts';

const ALL_FIELDS = { selects: null, relations: [] };
const MAX_USER_AGENT = 512;
/** Subscriptions one user may hold (browsers and devices); more are a 422 (see the spec). */
export const MAX_SUBSCRIPTIONS_PER_USER = 20;

export const pushHandlers = {
  async getVapidPublicKey({ services: { config, db } }) {
    const keys = await vapidKeys(config, db);
    return { status: 200, body: { public_key: keys.publicKey } };
  },

  async listPushSubscriptions({ auth, services: { db } }) {
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const rows = await tx.select().from(pushSubscriptions).where(eq(pushSubscriptions.userId, auth.userId)).orderBy(asc(pushSubscriptions.id));
      return present(pushSubscriptionView, tx, rows, ALL_FIELDS, auth);
    });
    return { status: 200, body };
  },

  async createPushSubscription({ auth, body, request, services: { db, outbound } }) {
    const input = body as SubscriptionInput;
    // Group accounts receive no notifications (decisions §6), so no pushes either; refused
    // before the input is judged, like a permission.
    const [caller] = await db.tenant(auth.tenantId, (tx) => tx.select({ groupAccount: users.groupAccount }).from(users).where(eq(users.id, auth.userId)));
    if (!caller || caller.groupAccount) throw forbidden('Group accounts cannot receive push notifications.');
    // Outside the transaction: judging the endpoint may wait for DNS.
    const errors = await subscriptionErrors(outbound, input);
    if (Object.keys(errors).length > 0) throw invalid(errors);
    const userAgent = request.headers['user-agent']?.slice(0, MAX_USER_AGENT) ?? null;
    const [created] = await db.tenant(auth.tenantId, async (tx) => {
      // Serializes the caller's registrations, so concurrent ones cannot pass the cap together.
      await tx.select({ id: users.id }).from(users).where(eq(users.id, auth.userId)).for('update');
      const [held] = await tx
        .select({ n: count(), own: sql<boolean>`coalesce(bool_or(${pushSubscriptions.endpoint} = ${input.endpoint}), false)` })
        .from(pushSubscriptions)
        .where(eq(pushSubscriptions.userId, auth.userId));
      if (!held!.own && held!.n >= MAX_SUBSCRIPTIONS_PER_USER) {
        throw invalid({ endpoint: [`at most ${MAX_SUBSCRIPTIONS_PER_USER} push subscriptions per user; delete one first`] });
      }
      const rows = await tx
        .insert(pushSubscriptions)
        .values({
          tenantId: auth.tenantId,
          userId: auth.userId,
          endpoint: input.endpoint,
          p256dh: input.keys.p256dh,
          auth: input.keys.auth,
          userAgent,
        })
        .onConflictDoUpdate({
          target: [pushSubscriptions.tenantId, pushSubscriptions.endpoint],
          set: {
            p256dh: input.keys.p256dh,
            auth: input.keys.auth,
            userAgent,
            lastFailureStatus: null,
            lastFailure: null,
            lastFailureAt: null,
            updatedAt: sql`now()`,
          },
          // Only the caller's own record is updated; another user's is left as it is.
          setWhere: eq(pushSubscriptions.userId, auth.userId),
        })
        .returning();
      if (rows.length === 0) throw invalid({ endpoint: ['is registered by another user; it must be deleted by that user first'] });
      return present(pushSubscriptionView, tx, rows, ALL_FIELDS, auth);
    });
    return { status: 201, body: created! };
  },

  async deletePushSubscription({ auth, params, services: { db } }) {
    const deleted = await db.tenant(auth.tenantId, (tx) =>
      tx
        .delete(pushSubscriptions)
        .where(and(eq(pushSubscriptions.id, params.subscription), eq(pushSubscriptions.userId, auth.userId)))
        .returning({ id: pushSubscriptions.id }),
    );
    if (deleted.length === 0) throw notFound('The push subscription');
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
