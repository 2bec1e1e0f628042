// Who this browser is, and how it proves it may use the daemon. The one module that knows about
// credentials: device pairing (a later step) replaces the token here without touching the rest.
//
// - The client id: a stable random id per browser, kept in localStorage and sent as X-Qwen-Client-Id,
//   so the daemon attributes this browser's votes and prompts to it.
// - The token, when the daemon has one: pasted by the person, kept in sessionStorage (this tab) or
//   localStorage (this device) as they choose, sent only as `Authorization: Bearer`. Never in a URL.

import { h } from './dom.js';

const CLIENT_KEY = 'mediatord.clientId';
const TOKEN_KEY = 'mediatord.token';

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

/** Headers that identify and authorise this browser on every API call. */
export function authHeaders() {
  const headers = { 'X-Qwen-Client-Id': getClientId() };
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
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
