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

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  406: 'Not Acceptable',
  408: 'Request Timeout',
  409: 'Conflict',
  413: 'Content Too Large',
  414: 'URI Too Long',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

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
  const title = TITLES[status] ?? (status >= 500 ? 'Internal Server Error' : 'Bad Request');
  return {
    type: status >= 500 ? 'about:blank' : `https://atrium.dev/problems/${title.toLowerCase().replace(/ /g, '-')}`,
    title,
    status,
    ...(detail !== undefined ? { detail } : {}),
    ...(errors && Object.keys(errors).length > 0 ? { errors } : {}),
  };
}

export const notFound = (what = 'The record') => new ProblemError(404, `${what} does not exist.`);
export const forbidden = (detail = 'You are not permitted to do this.') => new ProblemError(403, detail);
export const unauthorized = (detail = 'A valid access token is required.') => new ProblemError(401, detail);
export const invalid = (errors: FieldErrors, detail = 'The request is invalid.') => new ProblemError(422, detail, { errors });
