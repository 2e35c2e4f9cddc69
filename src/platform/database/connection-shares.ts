/**
 * How the request pool's connections are shared between tenants
 * (docs/tenancy-and-security.md#sharing-the-request-pool). Every transaction of the pool
 * enters before it reserves a connection and leaves once it has released it.
 *
 * While a connection is free, a transaction enters at once, unless its tenant already
 * holds all but one of them: one is always left to the other tenants, and to the
 * authentication statements, which reserve none. When none is free, it waits, and each
 * place freed goes to the waiting tenant that holds the fewest (then to the one that has
 * waited longest), its transactions in the order they came. So one tenant's many slow
 * requests (long lists, CSV previews) wait behind each other, not in front of another
 * tenant's, and a pool that one tenant alone uses is all its own but one connection.
 */
export class ConnectionShares {
  /** Places taken, all tenants together. */
  private taken = 0;
  /** Places each tenant holds (none kept at zero). */
  private readonly held = new Map<number, number>();
  /** The transactions waiting, by tenant, in the order each tenant first waited. */
  private readonly waiting = new Map<number, (() => void)[]>();
  /** Most places one tenant may hold. */
  readonly perTenant: number;

  constructor(readonly capacity: number) {
    // Too small a pool to keep one back: a tenant alone would lose half of it or more.
    this.perTenant = capacity > 2 ? capacity - 1 : capacity;
  }

  /**
   * Takes a place for a transaction of `tenant` (0 for one without a tenant): undefined
   * when it is taken at once, else a promise settled once it is.
   */
  enter(tenant: number): Promise<void> | undefined {
    if (!this.waiting.has(tenant) && this.mayTake(tenant)) {
      this.take(tenant);
      return undefined;
    }
    return new Promise((resolve) => {
      const queue = this.waiting.get(tenant);
      if (queue) queue.push(resolve);
      else this.waiting.set(tenant, [resolve]);
    });
  }

  /** Gives back the place `tenant` took, to the waiting tenant that holds the fewest. */
  leave(tenant: number): void {
    this.taken--;
    const holds = this.held.get(tenant)! - 1;
    if (holds === 0) this.held.delete(tenant);
    else this.held.set(tenant, holds);
    while (this.taken < this.capacity) {
      let next: number | undefined;
      for (const waiter of this.waiting.keys()) {
        if (this.mayTake(waiter) && (next === undefined || this.holds(waiter) < this.holds(next))) next = waiter;
      }
      if (next === undefined) return;
      const queue = this.waiting.get(next)!;
      const admit = queue.shift()!;
      if (queue.length === 0) this.waiting.delete(next);
      this.take(next);
      admit();
    }
  }

  private holds(tenant: number): number {
    return this.held.get(tenant) ?? 0;
  }

  private mayTake(tenant: number): boolean {
    return this.taken < this.capacity && this.holds(tenant) < this.perTenant;
  }

  private take(tenant: number): void {
    this.taken++;
    this.held.set(tenant, this.holds(tenant) + 1);
  }
}
