/**
 * The webhook action's configuration (the spec, schema `WebhookConfiguration`): how its
 * secrets are stored, kept and shown (docs/outbound-delivery.md#webhooks). The rules a
 * configuration must meet beyond the schema are in rules.ts.
 */
import type { components } from '../../../generated/api.ts';
import { coded, type FieldErrors } from '../../platform/http/problem.ts';
import type { Secrets } from '../../platform/secrets/secrets.ts';

export type WebhookConfiguration = components['schemas']['WebhookConfiguration'];
/** As answered (schema `WebhookConfigurationFull`): every key present, null where none was written. */
export type AnsweredWebhookConfiguration = components['schemas']['WebhookConfigurationFull'];
/** As stored: the same shape, with every secret replaced by its ciphertext. */
export type StoredWebhookConfiguration = WebhookConfiguration;

/** What the API answers in place of a stored secret; sent back in an update it means "keep". */
export const MASK = '********';
const PURPOSE = 'webhook-secrets';

/** The secret keys of the configuration, by auth type. */
const SECRET_KEYS = { basic: 'password', header: 'value', secret: 'secret' } as const;
type SecretHolder = keyof typeof SECRET_KEYS;

function eachSecret(config: WebhookConfiguration, fn: (holder: SecretHolder, value: string) => string): WebhookConfiguration {
  if (!config.auth) return config;
  const auth: Record<string, unknown> = { ...config.auth };
  for (const holder of Object.keys(SECRET_KEYS) as SecretHolder[]) {
    const part = auth[holder] as Record<string, string> | undefined;
    const key = SECRET_KEYS[holder];
    if (part && typeof part[key] === 'string') auth[holder] = { ...part, [key]: fn(holder, part[key]) };
  }
  return { ...config, auth };
}

/**
 * Whether `next` stores another secret than `previous` (a secret sent again, its value the
 * same or not, is sealed anew: it counts as changed; the mask keeps the stored one).
 */
export function secretsChanged(next: StoredWebhookConfiguration, previous: StoredWebhookConfiguration): boolean {
  const secretsOf = (config: StoredWebhookConfiguration) => {
    const found: string[] = [];
    eachSecret(config, (holder, value) => {
      found.push(`${holder}:${value}`);
      return value;
    });
    return found.join('\n');
  };
  return secretsOf(next) !== secretsOf(previous);
}

/**
 * The configuration as answered: secrets masked, and `method`, `auth` and `auth.type`, which
 * a configuration may leave out, answered as null when left out (the spec, schema
 * `WebhookConfigurationFull`), so that an answer always holds them.
 */
export function answeredConfiguration(stored: StoredWebhookConfiguration): AnsweredWebhookConfiguration {
  const masked = eachSecret(stored, () => MASK);
  return { ...masked, method: masked.method ?? null, auth: masked.auth ? { ...masked.auth, type: masked.auth.type ?? null } : null };
}

/**
 * Whether a masked secret may keep the stored one: only while the request still goes where
 * the secret was meant to go. A changed `url`, auth type or header name would let whoever
 * may edit automations send a stored password to a host (or header) of their choosing.
 */
function secretsMayBeKept(config: WebhookConfiguration, previous: StoredWebhookConfiguration): boolean {
  return (
    config.url === previous.url &&
    (config.auth?.type ?? null) === (previous.auth?.type ?? null) &&
    (config.auth?.header?.name ?? null) === (previous.auth?.header?.name ?? null)
  );
}

/**
 * The configuration to store: secrets encrypted; a masked secret keeps the value stored
 * under the same key (`previous`). It is an error where none is stored, and where the url,
 * auth type or header name changes (the secret must be sent again then).
 */
export function sealSecrets(
  config: WebhookConfiguration,
  previous: StoredWebhookConfiguration | null,
  secrets: Secrets,
  errorPrefix: string,
): { stored: StoredWebhookConfiguration; errors: FieldErrors } {
  const errors: FieldErrors = {};
  const stored = eachSecret(config, (holder, value) => {
    if (value !== MASK) return secrets.encrypt(PURPOSE, value);
    const path = `${errorPrefix}auth.${holder}.${SECRET_KEYS[holder]}`;
    const kept = (previous?.auth?.[holder] as Record<string, string> | undefined)?.[SECRET_KEYS[holder]];
    if (kept === undefined) errors[path] = [coded('required', 'is masked, but no value is stored to keep')];
    else if (!secretsMayBeKept(config, previous!)) errors[path] = [coded('required', 'must be sent again when url, auth type or header name changes')];
    return kept ?? '';
  });
  return { stored, errors };
}

/** The configuration with its secrets in plain text, for sending. */
export const unsealSecrets = (stored: StoredWebhookConfiguration, secrets: Secrets): WebhookConfiguration =>
  eachSecret(stored, (_, value) => secrets.decrypt(PURPOSE, value));
