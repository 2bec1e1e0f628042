// The web app's entry: signs in when the daemon has a token, lists workspaces and their sessions
// (with a badge on those that need approval), creates sessions and threads, and opens one session at
// a time on its live event stream. Sessions left keep their state: coming back resumes the stream
// where it stopped (Last-Event-ID), so nothing is shown twice.

import { ApiError, api, events as apiEvents, sessionPath } from './api.js';
import {
  authHeaders, forgetDevice, getClientId, hasDevice, hasToken, pairFromUrl, setIdentity, signInErrorFromUrl, signInOffered,
  signInPanel, signOut, signOutPerson, wasPerson,
} from './auth.js';
import { clock, h, icon, replace, svgImage } from './dom.js';
import { EventStream } from './sse.js';
import { showAudit } from './audit.js';
import { findPast, showHistory, showPast } from './history.js';
import { identityEl } from './names.js';
import { addPending, apply, createSession, pending } from './state.js';
import { SessionView } from './view.js';

/** How often the session list is refreshed while the page is visible (badges of other sessions). */
const LIST_REFRESH_MS = 4000;
/** Two columns (list beside session) from this width up. */
const WIDE = window.matchMedia('(min-width: 56rem)');

/** The client id the daemon attributes this browser's actions to (a paired device's is its id). */
let me = getClientId();
const app = document.getElementById('app');
const announcer = document.getElementById('announce');

const state = {
  caps: null,
  agents: [],
  /** workspace cwd → sessions summaries */
  lists: new Map(),
  /** sessionId → {s, view, stream} */
  open: new Map(),
  current: null,
  listTimer: null,
  firstRender: true,
  /** A line for the header after pairing (or why pairing failed). */
  notice: null,
  /** workspace cwd → why creating a session there failed, kept across the list's refreshes. */
  createErrors: new Map(),
};

const sidebar = h('nav', { class: 'sidebar', 'aria-label': 'Workspaces and sessions' });
const main = h('main', { class: 'main', id: 'main' });

function announce(text) {
  announcer.textContent = '';
  // A new text node each time, so a repeated message is read again.
  setTimeout(() => {
    announcer.textContent = text;
  }, 50);
}

function basename(path) {
  const parts = String(path).split('/').filter(Boolean);
  return parts[parts.length - 1] || '/';
}

async function boot() {
  const signInError = signInErrorFromUrl();
  if (signInError) state.notice = signInError;
  const paired = await pairFromUrl();
  if (paired?.device) {
    state.notice = paired.device.person
      ? `Signed in as ${paired.device.person.name}.`
      : `Paired: this browser is now “${paired.device.name}”.`;
  }
  if (paired?.error) state.notice = paired.error;
  try {
    state.caps = await api('GET', 'capabilities');
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return showSignIn(hasToken());
    return fatal(err);
  }
  me = setIdentity(state.caps.identity);
  replace(app, sidebar, main);
  document.body.dataset.view = 'list';
  try {
    state.agents = (await api('GET', 'agents')).agents || [];
  } catch {
    state.agents = (state.caps.agents || []).map((name, i) => ({ name, default: i === 0 }));
  }
  await refreshList();
  state.listTimer = setInterval(() => {
    if (document.visibilityState === 'visible') refreshList().catch(() => {});
  }, LIST_REFRESH_MS);
  window.addEventListener('hashchange', route);
  route();
}

function fatal(err) {
  replace(app, h('div', { class: 'empty' }, h('h1', {}, 'mediatord'), h('p', { role: 'alert' }, `The daemon did not answer: ${err.message}`),
    h('button', { type: 'button', onclick: () => location.reload() }, 'Try again')));
}

