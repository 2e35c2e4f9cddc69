/** RFC 9457 problem documents. The one way a handler reports a failure. */

/**
 * What went wrong with one field, for programs: a stable snake_case word. Schema
 * validation names its JSON Schema keyword (`min_length` for `minLength`); the database
 * and the hand-written rules name their rule. `invalid` is what a message without a code
 * of its own carries. Part of the contract (`Problem.error_codes`): never renamed.
 */
export const FIELD_CODES = [
  // JSON Schema keywords
  'required',
  'type',
  'format',
  'pattern',
  'min_length',
  'max_length',
  'minimum',
  'maximum',
  'exclusive_minimum',
  'exclusive_maximum',
  'multiple_of',
  'min_items',
  'max_items',
  'unique_items',
  'min_properties',
  'max_properties',
  'enum',
  'const',
  'unknown_property',
  'property_name',
  // refusals of the database and of the service's own rules
  'taken',
  'missing_reference',
  'in_use',
  'role_inactive',
  'department_limit_reached',
  'reused',
  'permission_missing',
  'permission_escalation',
  'confers_rights',
  'self_change_forbidden',
  'password_change_required',
  'required_by_settings',
  'reserved',
  'exactly_one',
  'not_allowed',
  'mismatch',
  'out_of_range',
  'cycle',
  'limit_reached',
  'not_deleted',
  'blacked_out',
  'not_eligible',
  'destination_not_allowed',
  'file_required',
  'unsupported_file_type',
  'csv_malformed',
  'csv_empty',
  'invalid',
] as const;
export type FieldCode = (typeof FIELD_CODES)[number];

/** A field's message with its code. A bare string is a message whose code is `invalid`. */
export interface CodedMessage {
  code: FieldCode;
  message: string;
}
export type FieldMessage = string | CodedMessage;

/** Field path → what is wrong with it, as handlers and rules collect it. */
export type FieldErrors = Record<string, FieldMessage[]>;
/** Field path → messages, as a problem document sends them (`errors`). */
export type FieldMessages = Record<string, string[]>;
/** Field path → codes, in the order of the messages (`error_codes`). */
export type FieldCodes = Record<string, FieldCode[]>;

/** A message with its code, for a FieldErrors entry. */
export const coded = (code: FieldCode, message: string): CodedMessage => ({ code, message });

const messageOf = (entry: FieldMessage) => (typeof entry === 'string' ? entry : entry.message);
const codeOf = (entry: FieldMessage): FieldCode => (typeof entry === 'string' ? 'invalid' : entry.code);

/** The messages of collected field errors, without their codes. */
export function fieldMessages(errors: FieldErrors): FieldMessages {
  return Object.fromEntries(Object.entries(errors).map(([field, entries]) => [field, entries.map(messageOf)]));
}

/** The codes of collected field errors, one per message, in the same order. */
export function fieldCodes(errors: FieldErrors): FieldCodes {
  return Object.fromEntries(Object.entries(errors).map(([field, entries]) => [field, entries.map(codeOf)]));
}

export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  /** What went wrong, for programs: one of PROBLEM_CODES. */
  code: ProblemCode;
  detail?: string;
  errors?: FieldMessages;
  error_codes?: FieldCodes;
  /** The request's id (`X-Request-Id`), set when the problem is sent. */
  request_id?: string;
}

/** One code of a problem type and what it means. */
export interface ProblemCodeDescription {
  code: string;
  description: string;
}

/** One kind of problem: the `type` URI's last segment, its status and what it means. */
export interface ProblemType {
  name: string;
  status: number;
  title: string;
  description: string;
  /** The codes problems of this type carry; the first is the status's default. */
  codes: readonly ProblemCodeDescription[];
}

/**
 * Every problem type the service answers. A problem's `type` is the relative URI
 * `/problems/<name>`, which the service itself resolves (`getProblemType`); RFC 9457
 * resolves it against the request's URL. One type per status; its `code` tells causes a
 * client must act on differently apart (a taken username from an inactive role, an
 * invalid token from a password that must change). The first code of a type is the one
 * a problem of that status carries unless its thrower names another. Codes are part of
 * the contract: added, never renamed or removed.
 */
