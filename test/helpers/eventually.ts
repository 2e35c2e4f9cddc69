/** Polls `probe` until `done` holds or the time is up (background jobs; never a fixed sleep). */
export async function eventually<T>(probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * The status `probe` (a request to `/health/ready`) answers, asked until it is 200 or 15 s
 * passed. Readiness gives the database two seconds (the pools, then fresh connections); on
 * a loaded machine, just after a start, a restart or the loss of every connection, the
 * first probes may take longer than that, and a test of "ready again" must not fail then.
 */
export const readinessOnceReady = (probe: () => Promise<number>): Promise<number> => eventually(probe, (status) => status === 200, 15_000);
