import { presentedTokenHash } from '../../platform/auth/auth.ts';
import { audit } from '../audit-events/record.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { coded, invalid, notFound } from '../../platform/http/problem.ts';
import { listRecords, presentAll } from '../../platform/result-controls/listing.ts';
import { callerAccount, deleteOwnSubscription, heldSubscriptions, saveSubscription } from './queries.ts';
import { assertMayRegister, canonicalEndpoint, subscriptionCapErrors, subscriptionErrors, type SubscriptionInput } from './rules.ts';
import { vapidKeys } from './vapid.ts';
import { pushSubscriptionListing, pushSubscriptionView } from './view.ts';
import { holdSession } from '../auth/credentials.ts';

const MAX_USER_AGENT = 512;

export const pushHandlers = {
  async getVapidPublicKey({ services: { config, db } }) {
    const keys = await vapidKeys(config, db);
    return { status: 200, body: { public_key: keys.publicKey } };
  },

  async listPushSubscriptions({ auth, services: { db } }) {
    // The operation takes no result controls: every field of the caller's own subscriptions.
    return { status: 200, body: await listRecords(db, auth.tenantId, pushSubscriptionListing, {}, auth) };
  },

  async createPushSubscription(ctx) {
    const {
      auth,
      body,
      request,
      services: { db, pushOutbound },
    } = ctx;
    const sent = body as SubscriptionInput;
    assertMayRegister(await db.tenant(auth.tenantId, (tx) => callerAccount(tx, auth.userId)));
    // Outside the transaction: judging the endpoint may wait for DNS.
    const errors = await subscriptionErrors(pushOutbound, sent);
    if (Object.keys(errors).length > 0) throw invalid(errors);
    const input = { ...sent, endpoint: canonicalEndpoint(sent.endpoint) };
    const userAgent = request.headers['user-agent']?.slice(0, MAX_USER_AGENT) ?? null;
    const [created] = await db.tenant(auth.tenantId, async (tx) => {
      // The session is held (its user's row locked for update): one ended meanwhile (a logout mark, a deactivation, a
      // deletion or blackout) would have its subscription outlive it, and a reactivation revive it.
      await holdSession(tx, auth, presentedTokenHash(request)!, 'update');
      const held = await heldSubscriptions(tx, auth.userId, input.endpoint);
      const capErrors = subscriptionCapErrors(held);
      if (Object.keys(capErrors).length > 0) throw invalid(capErrors);
      const rows = await saveSubscription(tx, auth, input, userAgent);
      if (rows.length === 0) throw invalid({ endpoint: [coded('taken', 'is registered by another user; it must be deleted by that user first')] });
      // The endpoint is a capability (whoever knows it can push): the trail names the subscription by id only.
      // An endpoint the user held already is the same subscription sent again (browsers do on every page load): no event.
      if (!held.holdsEndpoint) {
        await audit(tx, ctx, { action: 'push_subscription.created', target: { type: 'push_subscription', id: rows[0]!.id, label: null } });
      }
      return presentAll(pushSubscriptionView, tx, rows, auth);
    });
    return { status: 201, body: created! };
  },

  async deletePushSubscription(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    const deleted = await db.tenant(auth.tenantId, async (tx) => {
      const gone = await deleteOwnSubscription(tx, auth.userId, params.subscription);
      if (gone) await audit(tx, ctx, { action: 'push_subscription.deleted', target: { type: 'push_subscription', id: params.subscription, label: null } });
      return gone;
    });
    if (!deleted) throw notFound('The push subscription');
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