const TYPES = [
  {
    name: 'bad-request',
    status: 400,
    title: 'Bad Request',
    description: 'The request could not be read: malformed JSON, query string, multipart body or path, or a JSON body nested too deeply.',
    codes: [{ code: 'malformed_request', description: 'The request could not be read; `detail` says which part.' }],
  },
  {
    name: 'unauthorized',
    status: 401,
    title: 'Unauthorized',
    description: 'No valid access token was sent, or it expired or was revoked; or the sign-in credentials were not accepted.',
    codes: [
      { code: 'unauthenticated', description: 'No access token (or metrics token) was sent, or the text sent is not one: sign in and send one.' },
      { code: 'token_invalid', description: 'The access token sent is invalid, expired or revoked: sign in again.' },
      { code: 'credentials_invalid', description: 'Sign-in refused: the tenant, username or password is wrong, or the user is inactive.' },
      { code: 'login_token_invalid', description: 'The login token is invalid, expired or already used.' },
      { code: 'signature_invalid', description: "A signed profile picture URL's signature is invalid or has expired." },
    ],
  },
  {
    name: 'forbidden',
    status: 403,
    title: 'Forbidden',
    description: 'The caller is signed in but may not do this: `detail` names the missing permission or the rule that refuses it.',
    codes: [
      { code: 'forbidden', description: 'A rule of the service refuses this caller; `detail` names it.' },
      { code: 'permission_missing', description: 'The caller lacks the permission the operation requires; `detail` names it.' },
      {
        code: 'password_change_required',
        description: "The session's user must change their password first: until then it may only change its own password, read its own user and sign out.",
      },
      { code: 'own_account', description: "The operation may not be applied to the caller's own account (deleting or blacking out oneself, say)." },
      { code: 'logout_protected', description: 'The account is protected from logout (`prevent_logout`).' },
      { code: 'permission_escalation', description: 'The target (a user or a role) holds or grants permissions the caller does not hold.' },
      { code: 'group_account', description: 'Group accounts may not do this (receive push notifications).' },
      { code: 'not_administrator', description: 'Only those who administer the record (a task template) may change it.' },
    ],
  },
  {
    name: 'not-found',
    status: 404,
    title: 'Not Found',
    description: "The route or the record does not exist. Another tenant's record is answered exactly like a missing one.",
    codes: [{ code: 'not_found', description: "The route or the record does not exist (or is another tenant's, or hidden from the caller)." }],
  },
  {
    name: 'method-not-allowed',
    status: 405,
    title: 'Method Not Allowed',
    description: 'The path exists but not with this HTTP method.',
    codes: [{ code: 'method_not_allowed', description: 'The path exists but not with this HTTP method.' }],
  },
  {
    name: 'request-timeout',
    status: 408,
    title: 'Request Timeout',
    description: 'The request was not received completely in time.',
    codes: [{ code: 'request_timeout', description: 'The request was not received completely in time.' }],
  },
  {
    name: 'conflict',
    status: 409,
    title: 'Conflict',
    description: 'The request conflicts with the current state of the record.',
    codes: [
      { code: 'conflict', description: 'The request conflicts with the current state of the record.' },
      { code: 'record_in_use', description: 'The record cannot be deleted while others depend on it; `errors` names them.' },
      {
        code: 'idempotency_request_in_progress',
        description: 'A request with this `Idempotency-Key` is still running (or its server stopped before it answered): retry after `Retry-After` seconds.',
      },
    ],
  },
  {
    name: 'precondition-failed',
    status: 412,
    title: 'Precondition Failed',
    description: 'A precondition of the request (If-Match, If-None-Match) does not hold; nothing was changed.',
    codes: [
      {
        code: 'precondition_failed',
        description: 'If-Match named an entity tag (records carry none), or If-None-Match: * asked that the target not exist: nothing was changed.',
      },
    ],
  },
  {
    name: 'content-too-large',
    status: 413,
    title: 'Content Too Large',
    description: 'The body is larger than the service or the operation accepts (uploads say their limit in `detail`).',
    codes: [{ code: 'content_too_large', description: 'The body, a file in it, or the number of files is over the limit `detail` states.' }],
  },
  {
    name: 'uri-too-long',
    status: 414,
    title: 'URI Too Long',
    description: 'A path segment is longer than the service accepts.',
    codes: [{ code: 'uri_too_long', description: 'A path segment is longer than the service accepts.' }],
  },
  {
    name: 'unsupported-media-type',
    status: 415,
    title: 'Unsupported Media Type',
    description: 'The body is of a media type the operation does not declare.',
    codes: [{ code: 'unsupported_media_type', description: 'The body is of a media type the operation does not take.' }],
  },
  {
    name: 'unprocessable-content',
    status: 422,
    title: 'Unprocessable Content',
    description:
      'The request is well formed but invalid: `errors` maps each field path (`auth.basic.username`, `user_ids.3`, `filter.text`) to its messages, `error_codes` the same paths to their codes.',
    codes: [
      { code: 'validation_failed', description: 'One or more fields are invalid: `errors` and `error_codes` say which and why.' },
      { code: 'idempotency_key_reused', description: 'This `Idempotency-Key` was used for another request: send a new key for a new request.' },
    ],
  },
  {
    name: 'too-many-requests',
    status: 429,
    title: 'Too Many Requests',
    description: 'Rate limited: the `Retry-After` header says how many seconds to wait.',
    codes: [
      { code: 'rate_limited', description: "Too many requests: wait the `Retry-After` header's seconds." },
      { code: 'sign_in_throttled', description: "Too many failed sign-ins for this account: wait the `Retry-After` header's seconds." },
      { code: 'stream_limit_reached', description: 'The user has as many event streams open as allowed: close one first.' },
    ],
  },
  {
    name: 'request-header-fields-too-large',
    status: 431,
    title: 'Request Header Fields Too Large',
    description: 'The request headers are larger than the service accepts.',
    codes: [{ code: 'headers_too_large', description: 'The request line and headers are larger than the service accepts.' }],
  },
  {
    name: 'internal-server-error',
    status: 500,
    title: 'Internal Server Error',
    description: 'An unexpected error occurred in the service. It is logged; the answer says nothing more.',
    codes: [{ code: 'internal_error', description: 'An unexpected error occurred; quote `request_id` when reporting it.' }],
  },
  {
    name: 'service-unavailable',
    status: 503,
    title: 'Service Unavailable',
    description:
      "The service cannot answer now, for example while its database is unreachable, or after PostgreSQL ended the request's transaction to let a concurrent one on the same records proceed, or cancelled its statement (a statement timeout, an operator); nothing of it was written.",
    codes: [
      {
        code: 'service_unavailable',
        description:
          'The service cannot answer now (a concurrent request held the same records, or the database cancelled the statement; nothing was changed): send the request again after `Retry-After` seconds.',
      },
      { code: 'database_unavailable', description: 'The database is unreachable for the moment: retry after `Retry-After` seconds.' },
    ],
  },
] as const satisfies readonly ProblemType[];
export const PROBLEM_TYPES: readonly ProblemType[] = TYPES;

