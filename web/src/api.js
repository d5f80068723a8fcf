// The coordinator's REST API and live feed, with the user's bearer token.
//
// The token lives in sessionStorage (this tab only, gone when it closes). Every call
// sends `Authorization: Bearer <token>`; a 401 forgets the token and calls the handler
// set by the app (which shows the login). The live feed (server-sent events) is read
// with fetch() and a stream reader, because EventSource cannot send the header.

export const API = '/api/v1';
const TOKEN_KEY = 'reservoir.token';

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  /** @param {string} value */
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

/**
 * An answer other than 2xx, read from its problem details (RFC 9457): `status`, the
 * message `detail`, the stable `code`, a 422's field `errors` ([{loc, msg, type}]) and
 * the `requestId` that finds the request in the coordinator's log.
 */
export class ApiError extends Error {
  /**
   * @param {number} status @param {any} detail @param {string} message
   * @param {{code?: string | null, errors?: any[] | null, requestId?: string | null}} [problem]
   */
  constructor(status, detail, message, { code = null, errors = null, requestId = null } = {}) {
    super(message);
    this.status = status;
    this.detail = detail;
    this.code = code;
    this.errors = errors;
    this.requestId = requestId;
  }
}

/** 401: no token, or one the coordinator does not know. */
export class Unauthorized extends ApiError {}

/** @type {(why: string) => void} */
let unauthorized = () => {};

/** Called on every 401, with a sentence saying why. @param {(why: string) => void} fn */
export function onUnauthorized(fn) {
  unauthorized = fn;
}

function headers(extra = {}) {
  const value = token.get();
  if (!value) {
    unauthorized('Sign in with a token.');
    throw new Unauthorized(401, null, 'no token');
  }
  return { Authorization: `Bearer ${value}`, ...extra };
}

/** The JSON object of an answer's body, or {} (not JSON, or not an object). @param {string} text */
function problemOf(text) {
  try {
    const body = JSON.parse(text);
    return body !== null && typeof body === 'object' && !Array.isArray(body) ? body : {};
  } catch {
    return {};
  }
}

/** @param {Response} r */
async function failure(r) {
  const text = await r.text();
  const problem = problemOf(text);
  const detail = problem.detail ?? text;
  const found = {
    code: typeof problem.code === 'string' ? problem.code : null,
    errors: Array.isArray(problem.errors) ? problem.errors : null,
    requestId: problem.request_id ?? r.headers.get('X-Request-ID'),
  };
  if (r.status === 401) {
    token.clear();
    unauthorized('The coordinator refused the token (401). Sign in again.');
    return new Unauthorized(401, detail, 'unauthorized', found);
  }
  const what = typeof detail === 'string' ? detail : JSON.stringify(detail);
  const trace = r.status >= 500 && found.requestId ? ` (request id ${found.requestId})` : '';
  return new ApiError(r.status, detail, `${r.status}: ${what}`.slice(0, 300) + trace, found);
}

/**
 * A JSON call to /api/v1 + path.
 * @param {string} path
 * @param {{method?: string, body?: any, signal?: AbortSignal, more?: Record<string, string>}} [options]
 */
export async function api(path, { method = 'GET', body, signal, more = {} } = {}) {
  const extra = body === undefined ? { ...more } : { 'Content-Type': 'application/json', ...more };
  const r = await fetch(API + path, {
    method,
    headers: headers(extra),
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: 'no-store',
  });
  if (!r.ok) throw await failure(r);
  if (r.status === 204) return null;
  return r.json();
}

/**
 * Every item of a list at /api/v1 + path, following its pages (X-Next-Cursor), 1000 a
 * page: the inventory's lists (agents, volume sets, links).
 * @param {string} path @param {AbortSignal} [signal]
 * @returns {Promise<any[]>}
 */
export async function all(path, signal) {
  /** @type {any[]} */
  const items = [];
  let cursor = null;
  do {
    const query = new URLSearchParams({ limit: '1000' });
    if (cursor) query.set('cursor', cursor);
    const r = await fetch(`${API}${path}?${query}`, { headers: headers(), signal, cache: 'no-store' });
    if (!r.ok) throw await failure(r);
    items.push(...(await r.json()));
    cursor = r.headers.get('X-Next-Cursor');
  } while (cursor);
  return items;
}

/**
 * The text at `path` of the coordinator (a report page), with the token.
 * @param {string} path @param {AbortSignal} [signal]
 */
export async function text(path, signal) {
  const r = await fetch(path, { headers: headers(), signal, cache: 'no-store' });
  if (!r.ok) throw await failure(r);
  return r.text();
}

/**
 * Reads the server-sent events of /api/v1 + path until the server ends the stream
 * (resolves) or `signal` aborts it (rejects with an AbortError).
 * @param {string} path
 * @param {(name: string, data: any) => void} onEvent
 * @param {AbortSignal} signal
 */
export async function readEvents(path, onEvent, signal) {
  const r = await fetch(API + path, {
    headers: headers({ Accept: 'text/event-stream' }),
    signal,
    cache: 'no-store',
  });
  if (!r.ok) throw await failure(r);
  if (!r.body) throw new ApiError(r.status, null, 'the live feed has no body');
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new EventParser(onEvent);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parser.push(value);
  }
  parser.push('\n\n');
}

/** The text/event-stream format: `event:` and `data:` lines, a blank line ends one. */
export class EventParser {
  /** @param {(name: string, data: any) => void} onEvent */
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = '';
    this.name = '';
    /** @type {string[]} */ this.data = [];
  }

  /** @param {string} chunk */
  push(chunk) {
    this.buffer += chunk;
    let end;
    while ((end = this.buffer.indexOf('\n')) >= 0) {
      let line = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      this.line(line);
    }
  }

  /** @param {string} line */
  line(line) {
    if (line === '') {
      if (this.data.length) {
        const text = this.data.join('\n');
        let data = text;
        try {
          data = JSON.parse(text);
        } catch {
          // not JSON: hand over the text
        }
        this.onEvent(this.name || 'message', data);
      }
      this.name = '';
      this.data = [];
      return;
    }
    if (line.startsWith(':')) return; // a comment (keepalive)
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.name = value;
    else if (field === 'data') this.data.push(value);
  }
}

/**
 * Whether the coordinator accepts `value` as a user's token (GET /agents answers
 * 200), without touching the stored token. 401 and 403 mean no.
 * @param {string} value
 * @returns {Promise<boolean>}
 */
export async function acceptsToken(value) {
  const r = await fetch(`${API}/agents`, {
    headers: { Authorization: `Bearer ${value}` },
    cache: 'no-store',
  });
  if (r.status === 401 || r.status === 403) return false;
  if (!r.ok) throw await failure(r);
  return true;
}

/** A fresh Idempotency-Key: 128 random bits in hex (crypto.randomUUID needs a secure context). */
export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
