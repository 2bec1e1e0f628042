// Who this browser is, and how it proves it may use the daemon: the one module that knows about
// credentials.
//
// - A paired device (opened on `<daemon>/#pair=<code>`): the code is exchanged once for a device
//   credential, kept in localStorage and sent only as `Authorization: Bearer`. localStorage is
//   scoped to this exact origin (scheme, host and port), where a cookie would reach every server on
//   the same host name, whatever its port (docs/operations.md, "The browser's credential"); the
//   page's strict CSP (scripts from this origin only) is what keeps other scripts from reading it.
//   The code leaves the address bar and the history entry before anything else happens. The
//   device's id is its client id; the daemon fills it in, so this page sends none.
// - Otherwise a client id: a stable random id per browser, kept in localStorage and sent as
//   X-Qwen-Client-Id, so the daemon attributes this browser's votes and prompts to it.
// - The operator's token, when the daemon has one and this browser is not a paired device: pasted
//   by the person, kept in sessionStorage (this tab) or localStorage (this device) as they choose,
//   sent only as `Authorization: Bearer`. Never in a URL.

import { h } from './dom.js';

const CLIENT_KEY = 'mediatord.clientId';
const TOKEN_KEY = 'mediatord.token';
/** The paired device's id. */
const DEVICE_KEY = 'mediatord.device';
/** The paired device's credential, `<device id>.<secret>`. */
const CREDENTIAL_KEY = 'mediatord.deviceCredential';
/** The daemon's root: this module's directory's parent (assets live in assets/). */
const ROOT = new URL('../', import.meta.url);

/** `web-` and 16 random hex digits. getRandomValues works on plain http (randomUUID does not). */
function newClientId() {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return `web-${Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/** The daemon's rule for a client id. */
const CLIENT_ID = /^[A-Za-z0-9._:-]{1,128}$/;

let clientId = null;

/** This browser's client id (made and stored on first use). */
export function getClientId() {
  if (clientId) return clientId;
  let stored = null;
  try {
    stored = localStorage.getItem(CLIENT_KEY);
  } catch {
    // Storage refused (a private mode): the id then lasts as long as the page.
  }
  clientId = stored && CLIENT_ID.test(stored) ? stored : newClientId();
  try {
    localStorage.setItem(CLIENT_KEY, clientId);
  } catch {
    // as above
  }
  return clientId;
}

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

function storedCredential() {
  try {
    return localStorage.getItem(CREDENTIAL_KEY);
  } catch {
    return null;
  }
}

/** Headers that identify and authorise this browser on every API call. */
export function authHeaders() {
  const headers = {};
  const token = storedToken();
  const credential = token ? null : storedCredential();
  if (token || credential) headers.Authorization = `Bearer ${token || credential}`;
  // A paired browser is its device: the daemon takes the client id from its credential.
  if (!credential) headers['X-Qwen-Client-Id'] = getClientId();
  return headers;
}

/**
 * Records who the daemon says this browser is (`identity` of GET /capabilities), and returns the
 * client id the daemon attributes this browser's actions to.
 */
export function setIdentity(identity) {
  try {
    if (identity?.kind === 'device') localStorage.setItem(DEVICE_KEY, identity.deviceId);
    else localStorage.removeItem(DEVICE_KEY);
  } catch {
    // Storage refused: the id is still what the daemon says for this page's life.
  }
  return identity?.kind === 'device' ? identity.deviceId : getClientId();
}

/** Forgets the device (its credential was refused: revoked). */
export function forgetDevice() {
  try {
    localStorage.removeItem(DEVICE_KEY);
    localStorage.removeItem(CREDENTIAL_KEY);
  } catch {
    // nothing stored
  }
}

/** A name this browser gives itself when the operator named none: what it runs on. */
function ownName() {
  const ua = navigator.userAgent;
  const platform = ['Android', 'iPhone', 'iPad', 'Windows', 'Mac', 'Linux', 'CrOS'].find((p) => ua.includes(p)) || 'a browser';
  const browser = ['Firefox', 'Edg', 'Chrome', 'Safari'].find((b) => ua.includes(b)) || 'Browser';
  return `${browser === 'Edg' ? 'Edge' : browser} on ${platform === 'CrOS' ? 'ChromeOS' : platform}`;
}

/**
 * When the page was opened on a pairing URL (`#pair=<code>`): removes the code from the address bar
 * and from this history entry at once, then exchanges it. Resolves to null (no code), to
 * `{device}` (paired: the credential is kept), or to `{error}` (the text to show).
 */
export async function pairFromUrl() {
  const match = /^#pair=([0-9A-Za-z]{1,128})$/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, '', `${location.pathname}${location.search}`);
  let res;
  try {
    res = await fetch(new URL('devices/pair', ROOT), {
      method: 'POST',
      headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
      body: JSON.stringify({ code: match[1], name: ownName() }),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch (err) {
    return { error: `The daemon did not answer: ${err.message}` };
  }
  const body = await res.json().catch(() => null);
  if (!res.ok) {
    return {
      error: res.status === 429
        ? 'Too many pairing attempts from this network: wait a minute and ask for a new code.'
        : 'This pairing link was already used or has expired: ask for a new one (mediatord pair).',
    };
  }
  signOut();
  try {
    localStorage.setItem(CREDENTIAL_KEY, body.token);
    localStorage.setItem(DEVICE_KEY, body.deviceId);
  } catch {
    return { error: 'This browser refused to keep the credential (storage is off): it cannot stay paired.' };
  }
  return { device: { deviceId: body.deviceId, role: body.role, name: body.name } };
}

/** Whether this browser holds a paired device's credential. */
export function hasDevice() {
  return Boolean(storedCredential());
}

export function hasToken() {
  return Boolean(storedToken());
}

/** Keeps `token` for this tab, or for this device when `remember`. */
export function signIn(token, remember) {
  signOut();
  (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, token.trim());
}

export function signOut() {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(TOKEN_KEY);
  } catch {
    // nothing stored
  }
}

/**
 * The sign-in panel: explains why, takes the token, calls `check()` (which resolves true when the
 * daemon accepts it) and `done()` once it does.
 */
export function signInPanel({ rejected, check, done }) {
  const input = h('input', {
    id: 'token', type: 'password', name: 'token', autocomplete: 'off', spellcheck: 'false',
    autocapitalize: 'off', required: true,
  });
  const remember = h('input', { id: 'remember', type: 'checkbox', name: 'remember' });
  const message = h('p', { class: 'form-error', role: 'alert' }, rejected ? 'That token was not accepted.' : '');
  const form = h('form', {
    class: 'signin',
    onsubmit: async (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      signIn(token, remember.checked);
      message.textContent = '';
      if (await check()) {
        done();
      } else {
        signOut();
        message.textContent = 'That token was not accepted.';
        input.select();
      }
    },
  },
    h('h2', {}, 'Sign in'),
    h('p', {}, 'This daemon asks for its token. Paste the value it was started with (',
      h('code', {}, 'MEDIATORD_TOKEN'), ' or ', h('code', {}, '--token'), ').'),
    h('p', { class: 'hint' }, 'The token stays in this browser and is sent only in the Authorization header of ' +
      'requests to this daemon. Never put it in a URL.'),
    h('label', { for: 'token' }, 'Token'),
    input,
    h('label', { class: 'check', for: 'remember' }, remember, ' Remember on this device (otherwise this tab only)'),
    message,
    h('button', { type: 'submit', class: 'primary' }, 'Sign in'),
  );
  queueMicrotask(() => input.focus());
  return form;
}
