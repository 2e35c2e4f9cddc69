import type { Config } from '../../config.ts';
import type { Database } from '../database/database.ts';

/**
 * Failed sign-ins are counted per account and per client address in PostgreSQL, so every
 * API process sees the same counts (decisions §2: repeated failures → 429 + Retry-After).
 */
export interface LimitKey {
  key: string;
  max: number;
}

export function loginLimitKeys(config: Config, tenant: string, username: string, ip: string): LimitKey[] {
  return [{ key: `account:${tenant.toLowerCase()}/${username.toLowerCase()}`, max: config.loginMaxFailures }, clientAddressLimitKey(config, ip)];
}

/** The per-client-address count, shared by every way of signing in (password, login token). */
export function clientAddressLimitKey(config: Config, ip: string): LimitKey {
  return { key: `ip:${ip}`, max: config.loginMaxFailures * 5 };
}

/** Seconds until the caller may try again, or 0. */
export async function loginRetryAfter(db: Database, config: Config, keys: LimitKey[]): Promise<number> {
  const rows = await db.appSql<{ key: string; failures: number; remaining: number }[]>`
    select key, failures,
           ceil(extract(epoch from window_started_at + make_interval(secs => ${config.loginFailureWindowSeconds}) - now()))::int as remaining
    from login_failures
    where key = any(${keys.map((k) => k.key)}::text[])`;
  let wait = 0;
  for (const row of rows) {
    const limit = keys.find((k) => k.key === row.key)?.max ?? Infinity;
    if (row.failures >= limit && row.remaining > 0) wait = Math.max(wait, row.remaining);
  }
  return wait;
}

export async function recordLoginFailure(db: Database, config: Config, keys: LimitKey[]): Promise<void> {
  const window = config.loginFailureWindowSeconds;
  await db.appSql`
    insert into login_failures (key, failures, window_started_at)
    select unnest(${keys.map((k) => k.key)}::text[]), 1, now()
    on conflict (key) do update set
      failures = case when login_failures.window_started_at < now() - make_interval(secs => ${window})
                      then 1 else login_failures.failures + 1 end,
      window_started_at = case when login_failures.window_started_at < now() - make_interval(secs => ${window})
                      then now() else login_failures.window_started_at end`;
}

export async function clearLoginFailures(db: Database, key: LimitKey): Promise<void> {
  await db.appSql`delete from login_failures where key = ${key.key}`;
}
