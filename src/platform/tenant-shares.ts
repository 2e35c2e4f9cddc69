/**
 * Places of a resource with room for a few at a time, shared between tenants
 * (docs/tenancy-and-security.md#sharing-between-tenants): the request pool's connections
 * (database.ts) and password hashing (auth/passwords.ts). Work enters before it uses the
 * resource and leaves once it is done with it.
 *
 * While a place is free, work enters at once, unless its tenant already holds all but one
 * of them while other tenants are about (one of them took a place within the last
 * second): that one is left to them. When none is free, it waits, and each place freed
 * goes to the waiting tenant that holds the fewest (among equals they take turns), its
 * work in the order it came. So one tenant's much or slow work waits behind
 * itself, not in front of another tenant's, and a tenant alone (a deployment of one) has
 * every place.
 */
/** How recently another tenant must have taken a place for the last free one to be kept for it. */
const OTHERS_ABOUT_MS = 1_000;

export class TenantShares {
  /** Places taken, all tenants together. */
  private taken = 0;
  /** Places each tenant holds (none kept at zero). */
  private readonly held = new Map<number, number>();
  /** The work waiting, by tenant: the tenants in turn order (one served goes to the back), each's work in the order it came. */
  private readonly waiting = new Map<number, (() => void)[]>();
  /** Most places one tenant may hold while other tenants are about. */
  readonly perTenant: number;
  /** The tenant that took a place last, and when; when another tenant than that one last took one. */
  private lastTenant = NaN;
  private lastAt = -Infinity;
  private otherAt = -Infinity;
  /** The look at waiting work set for when the other tenants' second has passed. */
  private recheck: NodeJS.Timeout | null = null;

  constructor(
    readonly capacity: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    // Too few places to keep one back: a tenant would lose half of them or more.
    this.perTenant = capacity > 2 ? capacity - 1 : capacity;
  }

  /**
   * Takes a place for work of `tenant` (0 for work without a tenant): undefined when it is
   * taken at once, else a promise settled once it is.
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
      this.recheckLater();
    });
  }

  /** Gives back the place `tenant` took, to the waiting tenant that holds the fewest. */
  leave(tenant: number): void {
    this.taken--;
    const holds = this.held.get(tenant)! - 1;
    if (holds === 0) this.held.delete(tenant);
    else this.held.set(tenant, holds);
    this.admitWaiting();
  }

  /** Runs `fn` in a place of `tenant`'s, given back when it settles. */
  async run<T>(tenant: number, fn: () => Promise<T>): Promise<T> {
    const entering = this.enter(tenant);
    if (entering) await entering;
    try {
      return await fn();
    } finally {
      this.leave(tenant);
    }
  }

  /** Lets waiting work in while places are free, the tenant holding the fewest first. */
  private admitWaiting(): void {
    while (this.taken < this.capacity) {
      let next: number | undefined;
      for (const waiter of this.waiting.keys()) {
        if (this.mayTake(waiter) && (next === undefined || this.holds(waiter) < this.holds(next))) next = waiter;
      }
      if (next === undefined) break;
      const queue = this.waiting.get(next)!;
      const admit = queue.shift()!;
      // Its turn taken: behind the other waiting tenants, among those holding as many.
      this.waiting.delete(next);
      if (queue.length > 0) this.waiting.set(next, queue);
      this.take(next);
      admit();
    }
    this.recheckLater();
  }

  /**
   * A place free while work waits: it waits for the other tenants to be gone
   * (`othersAbout`), which no `leave` may come to tell. They are looked at again once the
   * second since the last other tenant's take has passed.
   */
  private recheckLater(): void {
    if (this.recheck !== null || this.taken >= this.capacity || this.waiting.size === 0) return;
    const wait = Math.max(1, this.lastAt + OTHERS_ABOUT_MS - this.now());
    this.recheck = setTimeout(() => {
      this.recheck = null;
      this.admitWaiting();
    }, wait);
    this.recheck.unref();
  }

  private holds(tenant: number): number {
    return this.held.get(tenant) ?? 0;
  }

  private mayTake(tenant: number): boolean {
    if (this.taken >= this.capacity) return false;
    return this.holds(tenant) < this.perTenant || !this.othersAbout(tenant);
  }

  /**
   * Whether a tenant other than `tenant` (and not 0) took a place within the last second. (One that holds a place now
   * needs no asking: then every place is taken before `tenant` holds all but one.)
   */
  private othersAbout(tenant: number): boolean {
    return this.now() - (this.lastTenant !== tenant ? this.lastAt : this.otherAt) < OTHERS_ABOUT_MS;
  }

  private take(tenant: number): void {
    this.taken++;
    this.held.set(tenant, this.holds(tenant) + 1);
    // Work without a tenant (a sign-in's look-ups, the job queue's housekeeping) keeps nothing back for itself.
    if (tenant === 0) return;
    if (tenant !== this.lastTenant) {
      this.otherAt = this.lastAt;
      this.lastTenant = tenant;
    }
    this.lastAt = this.now();
  }
}