/** What went wrong, for programs: the `code` of a problem document. */
export type ProblemCode = (typeof TYPES)[number]['codes'][number]['code'];
/** Every problem code, in the order of the problem types. */
export const PROBLEM_CODES: readonly ProblemCode[] = TYPES.flatMap((type) => type.codes.map(({ code }) => code));

const BY_STATUS = new Map<number, ProblemType>(PROBLEM_TYPES.map((type) => [type.status, type]));
const BAD_REQUEST = BY_STATUS.get(400)!;
const INTERNAL_SERVER_ERROR = BY_STATUS.get(500)!;

/** The `type` URI of a problem type. */
export const problemTypeUri = (name: string) => `/problems/${name}`;

/** The type a status is answered with; a status without a type of its own takes its class's. */
export function problemTypeOf(status: number): ProblemType {
  return BY_STATUS.get(status) ?? (status >= 500 ? INTERNAL_SERVER_ERROR : BAD_REQUEST);
}

/** The code a problem of `status` carries when its thrower names none: its type's first. */
export const defaultCode = (status: number) => problemTypeOf(status).codes[0]!.code as ProblemCode;

export interface ProblemOptions {
  /** Default: the status's (`defaultCode`). */
  code?: ProblemCode;
  errors?: FieldErrors;
  headers?: Record<string, string>;
}

