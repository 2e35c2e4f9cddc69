/**
 * The rules of Web Push (docs/notifications.md#push): who may register a subscription and
 * what a registration must hold, what a push message says, and what each send's outcome
 * does to its subscription.
 */
import { createECDH } from 'node:crypto';
import { coded, forbidden, type FieldErrors } from '../../platform/http/problem.ts';
import { hasUserinfo, NOT_AN_ALLOWED_DESTINATION, type OutboundClient } from '../../platform/outbound/client.ts';
import { nextState, type DeliveryOutcome, type RetryPolicy } from '../../platform/outbound/delivery-outcome.ts';
import { plainText } from '../notifications/plain-text.ts';
import type { NotificationData } from '../notifications/table.ts';

export interface SubscriptionInput {
  endpoint: string;
  keys: { p256dh: string; auth: string };
}

/** Subscriptions one user may hold (browsers and devices); more are a 422 (the spec, operationId createPushSubscription). */
export const MAX_SUBSCRIPTIONS_PER_USER = 20;

/**
 * Group accounts receive no notifications, so no pushes either (the spec, operationId
 * createPushSubscription): a 403, decided like a permission, before the input is judged.
 */
export function assertMayRegister(caller: { groupAccount: boolean } | undefined): void {
  if (!caller || caller.groupAccount) throw forbidden('Group accounts cannot receive push notifications.', 'group_account');
}

/**
 * The cap on a user's subscriptions, judged on what the user holds: registering an endpoint
 * the user already holds only updates it, so it is never refused by the cap.
 */
export function subscriptionCapErrors(held: { count: number; holdsEndpoint: boolean }): FieldErrors {
  if (held.holdsEndpoint || held.count < MAX_SUBSCRIPTIONS_PER_USER) return {};
  return { endpoint: [coded('limit_reached', `at most ${MAX_SUBSCRIPTIONS_PER_USER} push subscriptions per user; delete one first`)] };
}

/** Base64url, its padding optional (captured without it). */
const BASE64URL = /^([A-Za-z0-9_-]+)={0,2}$/;

/** The bytes of a base64url string, or null when it is not one. */
function base64url(value: string): Buffer | null {
  const unpadded = BASE64URL.exec(value)?.[1];
  return unpadded === undefined ? null : Buffer.from(unpadded, 'base64url');
}

/** Used only to check that a public key is a point on P-256 (computeSecret rejects others). */
const probe = createECDH('prime256v1');
probe.generateKeys();

/** The p256dh key: 65 bytes, uncompressed (0x04 …), on the P-256 curve. */
export function p256dhProblem(value: string): string | null {
  const bytes = base64url(value);
  if (!bytes || bytes.length !== 65 || bytes[0] !== 0x04) return 'must be the base64url encoding of a 65-byte uncompressed P-256 public key';
  try {
    probe.computeSecret(bytes);
    return null;
  } catch {
    return 'is not a point on the P-256 curve';
  }
}

/** The auth secret: 16 bytes (RFC 8291 §3.2). */
export function authSecretProblem(value: string): string | null {
  const bytes = base64url(value);
  return bytes && bytes.length === 16 ? null : 'must be the base64url encoding of a 16-byte authentication secret';
}

/**
 * The endpoint problem of a user or password in its URL. The outbound client's own message
 * sends a webhook to its `auth`; a push endpoint has none (`keys.auth` is the browser's
 * encryption secret), so it is told only that credentials do not belong in the URL.
 */
const CREDENTIALS_IN_URL = 'must not contain credentials (a user name or password before the host)';

/** The endpoint problem of plain http to a destination the operator does not admit. */
const PLAIN_HTTP_NOT_ADMITTED = 'must be an https URL (plain http only to destinations the operator admits)';

/**
 * https to a reachable address; http only where every address is allow-listed
 * (docs/tenancy-and-security.md#outbound-address-policy). A refused endpoint is told apart
 * from a malformed one, never why its host was refused (the outbound client's one message).
 * Over plain http only the refusal of the host says "https": a URL no scheme makes
 * reachable (port 0) is told as it is over https.
 */
export async function endpointProblem(outbound: OutboundClient, endpoint: string): Promise<string | null> {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return 'must be an absolute https URL';
  }
  if ((url.protocol === 'https:' || url.protocol === 'http:') && (url.username || url.password || hasUserinfo(endpoint))) return CREDENTIALS_IN_URL;
  // URL parsing keeps such a `%` as it is: normalizing the encodings after it (`canonicalEndpoint`) could make a new one.
  if (/%(?![0-9a-f]{2})/i.test(endpoint)) return 'must not contain a "%" that does not begin a percent-encoding (write it as %25)';
  if (url.protocol === 'https:') return outbound.destinationProblem(endpoint);
  if (url.protocol === 'http:') {
    const problem = await outbound.destinationProblem(endpoint, { allowListedOnly: true });
    return problem === NOT_AN_ALLOWED_DESTINATION ? PLAIN_HTTP_NOT_ADMITTED : problem;
  }
  return 'must be an https URL';
}

