/** The notification rules on their own (no HTTP, no database). */
import { readFileSync } from 'node:fs';
import { PgDialect } from 'drizzle-orm/pg-core';
import type { SQL } from 'drizzle-orm';
import t from 'tap';
import { notifications } from '../../../src/resources/notifications/table.ts';
import { coded, ProblemError } from '../../../src/platform/http/problem.ts';
import {
  CUSTOM_NOTIFICATION,
  dispatchInputErrors,
  hasRecipients,
  readState,
  readStateChange,
  RECIPIENT_REQUIRED,
  sanitizeBody,
  TYPED_NOTIFICATIONS,
} from '../../../src/resources/notifications/rules.ts';

const spec = JSON.parse(readFileSync(new URL('../../../generated/openapi.json', import.meta.url), 'utf8'));
const dialect = new PgDialect();
const text = (condition: SQL) => dialect.sqlToQuery(condition).sql;

/** The 422 field errors `run` throws, or undefined when it throws none. */
function fieldErrors(run: () => unknown) {
  try {
    run();
  } catch (error) {
    if (error instanceof ProblemError && error.status === 422) return error.errors;
    throw error;
  }
  return undefined;
}

t.test('the typed notifications are exactly the types the spec accepts, each with its target alias', async (t) => {
  const input = spec.components.schemas.TypedNotificationInput;
  t.strictSame(Object.keys(TYPED_NOTIFICATIONS).sort(), [...input.properties.type.enum].sort());
  t.strictSame(TYPED_NOTIFICATIONS, {
    infoboardPostCreated: 'infoboardPost',
    infoboardPostUpdated: 'infoboardPost',
    infoboardPostReadingConfirmationRequired: 'infoboardPost',
    manualEntryUpdated: 'manualEntry',
  });
  t.notOk(CUSTOM_NOTIFICATION in TYPED_NOTIFICATIONS, 'the generic type has no target');
});

t.test('dispatchInputErrors: the url rule, and at least one recipient named on both lists', async (t) => {
  const url = '/events/1';
  t.strictSame(dispatchInputErrors({ url }, { userIds: [1] }), {});
  t.strictSame(dispatchInputErrors({ url }, { departmentIds: [2] }), {});
  t.strictSame(dispatchInputErrors({ url: 'https://intranet.example/x' }, { userIds: [1], departmentIds: [] }), {});
  for (const recipients of [{}, { userIds: [] }, { userIds: [], departmentIds: [] }]) {
    t.strictSame(
      dispatchInputErrors({ url }, recipients),
      { user_ids: [coded('required', RECIPIENT_REQUIRED)], department_ids: [coded('required', RECIPIENT_REQUIRED)] },
      JSON.stringify(recipients),
    );
  }
  for (const bad of ['javascript:alert(1)', '//evil.example/x', '/\\evil.example', 'mailto:a@example.com', '']) {
    const errors = dispatchInputErrors({ url: bad }, { userIds: [1] });
    t.strictSame(Object.keys(errors), ['url'], JSON.stringify(bad));
    t.ok(errors.url!.length > 0);
    t.match(errors.url, [{ code: 'format' }]);
  }
  t.strictSame(Object.keys(dispatchInputErrors({ url: 'javascript:x' }, {})).sort(), ['department_ids', 'url', 'user_ids'], 'every problem at once');
});

t.test('hasRecipients: a user or a department', async (t) => {
  t.equal(hasRecipients({}), false);
  t.equal(hasRecipients({ userIds: [], departmentIds: [] }), false);
  t.equal(hasRecipients({ userIds: [7] }), true);
  t.equal(hasRecipients({ departmentIds: [7] }), true);
});

