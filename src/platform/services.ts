import type { Config } from '../config.ts';
import type { RecentPrincipals } from './auth/recent-principals.ts';
import type { Database } from './database/database.ts';
import type { Jobs } from './jobs/jobs.ts';
import type { Metrics } from './metrics/metrics.ts';
import type { OutboundClient } from './outbound/client.ts';
import type { Secrets } from './secrets/secrets.ts';

/**
 * What handlers and jobs are given; built once per process in src/server.ts. Resources add
 * their own process-wide parts by declaration merging (notifications/stream.ts).
 */
export interface Services {
  config: Config;
  db: Database;
  jobs: Jobs;
  secrets: Secrets;
  /** HTTP requests to user-configured addresses (webhooks): timeouts and the SSRF guard. */
  /** Webhooks' outbound client (WEBHOOK_ALLOWED_CIDRS). */
  outbound: OutboundClient;
  /** Push's (PUSH_ALLOWED_CIDRS): endpoints every user registers reach no host listed for webhooks only. */
  pushOutbound: OutboundClient;
  /** Prometheus metrics of this process (docs/observability.md). */
  metrics: Metrics;
  /** Principals of tokens looked up in the last second (auth/recent-principals.ts). */
  principals: RecentPrincipals;
}
