/**
 * The live stream's event ids: `<created_at in µs since the epoch>-<notification id>`,
 * ordered like the notifications (created_at, then id), so a reconnecting client's
 * `Last-Event-ID` tells where its replay starts (the spec: operation streamNotifications;
 * docs/notifications.md#live-stream). Here in TypeScript and in SQL.
 */
import { sql, type SQL } from 'drizzle-orm';
import { notifications } from './table.ts';

/** Whether `value` has the shape of this stream's event ids. */
export const isEventId = (value: string) => /^\d{1,16}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value);

/** Below every notification's id: where a user without notifications starts. */
export const FIRST_EVENT_ID = '0-00000000-0000-0000-0000-000000000000';

/** Orders event ids like (created_at, id). */
export function compareEventIds(a: string, b: string): number {
  const [aMicros, ...aRest] = a.split('-');
  const [bMicros, ...bRest] = b.split('-');
  const byTime = BigInt(aMicros!) - BigInt(bMicros!);
  if (byTime !== 0n) return byTime < 0n ? -1 : 1;
  const aId = aRest.join('-').toLowerCase();
  const bId = bRest.join('-').toLowerCase();
  return aId < bId ? -1 : aId > bId ? 1 : 0;
}

/** A notification's event id, computed exactly by PostgreSQL. */
export const eventIdColumn = sql<string>`((extract(epoch from ${notifications.createdAt}) * 1000000)::bigint)::text || '-' || ${notifications.id}::text`;

/** The position of event `eventId` (a valid one: see `isEventId`) as a row value `(created_at, id)`. */
function position(eventId: string): SQL {
  const [micros, ...id] = eventId.split('-');
  return sql`('epoch'::timestamptz + ${micros}::bigint * interval '1 microsecond', ${id.join('-')}::uuid)`;
}

/** Notifications stored after event `eventId` (a valid one: see `isEventId`). */
export const storedAfter = (eventId: string): SQL => sql`(${notifications.createdAt}, ${notifications.id}) > ${position(eventId)}`;

/** Notifications stored before event `eventId`: those after it in the lists' newest-first order. */
export const storedBefore = (eventId: string): SQL => sql`(${notifications.createdAt}, ${notifications.id}) < ${position(eventId)}`;