function showSignIn(rejected) {
  // The panel's own check answers 401 for a wrong token: the panel on screen says so itself.
  if (app.querySelector('form.signin, .revoked, .signin-panel')) return;
  // A paired device refused: revoked (or its daemon forgot it). Its person has no operator token:
  // say what happened and how to pair again, with the token form one tap away for the operator.
  const wasDevice = hasDevice();
  const signedIn = wasPerson();
  forgetDevice();
  clearInterval(state.listTimer);
  for (const entry of state.open.values()) entry.stream?.stop();
  if (wasDevice && signedIn) {
    // A person's sign-in that ended: signed out, revoked, or no longer vouched for by the provider.
    state.notice = 'You were signed out: your sign-in ended (signed out, or the provider no longer vouches for you). Sign in again.';
  } else if (wasDevice) {
    replace(app, h('div', { class: 'empty revoked' }, h('h1', {}, 'mediatord'),
      h('h2', {}, 'This device is no longer paired'),
      h('p', { role: 'alert' }, 'The daemon refused this device’s credential: it was revoked, or the daemon no longer knows it.'),
      h('p', {}, 'To use this device again, pair it anew: on the daemon’s machine run ', h('code', {}, 'mediatord pair'),
        ' (or open Devices in the app there), then open the link or scan the code with this device.'),
      h('button', { type: 'button', class: 'ghost', onclick: () => { replace(app); showSignIn(false); } }, 'I have the operator token')));
    return;
  }
  const panel = h('div', { class: 'empty signin-panel' });
  replace(app, panel);
  signInOffered().then((provider) => replace(panel, h('h1', {}, 'mediatord'),
    state.notice ? h('p', { class: 'notice', role: 'status' }, state.notice) : null,
    signInPanel({
    rejected,
    provider,
    check: async () => {
      try {
        await api('GET', 'capabilities');
        return true;
      } catch {
        return false;
      }
    },
    done: () => location.reload(),
  })));
}

apiEvents.addEventListener('unauthorized', () => showSignIn(hasToken()));

async function refreshList() {
  const workspaces = state.caps.workspaces || [{ cwd: state.caps.workspaceCwd, primary: true }];
  const lists = await Promise.all(workspaces.map((w) =>
    api('GET', `workspace/${encodeURIComponent(w.cwd)}/sessions`).then((r) => r.sessions || [], () => null)));
  workspaces.forEach((w, i) => {
    if (lists[i]) state.lists.set(w.cwd, lists[i]);
  });
  renderList();
}

function renderList() {
  const workspaces = state.caps.workspaces || [{ cwd: state.caps.workspaceCwd, primary: true }];
  const identity = state.caps.identity || { kind: 'operator' };
  const operator = identity.kind === 'operator';
  const person = identity.person;
  const roleText = { observer: 'observer: watching only', operator: 'operator', voter: 'voter' }[identity.role] || 'voter';
  const who = operator
    ? (hasToken() ? `Signed in with the operator token as ${me}` : `You are ${me}`)
    : `Signed in as ${person ? person.name : identity.name} (${roleText})`;
  const header = h('header', { class: 'brand' },
    h('h1', {}, icon('logo'), ' mediatord'),
    h('p', { class: 'hint whoami' }, who),
    operator || identity.role === 'operator' ? h('a', { class: 'ghost button', href: '#/devices' }, 'Devices') : null,
    h('a', { class: 'ghost button', href: '#/history' }, 'History'),
    h('a', { class: 'ghost button', href: '#/audit' }, 'Audit'),
    hasToken() ? h('button', { type: 'button', class: 'ghost', onclick: () => { signOut(); location.reload(); } }, 'Sign out') : null,
    person ? h('button', { type: 'button', class: 'ghost', id: 'person-signout', onclick: async () => {
      await signOutPerson(authHeaders());
      location.reload();
    } }, 'Sign out') : null,
    state.notice ? h('p', { class: 'notice', role: 'status' }, state.notice) : null);
  const sections = workspaces.map((w) => {
    const sessions = state.lists.get(w.cwd) || [];
    return h('section', { class: 'workspace', 'aria-labelledby': `ws-${workspaces.indexOf(w)}` },
      h('h2', { id: `ws-${workspaces.indexOf(w)}`, title: w.cwd }, icon('folder'), ` ${basename(w.cwd)}`),
      h('p', { class: 'path' }, w.cwd),
      sessions.length
        ? h('ul', { class: 'sessions' }, sessions.map((s) => sessionLink(s)))
        : h('p', { class: 'hint' }, 'No live session.'),
      h('p', {}, h('a', { class: 'past-link', href: `#/history?ws=${encodeURIComponent(w.cwd)}` }, 'Past sessions')),
      createForm(w.cwd));
  });
  replace(sidebar, header, sections);
  const total = [...state.lists.values()].flat().reduce((n, s) => n + (pendingOf(s) || 0), 0);
  document.title = total ? `(${total}) mediatord` : 'mediatord';
}

/** Pending requests of a listed session: the live count when it is open here, else the listed one. */
function pendingOf(summary) {
  const open = state.open.get(summary.sessionId);
  return open ? pending(open.s).length : summary.pendingPermissions || 0;
}

