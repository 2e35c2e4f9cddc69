/**
 * Runs the steps of a shutdown in order, each whether or not one before it failed: a part
 * that cannot stop cleanly (a job queue whose database is gone) must not leave the parts
 * after it running (the embedded PostgreSQL). Answers the errors of the steps that failed,
 * in order, for the caller to log or throw.
 */
export async function stopEach(steps: ReadonlyArray<() => unknown>): Promise<unknown[]> {
  const errors: unknown[] = [];
  for (const step of steps) {
    try {
      await step();
    } catch (error) {
      errors.push(error);
    }
  }
  return errors;
}