export class ProblemError extends Error {
  readonly status: number;
  readonly code: ProblemCode;
  readonly headers: Record<string, string>;
  readonly #fieldErrors: FieldErrors | undefined;

  constructor(status: number, detail: string, options: ProblemOptions = {}) {
    super(detail);
    this.name = 'ProblemError';
    this.status = status;
    this.code = options.code ?? defaultCode(status);
    this.headers = options.headers ?? {};
    this.#fieldErrors = options.errors;
  }

  // Made when read, not when thrown: a refusal of a body with many faulty keys is sent
  // through `toDocument`, which names only the first FIELDS_NAMED.
  /** Field path → messages, every field at fault. */
  get errors(): FieldMessages | undefined {
    return this.#fieldErrors && fieldMessages(this.#fieldErrors);
  }

  /** Field path → codes, one per message. */
  get errorCodes(): FieldCodes | undefined {
    return this.#fieldErrors && fieldCodes(this.#fieldErrors);
  }

  /** As `problemDocument` makes it (at most FIELDS_NAMED fields named). */
  toDocument(): ProblemDocument {
    return problemDocument(this.status, this.message, { code: this.code, errors: this.#fieldErrors });
  }
}

/**
 * At most this many fields are named in a problem's `errors`: a body of a hundred thousand
 * unknown keys (1 MiB) would otherwise be answered with several megabytes.
 */
export const FIELDS_NAMED = 100;

/** A problem document; `errors` with their codes, when there are any. */
export function problemDocument(status: number, detail?: string, options: { code?: ProblemCode; errors?: FieldErrors } = {}): ProblemDocument {
  const problemType = problemTypeOf(status);
  const paths = options.errors ? Object.keys(options.errors) : [];
  let errors = paths.length > 0 ? options.errors : undefined;
  if (paths.length > FIELDS_NAMED) {
    errors = Object.fromEntries(paths.slice(0, FIELDS_NAMED).map((path) => [path, options.errors![path]!]));
    detail = `${detail ?? problemType.title} More than ${FIELDS_NAMED} fields are at fault; the first ${FIELDS_NAMED} are named.`;
  }
  return {
    type: problemTypeUri(problemType.name),
    title: problemType.title,
    status,
    code: options.code ?? defaultCode(status),
    ...(detail !== undefined ? { detail } : {}),
    ...(errors ? { errors: fieldMessages(errors), error_codes: fieldCodes(errors) } : {}),
  };
}

export const notFound = (what = 'The record') => new ProblemError(404, `${what} does not exist.`);
export const forbidden = (detail = 'You are not permitted to do this.', code?: ProblemCode) => new ProblemError(403, detail, { code });
/**
 * 401. RFC 9110 §11.6.1: the answer names the scheme that would do, RFC 6750's Bearer;
 * `error="invalid_token"` (RFC 6750 §3.1) when a presented access token was refused.
 */
export const unauthorized = (detail = 'A valid access token is required.', code?: ProblemCode) =>
  new ProblemError(401, detail, {
    code,
    headers: { 'www-authenticate': code === 'token_invalid' ? 'Bearer realm="atrium", error="invalid_token"' : 'Bearer realm="atrium"' },
  });
export const invalid = (errors: FieldErrors, detail = 'The request is invalid.') => new ProblemError(422, detail, { errors });
/** 409: the record is still used by others (a delete they depend on); `errors` names them. */
export const conflict = (errors: FieldErrors, detail: string) => new ProblemError(409, detail, { code: 'record_in_use', errors });