function sessionLink(summary) {
  const n = pendingOf(summary);
  const current = state.current === summary.sessionId;
  return h('li', {},
    h('a', { href: `#/s/${encodeURIComponent(summary.sessionId)}`, class: 'session-link', 'aria-current': current ? 'page' : undefined, dataset: { sessionId: summary.sessionId } },
      h('span', { class: 'agent' }, summary.agent || 'agent'),
      h('span', { class: 'sid' }, summary.sessionId.slice(0, 18)),
      h('span', { class: 'meta' },
        summary.hasActivePrompt ? h('span', { class: 'running' }, 'working') : null,
        n ? h('span', { class: 'badge', title: `${n} permission request${n === 1 ? '' : 's'} waiting` }, `Needs approval · ${n}`) : null,
        h('span', { class: 'hint' }, `${summary.clientCount} client${summary.clientCount === 1 ? '' : 's'}`))));
}

function createForm(cwd) {
  const agents = state.agents.length ? state.agents : [{ name: 'default', default: true }];
  const select = h('select', { name: 'agent' }, agents.map((a) => h('option', { value: a.name, selected: a.default }, a.default ? `${a.name} (default)` : a.name)));
  // The list is redrawn every few seconds: the error lives in `state`, so it stays until the next
  // attempt (an agent that cannot start is not fixed by waiting).
  const error = h('p', { class: 'form-error', role: 'alert' }, state.createErrors.get(cwd) || '');
  const create = async (scope) => {
    error.textContent = '';
    state.createErrors.delete(cwd);
    try {
      const body = { cwd, sessionScope: scope };
      if (state.agents.length) body.agent = select.value;
      const created = await api('POST', 'session', { body });
      await refreshList();
      location.hash = `#/s/${encodeURIComponent(created.sessionId)}`;
    } catch (err) {
      state.createErrors.set(cwd, err.message);
      error.textContent = err.message;
    }
  };
  const agentId = `agent-${Math.random().toString(36).slice(2, 8)}`;
  select.id = agentId;
  return h('div', { class: 'create' },
    state.agents.length > 1 ? h('label', { for: agentId }, 'Agent') : null,
    state.agents.length > 1 ? select : null,
    h('div', { class: 'create-buttons' },
      h('button', { type: 'button', onclick: () => create('single'), title: 'Join the workspace’s shared session (made if there is none)' }, icon('plus'), 'Shared session'),
      h('button', { type: 'button', onclick: () => create('thread'), title: 'A new session of your own' }, icon('plus'), 'New thread')),
    error);
}

function route() {
  const m = /^#\/s\/(.+)$/.exec(location.hash);
  if (m) return openSession(decodeURIComponent(m[1]));
  if (state.current) leave();
  if (location.hash === '#/devices') return showDevices();
  if (location.hash === '#/audit') return elsewhere(() => showAudit(main, { workspaces: workspacesOf() }));
  const history = /^#\/history(?:\?ws=(.*))?$/.exec(location.hash);
  if (history) return elsewhere(() => showHistory(main, { workspaces: workspacesOf(), ws: history[1] ? decodeURIComponent(history[1]) : null }));
  const past = /^#\/h\/(.+)$/.exec(location.hash);
  if (past) return openPast(decodeURIComponent(past[1]));
  const sessions = [...state.lists.values()].flat();
  if (WIDE.matches && sessions.length) {
    const first = sessions.find((s) => pendingOf(s)) || sessions[0];
    location.replace(`#/s/${encodeURIComponent(first.sessionId)}`);
    return;
  }
  document.body.dataset.view = 'list';
  replace(main, h('div', { class: 'empty' }, h('p', {}, sessions.length ? 'Choose a session.' : 'No session yet: start one in a workspace.')));
  renderList();
  markReady();
}