/** The longest endpoint stored (the spec's `maxLength` of `endpoint`, sent and answered). */
const MAX_ENDPOINT_LENGTH = 2048;

/** `text` with its percent-encodings as RFC 3986 (§6.2.2) compares them: an unreserved character's decoded, the others' hex digits in upper case. */
const normalizedPercents = (text: string): string =>
  text.replace(/%([0-9a-f]{2})/gi, (_encoded, hex: string) => {
    const character = String.fromCharCode(parseInt(hex, 16));
    return /^[A-Za-z0-9\-._~]$/.test(character) ? character : `%${hex.toUpperCase()}`;
  });

/** An IPv4-mapped IPv6 literal (`[::ffff:102:304]`, as URL parsing writes `[::ffff:1.2.3.4]`) as the IPv4 address it is. */
const MAPPED_IPV4 = /^\[::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/;

/**
 * An endpoint as stored, compared and sent to: its URL serialization (WHATWG) without a
 * fragment, which is what a request reaches, with the percent-encodings of its path and
 * query normalized and an IPv4-mapped IPv6 host written as its IPv4 address. Spellings of
 * one URL (`HTTP://`, an upper-case host, the default port, a `#fragment`, `%61` for `a`,
 * `[::ffff:1.2.3.4]`) are then one endpoint, whose owner is one user. `endpoint` must
 * parse (`endpointProblem` found none).
 */
export function canonicalEndpoint(endpoint: string): string {
  const url = new URL(endpoint);
  url.hash = '';
  url.pathname = normalizedPercents(url.pathname);
  if (url.search) url.search = normalizedPercents(url.search);
  const mapped = MAPPED_IPV4.exec(url.hostname);
  if (mapped) {
    const [high, low] = [parseInt(mapped[1]!, 16), parseInt(mapped[2]!, 16)];
    url.hostname = [high >> 8, high & 255, low >> 8, low & 255].join('.');
  }
  return url.href;
}

/**
 * Checks of a registration beyond the spec's shapes: an endpoint outbound requests may reach,
 * and keys a push message can actually be encrypted for (the spec, schema PushSubscriptionCreate).
 */
export async function subscriptionErrors(outbound: OutboundClient, input: SubscriptionInput): Promise<FieldErrors> {
  const errors: FieldErrors = {};
  const endpoint = await endpointProblem(outbound, input.endpoint);
  if (endpoint) {
    const refused = endpoint === NOT_AN_ALLOWED_DESTINATION || endpoint === PLAIN_HTTP_NOT_ADMITTED;
    errors.endpoint = [coded(refused ? 'destination_not_allowed' : 'format', endpoint)];
  } else if (canonicalEndpoint(input.endpoint).length > MAX_ENDPOINT_LENGTH) {
    errors.endpoint = [coded('max_length', `must be at most ${MAX_ENDPOINT_LENGTH} characters long written as a URL (percent-encoded)`)];
  }
  const p256dh = p256dhProblem(input.keys.p256dh);
  if (p256dh) errors['keys.p256dh'] = [coded('format', p256dh)];
  const auth = authSecretProblem(input.keys.auth);
  if (auth) errors['keys.auth'] = [coded('format', auth)];
  return errors;
}

/**
 * A push service must accept 4096 bytes of encrypted body and may refuse more (RFC 8030
 * §7.2; 413). Encrypted in one aes128gcm record (RFC 8291 §4), a message takes 103 bytes
 * more with `web-push` (an 86-byte header with the sender's key, a 16-byte tag and the
 * padding delimiter): 3993 bytes would fit. A notification shows a few lines anyway, so a
 * message is kept within PUSH_MESSAGE_MAX_BYTES, 3175 bytes encrypted
 * (test/resources/push/push.test.ts measures what the library sends).
 */
export const PUSH_MESSAGE_MAX_BYTES = 3072;

/** What a push message says of its notification. */
interface PushParts {
  title: string;
  body: string;
  url: string;
}

const pushMessage = (notificationId: string, parts: PushParts) => JSON.stringify({ id: notificationId, title: parts.title, body: parts.body, url: parts.url });

const fits = (json: string) => Buffer.byteLength(json) <= PUSH_MESSAGE_MAX_BYTES;

/**
 * `text`, or its longest beginning followed by `…` that `fits` ('' when none does). It is
 * cut between code points, never inside a surrogate pair (JSON would carry half of one as
 * an escape that no UTF-8 decoder makes a character of).
 */
function longestFitting(text: string, fits: (candidate: string) => boolean): string {
  if (fits(text)) return text;
  // Every character takes a byte at least: no more than the limit can fit.
  const characters: string[] = [];
  for (const character of text) {
    if (characters.length === PUSH_MESSAGE_MAX_BYTES) break;
    characters.push(character);
  }
  const candidate = (keep: number) => (keep > 0 ? `${characters.slice(0, keep).join('')}…` : '');
  // A longer beginning never takes fewer bytes: the longest that fits, by halving.
  let low = 0;
  let high = characters.length;
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (fits(candidate(middle))) low = middle;
    else high = middle - 1;
  }
  return candidate(low);
}