t.test('sanitizeBody: rich text and images stay; scripts, event handlers and javascript: links go', async (t) => {
  t.equal(sanitizeBody('<p>At <b>10:00</b> <em>sharp</em></p>'), '<p>At <b>10:00</b> <em>sharp</em></p>');
  t.equal(
    sanitizeBody('<img src="https://x.example/a.png" alt="A" width="10" onerror="steal()" />'),
    '<img src="https://x.example/a.png" alt="A" width="10" />',
  );
  const cleaned = sanitizeBody('<p onclick="steal()">Hi <script>alert(1)</script><a href="javascript:x()" onmouseover="y()">link</a></p>');
  t.equal(cleaned, '<p>Hi <a>link</a></p>');
  t.notMatch(sanitizeBody('<iframe src="https://evil.example"></iframe><style>p{}</style>ok'), /iframe|style/);
});

t.test('readState: read_at also supplies seen_at; seen_at alone leaves read_at unset', async (t) => {
  t.strictSame(readState({ read_at: '2026-01-01 10:00:00' }), { seenAt: new Date('2026-01-01T10:00:00Z'), readAt: new Date('2026-01-01T10:00:00Z') });
  t.strictSame(readState({ seen_at: '2026-01-02 08:00:00' }), { seenAt: new Date('2026-01-02T08:00:00Z'), readAt: null });
  t.strictSame(readState({ seen_at: '2026-01-03 08:00:00', read_at: '2026-01-04 08:00:00' }), {
    seenAt: new Date('2026-01-03T08:00:00Z'),
    readAt: new Date('2026-01-04T08:00:00Z'),
  });
});

t.test('readState: a date the calendar lacks is a 422 on its field', async (t) => {
  t.strictSame(Object.keys(fieldErrors(() => readState({ read_at: '2026-02-30 10:00:00' })) ?? {}), ['read_at']);
  t.strictSame(Object.keys(fieldErrors(() => readState({ seen_at: '2026-01-01 24:00:00', read_at: '2026-01-01 10:00:00' })) ?? {}), ['seen_at']);
  t.strictSame(Object.keys(fieldErrors(() => readState({ read_at: '0000-01-01 10:00:00' })) ?? {}), ['read_at']);
});

t.test('readStateChange: reading sets read_at and keeps a stored seen_at; only unread records change', async (t) => {
  const change = readStateChange({ seenAt: new Date('2026-01-03T08:00:00Z'), readAt: new Date('2026-01-04T08:00:00Z') });
  t.strictSame(Object.keys(change.set).sort(), ['readAt', 'seenAt', 'updatedAt']);
  t.match(text(change.set.seenAt!), /^coalesce\("notifications"\."seen_at", \$1::timestamptz\)$/, 'first sight wins');
  t.strictSame(dialect.sqlToQuery(change.set.seenAt!).params, ['2026-01-03T08:00:00.000Z']);
  t.strictSame(dialect.sqlToQuery(change.set.readAt!).params, ['2026-01-04T08:00:00.000Z']);
  t.equal(text(change.changes), '"notifications"."read_at" is null', 'first read wins');
});

t.test('readStateChange: seeing alone sets seen_at only; only unseen records change', async (t) => {
  const change = readStateChange({ seenAt: new Date('2026-01-02T08:00:00Z'), readAt: null });
  t.strictSame(Object.keys(change.set).sort(), ['seenAt', 'updatedAt']);
  t.match(text(change.set.seenAt!), /^coalesce\("notifications"\."seen_at", \$1::timestamptz\)$/);
  t.equal(text(change.changes), '"notifications"."seen_at" is null');
});

t.test("read and seen times are read from PostgreSQL's text in any year and any session time zone's offset", async (t) => {
  const read = (text: string) => (notifications.readAt as unknown as { mapFromDriverValue(value: string): Date }).mapFromDriverValue(text).toISOString();
  t.equal(read('0049-06-15 10:20:30+00'), '0049-06-15T10:20:30.000Z', 'a year below 100');
  t.equal(read('0049-06-15 05:24:28-04:56:02'), '0049-06-15T10:20:30.000Z', 'a historic offset in seconds (a zone such as America/New_York)');
  t.equal(read('2026-11-30 22:12:55.123456+05:30'), '2026-11-30T16:42:55.123Z');
  t.equal(read('9999-12-31 23:59:59+00'), '9999-12-31T23:59:59.000Z');
});
