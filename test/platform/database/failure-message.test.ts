/**
 * The last line a failed start or command prints (`atrium: …`): one line, whatever failed,
 * the database's reason in it however long the statement.
 */
import t from 'tap';
import { DrizzleQueryError } from 'drizzle-orm/errors';
import { failureMessage } from '../../../src/platform/database/failure-message.ts';

t.test("a failed migration's message is one line: the statement's start and the database's reason", async (t) => {
  const migration = `-- The application connects with role atrium_app\n-- (docs)\nDO $$ BEGIN\n  CREATE ROLE atrium_app;\n${'  GRANT x;\n'.repeat(40)}END $$;\n`;
  const cause = Object.assign(new Error('permission denied to create role'), { code: '42501' });
  const message = failureMessage(new DrizzleQueryError(migration, ['a secret parameter'], cause));
  t.notMatch(message, /\n/, 'one line');
  t.match(message, /^Failed query: -- The application connects with role atrium_app -- \(docs\) DO \$\$ BEGIN CREATE ROLE atrium_app; GRANT x;/);
  t.ok(message.endsWith('…: permission denied to create role'), 'the reason at its end, after the statement cut short');
  t.ok(message.length < 250, 'short enough to read');
  t.notMatch(message, /a secret parameter/, 'no parameter');
  t.equal(failureMessage(new DrizzleQueryError('select 1 / 0', [], new Error('division by zero'))), 'Failed query: select 1 / 0: division by zero');
});

t.test('any other error is its message on one line', async (t) => {
  t.equal(failureMessage(new Error('the database at db:5432 did not answer\n  as PostgreSQL')), 'the database at db:5432 did not answer as PostgreSQL');
  t.equal(failureMessage('plain text'), 'plain text');
});
