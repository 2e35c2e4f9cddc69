import ipaddr from 'ipaddr.js';
import type { Config } from '../../config.ts';
import { sql } from 'drizzle-orm';
import type { Database, Tx } from '../../platform/database/database.ts';
import { currentTenant } from '../../platform/database/tenancy.ts';
import { ProblemError } from '../../platform/http/problem.ts';

/**
 * Sign-in attempts are counted per account and per client address in PostgreSQL, so every
 * API process sees the same counts (repeated failures → 429 + Retry-After).
 *
 * An attempt is counted BEFORE the credential is checked, in one statement over all its
 * keys that also answers the new counts: of any number of concurrent attempts, at most
 * `max` per key are admitted to a check in a window, the rest are refused with 429 without
 * one. What is left counted are the failed checks: a refused attempt withdraws its count,
 * a successful one withdraws it (client address) or clears the account's count.
 */
export interface LimitKey {
  key: string;
  max: number;
}

/**
 * The per-account count under the name signed in with, shared by every check of the
 * account's password (sign-in, `old_password`); it exists for unknown names too.
 */
export function accountLimitKey(config: Config, tenant: string, username: string): LimitKey {
  return { key: `account:${tenant.toLowerCase()}/${username.toLowerCase()}`, max: config.loginMaxFailures };
}

/**
 * The per-user count of an existing user, counted together with `accountLimitKey` by every
 * check of their password: it follows the user through renames, so renaming oneself does
 * not start a fresh count.
 */
export function userLimitKey(config: Config, tenantId: number, userId: number): LimitKey {
  return { key: `user:${tenantId}/${userId}`, max: config.loginMaxFailures };
}

/** The keys of a password check of `username`: per name, per client address, and per user when the user exists. */
export function loginLimitKeys(config: Config, tenant: string, username: string, ip: string, user?: { tenantId: number; userId: number }): LimitKey[] {
  const keys = [accountLimitKey(config, tenant, username), clientAddressLimitKey(config, ip)];
  if (user) keys.push(userLimitKey(config, user.tenantId, user.userId));
  return keys;
}

/**
 * The client a per-address count belongs to: an IPv4 address (IPv4-mapped IPv6 included)
 * as it is, an IPv6 address by its /64 network — one subscriber commonly holds a whole /64
 * and could otherwise rotate through it, one address per attempt.
 */
export function clientOf(ip: string): string {
  if (!ipaddr.isValid(ip)) return ip;
  const address = ipaddr.process(ip);
  if (address.kind() === 'ipv4') return address.toString();
  const parts = (address as ipaddr.IPv6).parts.slice(0, 4);
  return `${new ipaddr.IPv6([...parts, 0, 0, 0, 0]).toString()}/64`;
}

/** The per-client-address count, shared by every way of signing in (password, login token). */
export function clientAddressLimitKey(config: Config, ip: string): LimitKey {
  return { key: `ip:${clientOf(ip)}`, max: config.loginMaxFailures * 5 };
}

/** An admitted attempt: the window each key was counted in, to withdraw exactly that count. */
export interface LoginAttempt {
  counted: { key: string; window: string }[];
}

interface CountedRow {
  key: string;
  failures: number;
  remaining: number;
  window_id: string;
}

/**
 * Counts one attempt on every key, atomically (one INSERT … ON CONFLICT DO UPDATE: the row
 * lock orders concurrent attempts), and throws 429 with `Retry-After` when any key is now
 * over its limit (withdrawing this attempt's counts first). Otherwise the caller checks the
 * credential and, on success, withdraws or clears the count.
 */
export async function admitLoginAttempt(db: Database, config: Config, keys: LimitKey[]): Promise<LoginAttempt> {
  const window = config.loginFailureWindowSeconds;
  const rows = await db.appSql<CountedRow[]>`
    insert into login_failures as f (key, failures, window_started_at)
    select key, 1, now() from unnest(${keys.map((k) => k.key)}::text[]) with ordinality as k(key, n) order by n
    on conflict (key) do update set
      failures = case when f.window_started_at + make_interval(secs => ${window}) <= now() then 1 else f.failures + 1 end,
      window_started_at = case when f.window_started_at + make_interval(secs => ${window}) <= now() then now() else f.window_started_at end
    returning f.key, f.failures,
      ceil(extract(epoch from f.window_started_at + make_interval(secs => ${window}) - now()))::int as remaining,
      (extract(epoch from f.window_started_at) * 1000000)::bigint::text as window_id`;
  const attempt: LoginAttempt = { counted: rows.map((row) => ({ key: row.key, window: row.window_id })) };
  let wait = 0;
  for (const row of rows) {
    const max = keys.find((k) => k.key === row.key)?.max ?? Infinity;
    if (row.failures > max) wait = Math.max(wait, row.remaining, 1);
  }
  if (wait > 0) {
    await withdrawLoginAttempt(db, attempt);
    throw new ProblemError(429, 'Too many failed sign-ins. Try again later.', { headers: { 'Retry-After': String(wait) } });
  }
  return attempt;
}

/** Takes the attempt's count back from `keys` (default: all it was counted on), if their window is still the same. */
export async function withdrawLoginAttempt(db: Database, attempt: LoginAttempt, keys?: LimitKey[]): Promise<void> {
  const counted = keys ? attempt.counted.filter((c) => keys.some((k) => k.key === c.key)) : attempt.counted;
  if (counted.length === 0) return;
  await db.appSql`
    update login_failures as f set failures = f.failures - 1
    from unnest(${counted.map((c) => c.key)}::text[], ${counted.map((c) => c.window)}::bigint[]) as c(key, window_id)
    where f.key = c.key and (extract(epoch from f.window_started_at) * 1000000)::bigint = c.window_id and f.failures > 0`;
}

/** A successful sign-in: the account's counts (per name, per user) start over. */
export async function clearLoginFailures(db: Database, keys: LimitKey[]): Promise<void> {
  await db.appSql`delete from login_failures where key = any(${keys.map((k) => k.key)}::text[])`;
}

/**
 * Forgets the sign-in counts of a user in the transaction's tenant, under their username
 * and their id (blackout leaves nothing that names the person, nor a count tied to them).
 */
export async function forgetAccountFailures(tx: Tx, config: Config, user: { id: number; username: string }): Promise<void> {
  const [tenant] = await tx.execute<{ id: string; slug: string }>(sql`select id, slug from tenants where id = ${currentTenant}`);
  if (!tenant) return;
  const byName = accountLimitKey(config, tenant.slug, user.username).key;
  const byUser = userLimitKey(config, Number(tenant.id), user.id).key;
  await tx.execute(sql`delete from login_failures where key in (${byName}, ${byUser})`);
}
