/**
 * The database functions that take parameters are written in PL/pgSQL. An SQL-language
 * function that is not inlined (a security-definer one never is) parses and plans its
 * query on every call, where PL/pgSQL keeps the plan for the session; and Citus cannot
 * plan an SQL function's parameters across shards (docs/performance.md#authentication-functions,
 * docs/scaling.md). A migration that adds one in SQL fails here.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const { db } = await startTestDatabase(t);

t.test('every function of the schema that takes parameters is PL/pgSQL', async (t) => {
  const functions = await db.owner.execute<{ name: string; language: string }>(sql`
    select p.proname as name, l.lanname as language
    from pg_proc p join pg_language l on l.oid = p.prolang
    where p.pronamespace = 'public'::regnamespace and p.pronargs > 0 and p.prokind = 'f'
    order by p.proname`);
  t.same(
    functions.filter((fn) => fn.language !== 'plpgsql').map((fn) => `${fn.name} (${fn.language})`),
    [],
    'none in another language',
  );
  const names = functions.map((fn) => fn.name);
  for (const name of ['atrium_authenticate', 'atrium_authenticate_scim', 'atrium_find_tenant', 'atrium_login_token_tenant', 'atrium_consume_login_token']) {
    t.ok(names.includes(name), `${name} is among them`);
  }
});
