import { Readable } from 'node:stream';
import { and, type SQL } from 'drizzle-orm';
import { auditEvents } from '../../platform/audit/table.ts';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Database } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { reauthorize } from '../../platform/http/operations.ts';
import { ProblemError } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import { readControls } from '../../platform/result-controls/result-controls.ts';
import { AUDIT_ORDER, assertFilterCoherent, auditEventListing, auditEventView, olderThan, positionColumn } from './view.ts';

/** Events read per statement of an export: enough to amortise the round trip, little enough to keep memory flat. */
const EXPORT_BATCH = 1000;

/**
 * The events `where` selects, newest first, as NDJSON lines, read batch by batch by keyset
 * (each batch a short transaction of its own, none held while the client reads) and
 * produced only as fast as the client takes them: memory holds one batch whatever the range.
 * Before every batch after the first, the caller is judged again (`viewerNow`, which throws
 * when they may no longer read the trail): an export outlives the moment its request was
 * authorized. Each batch is shown as the viewer now may see it.
 */
async function* exportLines(
  db: Database,
  first: Auth,
  where: SQL | undefined,
  viewerNow: () => Promise<Auth>,
  sent: () => Promise<void>,
): AsyncGenerator<string> {
  let position: { at: string; id: string } | undefined;
  let viewer = first;
  for (;;) {
    // The next batch is judged once the last has left the process, not while it waits in the answer's buffer.
    if (position) {
      await sent();
      viewer = await viewerNow();
    }
    const rows = await db.tenant(viewer.tenantId, (tx) =>
      tx
        .select({ row: auditEvents, at: positionColumn })
        .from(auditEvents)
        .where(and(where, position && olderThan(position)))
        .orderBy(...AUDIT_ORDER)
        .limit(EXPORT_BATCH),
    );
    if (rows.length === 0) return;
    const records = await presentAll(
      auditEventView,
      null,
      rows.map(({ row }) => row),
      viewer,
    );
    yield records.map((record) => `${JSON.stringify(record)}\n`).join('');
    if (rows.length < EXPORT_BATCH) return;
    const last = rows.at(-1)!;
    position = { at: last.at, id: last.row.id };
  }
}

export const auditEventHandlers = {
  async listAuditEvents({ auth, query, services: { db } }) {
    assertFilterCoherent(query.filter);
    return { status: 200, body: await listRecords(db, auth.tenantId, auditEventListing, query, auth) };
  },

  async getAuditEvent({ auth, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, auditEventListing, {}, auth, { key: params.auditEvent }, 'The audit event');
    return { status: 200, body };
  },

  async exportAuditEvents({ auth, query, request, services }) {
    assertFilterCoherent(query.filter);
    // The filters are judged (422) before the answer starts.
    const { where } = readControls(auditEventView, { filter: query.filter }, auth);
    const headers = { 'content-type': 'application/x-ndjson; charset=utf-8' };
    // Fastify answers HEAD with this handler: the head of an export, and nothing read.
    if (request.method === 'HEAD') return { status: 200, body: '', headers };
    // A caller who no longer holds ends the answer: the error cuts the connection, as a failure mid-stream does, so that no client takes the part for the whole.
    const viewerNow = async (): Promise<Auth> => {
      try {
        return await reauthorize(services, request);
      } catch (error) {
        if (error instanceof ProblemError)
          request.log.info({ status: error.status, code: error.code }, 'audit export ended: the caller may no longer read the trail');
        throw error;
      }
    };
    // Written out: nothing of the answer waits in Node's buffers (the socket's own still hold what they took). Asked of
    // the socket after a turn of the event loop: on Node 24 and 26 a batch just written waits in the response's own
    // buffer while the response holds its socket corked, until the next tick, and the socket reports nothing to drain
    // meanwhile.
    const sent = async () => {
      await new Promise((resolve) => setImmediate(resolve));
      const socket = request.raw.socket;
      if (!socket || socket.destroyed || !socket.writableNeedDrain) return;
      await new Promise<void>((resolve) => {
        const done = () => {
          socket.off('drain', done).off('close', done);
          resolve();
        };
        socket.on('drain', done).on('close', done);
      });
    };
    const stream = Readable.from(exportLines(services.db, auth, where, viewerNow, sent), { objectMode: false });
    // A stream where the generated type says text: Fastify writes it as it is read (the spec's schema is the whole answer's).
    return { status: 200, body: stream as unknown as string, headers };
  },
} satisfies Partial<Handlers>;
