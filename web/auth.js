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
// - A person's sign-in (OpenID): the daemon sends the browser back from the provider with a one-time
//   code (`#pair=<code>`), exchanged like a pairing code for a credential of the person's own, kept
//   and sent as a paired device's is. Its failures come back as `#signin-error=<code>`.
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
/** Set while the device is a person's sign-in (OpenID), so a refused credential reads "signed out". */
const PERSON_KEY = 'mediatord.person';
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
    if (identity?.person) localStorage.setItem(PERSON_KEY, '1');
    else localStorage.removeItem(PERSON_KEY);
  } catch {
    // Storage refused: the id is still what the daemon says for this page's life.
  }
  // A person's devices all act as their person (`person:<subject>`).
  return identity?.kind === 'device' ? identity.clientId || identity.deviceId : getClientId();
}

/** Whether the device this browser held was a person's sign-in. */
export function wasPerson() {
  try {
    return localStorage.getItem(PERSON_KEY) === '1';
  } catch {
    return false;
  }
}

/** Forgets the device (its credential was refused: revoked, or a sign-in that ended). */
export function forgetDevice() {
  try {
    localStorage.removeItem(DEVICE_KEY);
    localStorage.removeItem(CREDENTIAL_KEY);
    localStorage.removeItem(PERSON_KEY);
  } catch {
    // nothing stored
  }
}

/** What each `#signin-error=<code>` the daemon sends a browser back with means, and what to do. */
const SIGN_IN_ERRORS = {
  provider_unavailable: 'The sign-in provider could not be reached. Try again in a moment; the operator token still works.',
  invalid_state: 'That sign-in could not be matched to one this daemon began (it expired, or was used already). Sign in again.',
  provider_refused: 'The sign-in provider did not complete the sign-in (it was cancelled or refused). Sign in again.',
  invalid_id_token: 'The sign-in provider’s answer failed this daemon’s checks, so nobody was signed in. Tell the operator.',
  not_allowed: 'Your account is not one this daemon lets in (another email domain, or not in an allowed group). Ask the operator.',
  sign_in_unavailable: 'You were signed in at the provider, but this daemon could not start a session for you. Try again in a moment.',
};

/**
 * When the daemon sent this browser back from a failed sign-in (`#signin-error=<code>`): removes it
 * from the address bar and this history entry, and returns what to tell the person (or null).
 */
export function signInErrorFromUrl() {
  const match = /^#signin-error=([a-z_]{1,64})$/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, '', `${location.pathname}${location.search}`);
  return SIGN_IN_ERRORS[match[1]] || 'The sign-in failed. Sign in again.';
}

/** Whether this daemon lets people sign in with an OpenID provider: `{issuer, login}` or null. */
export async function signInOffered() {
  try {
    const res = await fetch(new URL('auth', ROOT), { headers: { Accept: 'application/json' }, credentials: 'omit', cache: 'no-store' });
    if (!res.ok) return null;
    const body = await res.json();
    return body?.signIn?.login ? body.signIn : null;
  } catch {
    return null;
  }
}

/** Ends this browser's sign-in on the daemon (every daemon of a fleet), then forgets it here. */
export async function signOutPerson(headers) {
  try {
    await fetch(new URL('auth/logout', ROOT), { method: 'POST', headers, credentials: 'omit', cache: 'no-store' });
  } catch {
    // The daemon is unreachable: the credential is forgotten here all the same.
  }
  forgetDevice();
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
  return { device: { deviceId: body.deviceId, role: body.role, name: body.name, person: body.person } };
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
export function signInPanel({ rejected, check, done, provider }) {
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
    provider ? h('p', {}, h('a', { id: 'oidc-signin', class: 'button primary', href: new URL(provider.login, ROOT).href },
      `Sign in with ${providerName(provider.issuer)}`)) : null,
    provider ? h('p', { class: 'hint' }, 'Or, as the operator:') : null,
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
  if (!provider) queueMicrotask(() => input.focus());
  return form;
}

/** A provider's issuer as a person knows it: its host name. */
function providerName(issuer) {
  try {
    return new URL(issuer).hostname;
  } catch {
    return 'your organisation';
  }
}