/** The operator's devices: who is paired (with Revoke), and "pair another device" with its QR code. */
async function showDevices() {
  document.body.dataset.view = 'session';
  renderList();
  const list = h('ul', { class: 'devices' });
  const shown = h('div', { class: 'pairing', 'aria-live': 'polite' });
  const error = h('p', { class: 'form-error', role: 'alert' });
  const load = async () => {
    try {
      const { devices } = await api('GET', 'devices');
      // A person's sign-in is shown by their name, as everywhere else (the daemon's `shown_name`):
      // its own name is the same for every sign-in.
      const named = (dv) => dv.person?.name || dv.name;
      replace(list, devices.length ? devices.map((dv) => h('li', { class: 'device', dataset: { deviceId: dv.deviceId } },
        h('span', { class: 'device-name' }, identityEl(named(dv), dv.deviceId)),
        h('span', { class: 'hint' }, ` ${dv.role}${dv.lastSeenAt ? `, last seen ${clock(dv.lastSeenAt)}` : ''} `),
        h('button', {
          type: 'button', class: 'ghost', 'aria-label': `Revoke ${named(dv)}`,
          onclick: async () => {
            try {
              await api('DELETE', `devices/${encodeURIComponent(dv.deviceId)}`);
            } catch (err) {
              error.textContent = err.message;
            }
            await load();
          },
        }, 'Revoke'))) : h('li', { class: 'hint' }, 'No device is paired yet.'));
    } catch (err) {
      error.textContent = err.message;
    }
  };
  const name = h('input', { id: 'device-name', name: 'name', autocomplete: 'off', maxlength: 64, placeholder: 'What the device calls itself' });
  const role = h('select', { id: 'device-role', name: 'role' },
    h('option', { value: 'voter' }, 'Voter: prompts and approves'),
    h('option', { value: 'observer' }, 'Observer: watches only'));
  const form = h('form', {
    class: 'pair-form',
    onsubmit: async (event) => {
      event.preventDefault();
      error.textContent = '';
      try {
        const p = await api('POST', 'devices/pairing', { body: { name: name.value.trim() || null, role: role.value } });
        replace(shown,
          p.qrSvg ? svgImage(p.qrSvg, 'QR code of the pairing link') : null,
          h('p', {}, `Scan it with the device’s camera, or open the link on it. It works once, until ${clock(p.expiresAt)}:`),
          h('p', {}, h('code', { class: 'pair-url' }, p.url)));
      } catch (err) {
        error.textContent = err.message;
      }
    },
  },
    h('h3', {}, 'Pair another device'),
    h('label', { for: 'device-name' }, 'Name'), name,
    h('label', { for: 'device-role' }, 'Role'), role,
    h('button', { type: 'submit', class: 'primary' }, 'Show a pairing code'));
  replace(main, h('section', { class: 'devices-view' },
    h('p', {}, h('a', { href: '#/' }, 'Back to the sessions')),
    h('h2', {}, 'Devices'),
    list, error, form, shown));
  await load();
  markReady();
}

function workspacesOf() {
  return state.caps.workspaces || [{ cwd: state.caps.workspaceCwd, primary: true }];
}

/** A page other than a session's (history, audit): the list beside it on a wide screen. */
async function elsewhere(render) {
  document.body.dataset.view = 'session';
  renderList();
  await render();
  markReady();
}

/** A session that is not live, read-only from the history (`#/h/<id>`). */
async function openPast(id) {
  document.body.dataset.view = 'session';
  renderList();
  replace(main, h('div', { class: 'empty' }, h('p', { role: 'status' }, 'Reading the session’s history…')));
  const summary = await findPast(id, workspacesOf()).catch(() => null);
  if (location.hash !== `#/h/${encodeURIComponent(id)}` && location.hash !== `#/h/${id}`) return;
  if (!summary) {
    replace(main, h('div', { class: 'empty' }, h('p', { role: 'alert' }, 'This session is not in the history (it never was, or retention removed it).'),
      h('a', { href: '#/history' }, 'Past sessions')));
    markReady();
    return;
  }
  await showPast(main, summary, {
    me,
    onResumed: async (sid) => {
      await refreshList();
      location.hash = `#/s/${encodeURIComponent(sid)}`;
    },
    back: () => {
      location.hash = '#/history';
    },
    announce,
  });
  markReady();
}

function leave() {
  const entry = state.open.get(state.current);
  entry?.stream?.stop();
  state.current = null;
}

function markReady() {
  if (!state.firstRender) return;
  state.firstRender = false;
  performance.mark('mediatord:ready');
  document.documentElement.dataset.ready = 'true';
}

async function openSession(id) {
  if (state.current === id) return;
  if (state.current) leave();
  state.current = id;
  document.body.dataset.view = 'session';
  renderList();
  let entry = state.open.get(id);
  if (!entry) {
    replace(main, h('div', { class: 'empty' }, h('p', { role: 'status' }, 'Opening the session…')));
    try {
      const [summary, context] = await Promise.all([api('GET', sessionPath(id)), api('GET', sessionPath(id, '/context'))]);
      summary.models = context?.state?.models ?? null;
      summary.modes = context?.state?.modes ?? null;
      entry = makeSession(summary);
    } catch (err) {
      if (state.current !== id) return;
      state.current = null;
      // Not live: the history may have it (after a restart, a session's address still opens it).
      if (err.status === 404) {
        location.replace(`#/h/${encodeURIComponent(id)}`);
        return;
      }
      replace(main, h('div', { class: 'empty' }, h('p', { role: 'alert' }, `Could not open the session: ${err.message}`),
        h('a', { href: '#/' }, 'Back to the sessions')));
      refreshList().catch(() => {});
      markReady();
      return;
    }
    if (state.current !== id) return;
  }
  replace(main, entry.view.root);
  entry.view.update();
  entry.view.scroller.scrollTop = entry.view.scroller.scrollHeight;
  if (!entry.s.ended) startStream(entry);
}

