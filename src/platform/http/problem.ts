/** RFC 9457 problem documents. The one way a handler reports a failure. */
export type FieldErrors = Record<string, string[]>;

export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  detail?: string;
  errors?: FieldErrors;
  /** The request's id (`X-Request-Id`), set when the problem is sent. */
  request_id?: string;
}

/** One kind of problem: the `type` URI's last segment, its status and what it means. */
export interface ProblemType {
  name: string;
  status: number;
  title: string;
  description: string;
}

/**
 * Every problem type the service answers. A problem's `type` is the relative URI
 * `/problems/<name>`, which the service itself resolves (`getProblemType`); RFC 9457
 * resolves it against the request's URL. One type per status: `detail` and `errors` say
 * what exactly went wrong.
 */
export const PROBLEM_TYPES: readonly ProblemType[] = [
  {
    name: 'bad-request',
    status: 400,
    title: 'Bad Request',
    description: 'The request could not be read: malformed JSON, query string, multipart body or path, or a JSON body nested too deeply.',
  },
  {
    name: 'unauthorized',
    status: 401,
    title: 'Unauthorized',
    description: 'No valid access token was sent, or it expired or was revoked; or the sign-in credentials were not accepted.',
  },
  {
    name: 'forbidden',
    status: 403,
    title: 'Forbidden',
    description: 'The caller is signed in but may not do this: `detail` names the missing permission or the rule that refuses it.',
  },
  {
    name: 'not-found',
    status: 404,
    title: 'Not Found',
    description: "The route or the record does not exist. Another tenant's record is answered exactly like a missing one.",
  },
  { name: 'method-not-allowed', status: 405, title: 'Method Not Allowed', description: 'The path exists but not with this HTTP method.' },
  { name: 'not-acceptable', status: 406, title: 'Not Acceptable', description: 'The service cannot answer in a media type the `Accept` header allows.' },
  { name: 'request-timeout', status: 408, title: 'Request Timeout', description: 'The request was not received completely in time.' },
  { name: 'conflict', status: 409, title: 'Conflict', description: 'The request conflicts with the current state of the record.' },
  {
    name: 'content-too-large',
    status: 413,
    title: 'Content Too Large',
    description: 'The body is larger than the service or the operation accepts (uploads say their limit in `detail`).',
  },
  { name: 'uri-too-long', status: 414, title: 'URI Too Long', description: 'A path segment is longer than the service accepts.' },
  { name: 'unsupported-media-type', status: 415, title: 'Unsupported Media Type', description: 'The body is of a media type the operation does not declare.' },
  {
    name: 'unprocessable-content',
    status: 422,
    title: 'Unprocessable Content',
    description: 'The request is well formed but invalid: `errors` maps each field path (`auth.basic.username`, `user_ids.3`, `filter.text`) to its messages.',
  },
  { name: 'too-many-requests', status: 429, title: 'Too Many Requests', description: 'Rate limited: the `Retry-After` header says how many seconds to wait.' },
  {
    name: 'request-header-fields-too-large',
    status: 431,
    title: 'Request Header Fields Too Large',
    description: 'The request headers are larger than the service accepts.',
  },
  {
    name: 'internal-server-error',
    status: 500,
    title: 'Internal Server Error',
    description: 'An unexpected error occurred in the service. It is logged; the answer says nothing more.',
  },
  {
    name: 'service-unavailable',
    status: 503,
    title: 'Service Unavailable',
    description: 'The service cannot answer now, for example while its database is unreachable.',
  },
];

const BY_STATUS = new Map(PROBLEM_TYPES.map((type) => [type.status, type]));
const BAD_REQUEST = BY_STATUS.get(400)!;
const INTERNAL_SERVER_ERROR = BY_STATUS.get(500)!;

/** The `type` URI of a problem type. */
export const problemTypeUri = (name: string) => `/problems/${name}`;

/** The type a status is answered with; a status without a type of its own takes its class's. */
export function problemTypeOf(status: number): ProblemType {
  return BY_STATUS.get(status) ?? (status >= 500 ? INTERNAL_SERVER_ERROR : BAD_REQUEST);
}

export class ProblemError extends Error {
  readonly status: number;
  readonly errors: FieldErrors | undefined;
  readonly headers: Record<string, string>;

  constructor(status: number, detail: string, options: { errors?: FieldErrors; headers?: Record<string, string> } = {}) {
    super(detail);
    this.name = 'ProblemError';
    this.status = status;
    this.errors = options.errors;
    this.headers = options.headers ?? {};
  }

  toDocument(): ProblemDocument {
    return problemDocument(this.status, this.message, this.errors);
  }
}

export function problemDocument(status: number, detail?: string, errors?: FieldErrors): ProblemDocument {
  const problemType = problemTypeOf(status);
  return {
    type: problemTypeUri(problemType.name),
    title: problemType.title,
    status,
    ...(detail !== undefined ? { detail } : {}),
    ...(errors && Object.keys(errors).length > 0 ? { errors } : {}),
  };
}

export const notFound = (what = 'The record') => new ProblemError(404, `${what} does not exist.`);
export const forbidden = (detail = 'You are not permitted to do this.') => new ProblemError(403, detail);
export const unauthorized = (detail = 'A valid access token is required.') => new ProblemError(401, detail);
export const invalid = (errors: FieldErrors, detail = 'The request is invalid.') => new ProblemError(422, detail, { errors });
/** 409: the record is still used by others (a delete they depend on); `errors` names them. */
export const conflict = (errors: FieldErrors, detail: string) => new ProblemError(409, detail, { errors });
