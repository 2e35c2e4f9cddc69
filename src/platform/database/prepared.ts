/**
 * Statements built once per process: a select that is the same on every request but for
 * its values is built with `sql.placeholder(…)` where the values go and `.prepare()`d
 * (drizzle's API), then `.execute({ …values })` in each transaction. Building a select with
 * drizzle costs about as much Node time as the rest of a read (docs/performance.md).
 * The transactions of one `Database` share one drizzle instance, so a statement prepared
 * on it runs in whichever transaction executes it.
 */
import type { Tx } from './database.ts';

const statements = new WeakMap<Tx, WeakMap<object, Map<string, unknown>>>();

/**
 * Forms kept per owner. A listing has a handful; where the client's input chooses the form
 * (a SCIM filter's shape), the least recently used form makes room for a new one past this
 * many, so no client can make the process keep statements without end, nor keep the
 * forms others use out for good. (The driver's prepared texts have a bound of their own:
 * `MAX_PREPARED_TEXTS`, database.ts.)
 */
const MAX_FORMS = 100;

/**
 * The statement `build` prepares on `tx`, built on the first call for `tx`'s database,
 * `owner` (what the statement belongs to: a listing, a function) and `key` (what tells
 * its forms apart), and kept for the process's life (an owner's `MAX_FORMS` most recently
 * used forms). Everything `build` reads but the placeholders must be the same for every
 * call with the same owner and key.
 */
export function prepared<Statement>(tx: Tx, owner: object, key: string, build: (tx: Tx) => Statement): Statement {
  let byOwner = statements.get(tx);
  if (!byOwner) statements.set(tx, (byOwner = new WeakMap()));
  let byKey = byOwner.get(owner);
  if (!byKey) byOwner.set(owner, (byKey = new Map<string, unknown>()));
  let statement = byKey.get(key) as Statement | undefined;
  if (statement === undefined) {
    statement = build(tx);
    if (byKey.size >= MAX_FORMS) byKey.delete(byKey.keys().next().value!);
  } else if (byKey.size > 1) {
    byKey.delete(key); // set again below: a Map keeps its keys in insertion order, the least recently used first
  }
  byKey.set(key, statement);
  return statement;
}