/**
 * What the push message of notification `notificationId` says, shortened until it fits:
 * the body first (plain text), then the title. The URL is kept whole or not at all, since a
 * shortened one leads elsewhere: when it leaves no room even alone (thousands of bytes, as
 * a URL of 2048 characters of 2 to 4 bytes each can be), the start page `/` stands in for
 * it. The notification's record keeps every part whole.
 */
function pushParts(notificationId: string, data: NotificationData): PushParts {
  const message = (parts: PushParts) => pushMessage(notificationId, parts);
  const body = plainText(data.body);
  const url = fits(message({ title: '', body: '', url: data.url })) ? data.url : '/';
  const title = longestFitting(data.title, (candidate) => fits(message({ title: candidate, body: '', url })));
  return { title, body: longestFitting(body, (candidate) => fits(message({ title, body: candidate, url }))), url };
}

/** The push message is `{id, title, body, url}`, body as plain text (the spec, operationId createPushSubscription). */
export function pushPayload(notificationId: string, data: NotificationData): string {
  return pushMessage(notificationId, pushParts(notificationId, data));
}

/**
 * `pushPayload` for the messages of one job, which share their contents (one dispatch's):
 * the parts are made plain and shortened once per contents, not once per message, since
 * that takes milliseconds of the event loop for a long body. They fit every id of the same
 * length (notification ids are UUIDs).
 */
export function pushPayloads(): (notificationId: string, data: NotificationData) => string {
  const shortened = new Map<NotificationData, { idLength: number; parts: PushParts }>();
  return (notificationId, data) => {
    let known = shortened.get(data);
    if (known?.idLength !== notificationId.length) {
      known = { idLength: notificationId.length, parts: pushParts(notificationId, data) };
      shortened.set(data, known);
    }
    return pushMessage(notificationId, known.parts);
  };
}

/** Statuses with which a push service says the subscription no longer exists: it is deleted (the spec, operationId createPushSubscription). */
export const GONE_STATUSES: readonly number[] = [404, 410];

/** One message: a notification for one subscription. */
export interface PushDelivery {
  subscriptionId: number;
  notificationId: string;
}

export interface PushTally {
  sent: number;
  gone: number;
  retried: number;
  failed: number;
}

/** What the outcomes of one job's messages do (docs/outbound-delivery.md#delivery-outcomes). */
export interface PushSettlement {
  tally: PushTally;
  /** Subscriptions to delete: the push service answered a gone status. */
  gone: Set<number>;
  /** The last failure of each subscription that is not gone, to record on it. */
  failures: Map<number, { status: number | null; error: string }>;
  /** Messages to send again, grouped by when (epoch milliseconds): one job per group. */
  retries: Map<number, PushDelivery[]>;
}

/**
 * Settles attempt number `attempt` of each message (`outcomes[i]` is that of `messages[i]`):
 * succeeded is sent; gone deletes the subscription; a retry is sent again after the backoff
 * (docs/outbound-delivery.md#backoff-and-retry-after) until the attempts are spent, then
 * recorded with "(gave up after N attempts)"; any other failure is recorded as it is.
 */
export function settleOutcomes(
  messages: readonly PushDelivery[],
  outcomes: readonly DeliveryOutcome[],
  attempt: number,
  policy: RetryPolicy,
  now: Date,
): PushSettlement {
  const settlement: PushSettlement = { tally: { sent: 0, gone: 0, retried: 0, failed: 0 }, gone: new Set(), failures: new Map(), retries: new Map() };
  const { tally, gone, failures, retries } = settlement;
  outcomes.forEach((outcome, index) => {
    const { subscriptionId, notificationId } = messages[index]!;
    if (outcome.verdict === 'succeeded') {
      tally.sent++;
      return;
    }
    if (outcome.verdict === 'gone') {
      tally.gone++;
      gone.add(subscriptionId);
      return;
    }
    const next = nextState(outcome, attempt, policy, now);
    if (next.status === 'retrying') {
      tally.retried++;
      const at = next.retryAt!.getTime();
      retries.set(at, [...(retries.get(at) ?? []), { subscriptionId, notificationId }]);
      return;
    }
    tally.failed++;
    const error = outcome.error!;
    failures.set(subscriptionId, {
      status: outcome.responseStatus,
      error: outcome.verdict === 'retry' ? `${error} (gave up after ${attempt} attempts)` : error,
    });
  });
  for (const id of gone) failures.delete(id);
  return settlement;
}
