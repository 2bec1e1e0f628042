// The daemon's HTTP API as this page calls it: paths relative to where the page was served (so it
// works behind a proxy under a sub-path), this browser's identity on every call, JSON both ways, and
// the daemon's `{error, code}` turned into an ApiError.

import { authHeaders } from './auth.js';

/** The daemon's root: the page's directory (assets live one level below it, in assets/). */
export const ROOT = new URL('../', import.meta.url);

/** A request's deadline: generous, the daemon answers everything but blocking prompts at once. */
const TIMEOUT_MS = 30_000;

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error || `HTTP ${status}`);
    this.status = status;
    this.code = body?.code || (status === 401 ? 'unauthorized' : 'http_error');
    this.body = body;
  }
}

/** The URL of an API path (`session/abc/prompt`), each segment given already encoded. */
export function url(path) {
  return new URL(path.replace(/^\//, ''), ROOT);
}

/** `/session/<id>/…` with the id encoded. */
export function sessionPath(id, rest = '') {
  return `session/${encodeURIComponent(id)}${rest}`;
}

/**
 * Calls the API; resolves to the parsed body (null for an empty one), rejects with ApiError for a
 * status ≥ 400 and with the network error otherwise. Listeners of 'unauthorized' (the app) hear of
 * every 401.
 */
export async function api(method, path, { body, headers = {} } = {}) {
  const init = {
    method,
    headers: { Accept: 'application/json', ...authHeaders(), ...headers },
    signal: AbortSignal.timeout(TIMEOUT_MS),
    credentials: 'same-origin',
    cache: 'no-store',
  };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(url(path), init);
  const text = await res.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!res.ok) {
    if (res.status === 401) events.dispatchEvent(new Event('unauthorized'));
    throw new ApiError(res.status, parsed);
  }
  return parsed;
}

/**
 * Fetches `path` with this browser's credential and saves the answer as the file `filename` (an
 * export: the credential is a header, so a plain link could not carry it). Rejects like `api`.
 */
export async function download(path, filename) {
  const res = await fetch(url(path), {
    headers: { ...authHeaders() }, signal: AbortSignal.timeout(TIMEOUT_MS), credentials: 'same-origin', cache: 'no-store',
  });
  if (!res.ok) {
    let body = null;
    try {
      body = await res.json();
    } catch {
      body = null;
    }
    if (res.status === 401) events.dispatchEvent(new Event('unauthorized'));
    throw new ApiError(res.status, body);
  }
  saveFile(await res.blob(), filename);
}

/** Offers `blob` as a download named `filename`. */
export function saveFile(blob, filename) {
  const href = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = href;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 60_000);
}

/** Where API-wide happenings are announced ('unauthorized'). */
export const events = new EventTarget();