function makeSession(summary) {
  const s = createSession(summary, me);
  const id = s.id;
  const entry = { s, view: null, stream: null };
  const run = async (action, fn) => {
    try {
      entry.view.showControlError('');
      return await fn();
    } catch (err) {
      entry.view.showControlError(`${action}: ${err.message}`);
      entry.view.renderHeader();
      return null;
    }
  };
  entry.view = new SessionView(s, {
    sendPrompt: (text) => api('POST', sessionPath(id, '/prompt'), { body: { prompt: [{ type: 'text', text }] }, headers: { Prefer: 'respond-async' } }),
    cancel: () => run('Stop', () => api('POST', sessionPath(id, '/cancel'))),
    vote: (requestId, body) => api('POST', sessionPath(id, `/permission/${encodeURIComponent(requestId)}`), { body }),
    turnDiff: (turnIndex, path) => api('GET', sessionPath(id, `/turns/${encodeURIComponent(turnIndex)}/diff?path=${encodeURIComponent(path)}`)),
    workspaceDiff: () => api('GET', `workspaces/${encodeURIComponent(summary.workspaceCwd || '')}/git/diff`),
    workspaceFileDiff: (path) => api('GET', `workspaces/${encodeURIComponent(summary.workspaceCwd || '')}/git/diff/file?path=${encodeURIComponent(path)}`),
    rewind: (promptId, force) => api('POST', sessionPath(id, '/rewind'), { body: { promptId, force: Boolean(force) } }),
    presented: (requestId, all) => api('GET', sessionPath(id, `/permission/${encodeURIComponent(requestId)}${all ? '?all=1' : ''}`)),
    setModel: (modelId) => run('Model', () => api('POST', sessionPath(id, '/model'), { body: { modelId } })),
    setMode: (modeId) => run('Mode', () => api('POST', sessionPath(id, '/mode'), { body: { modeId } })),
    loadRules: () => run('Rules', async () => {
      s.rules = (await api('GET', sessionPath(id, '/permission-rules'))).rules || [];
      entry.view.renderRules();
    }),
    removeRule: (ruleId) => run('Remove rule', () => api('DELETE', sessionPath(id, `/permission-rules/${encodeURIComponent(ruleId)}`))),
    loadAudit: () => run('Decisions', async () => {
      entry.view.renderAudit((await api('GET', sessionPath(id, '/permissions?audit=1'))).audit || []);
    }),
    back: () => {
      location.hash = '#/';
    },
    announce,
  });
  state.open.set(id, entry);
  return entry;
}

function startStream(entry) {
  const { s, view } = entry;
  entry.stream?.stop();
  s.replaying = true;
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    view.update();
    if (!s.replaying && state.current === s.id) markSessionRendered();
  };
  const stream = new EventStream(s.id, {
    lastEventId: s.lastEventId,
    onEvent: (envelope, { id }) => {
      apply(s, envelope, id);
      if (s.stale.has('resync')) resync(entry);
      if (!scheduled) {
        scheduled = true;
        queueMicrotask(flush);
      }
      if (envelope.type === 'permission_request' || envelope.type === 'permission_resolved' || s.ended) renderList();
    },
    onStatus: (status) => {
      view.setConnection(status);
      if (status === 'unauthorized') showSignIn(true);
      if (status === 'ended' && !s.ended) {
        s.ended = { type: 'gone' };
        view.renderHeader();
        refreshList().catch(() => {});
      }
    },
  });
  entry.stream = stream;
  stream.start();
}

/** After a gap in the stream: what the daemon holds now, fetched. */
async function resync(entry) {
  const { s, view } = entry;
  try {
    const [perms, context] = await Promise.all([api('GET', sessionPath(s.id, '/permissions')), api('GET', sessionPath(s.id, '/context'))]);
    addPending(s, perms.pending || []);
    s.models = context?.state?.models ?? s.models;
    s.modes = context?.state?.modes ?? s.modes;
    s.stale.add('header');
    view.update();
  } catch {
    // The next event or reconnect brings the rest.
  }
}

let sessionRendered = false;
function markSessionRendered() {
  if (sessionRendered) return;
  sessionRendered = true;
  performance.mark('mediatord:session-rendered');
  document.documentElement.dataset.sessionRendered = 'true';
  markReady();
}

boot();
