// Shared helpers for the e2e scenarios: environment, a bounded JSON HTTP helper, and an SSE event
// collector with bounded waits. Every wait here has an explicit deadline and fails with a message
// that says what it was waiting for and what it saw instead.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { parseSse } from './sse.mjs';

function requireEnv(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run these scenarios through tests/e2e/run.sh`);
  }
  return v;
}

export const BASE_URL = requireEnv('E2E_BASE_URL').replace(/\/+$/, '');
export const WORKSPACE = requireEnv('E2E_WORKSPACE');
/** `mediatord` or `qwen-serve`: only used in messages; assertions follow docs/protocol.md either way. */
export const DAEMON_KIND = process.env.E2E_DAEMON_KIND || 'mediatord';

/** The fake model's answer to a prompt without directives (fake-model/src/conversation.rs). */
export const FAKE_TEXT = 'Hello from the fake model.';
/** What the fake model streams before it holds a `STALL` response open (fake-model/src/directive.rs). */
export const STALL_OPENING = 'stalling...';
export const T = {
  request: 30_000, // one plain HTTP request
  connect: 10_000, // SSE response headers
  permission: 30_000, // prompt sent -> permission_request seen
  turn: 60_000, // prompt sent -> turn_complete / turn_error seen
  streamEnd: 15_000, // session closed -> SSE stream ends
};

export function uniqueName(prefix) {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

export function workspaceFile(prefix) {
  return path.join(WORKSPACE, `${uniqueName(prefix)}.txt`);
}

/** One JSON request with a deadline. Never throws on HTTP status; returns what came back. */
export async function api(method, urlPath, { body, clientId, headers = {}, timeoutMs = T.request } = {}) {
  const h = { ...headers };
  if (body !== undefined) h['Content-Type'] = 'application/json';
  if (clientId) h['X-Qwen-Client-Id'] = clientId;
  let res;
  try {
    res = await fetch(BASE_URL + urlPath, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    throw new Error(`${method} ${urlPath}: no answer within ${timeoutMs} ms (${err.name}: ${err.message})`);
  }
  const text = await res.text();
  let json;
  try {
    json = text.length ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

export function show(res) {
  return `HTTP ${res.status} ${res.text.slice(0, 400)}`;
}

/**
 * GET /session/:id/events after the session was closed with DELETE. qwen serve forgets the session:
 * 404 session_not_found. mediatord keeps its history (docs/protocol.md §14.3): a finite replay whose
 * last recorded event is session_closed, then replay_complete {sessionState: "closed"}, and the end.
 */
export async function assertClosedSessionEvents(sessionId) {
  const ev = await api('GET', `/session/${encodeURIComponent(sessionId)}/events`, { timeoutMs: T.connect });
  if (DAEMON_KIND !== 'mediatord') {
    assert.equal(ev.status, 404, `events of a closed session: ${show(ev)}`);
    assert.equal(ev.json?.code, 'session_not_found');
    return;
  }
  assert.equal(ev.status, 200, `events of a closed session (its history): ${show(ev)}`);
  const frames = [...ev.text.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]));
  const types = frames.map((f) => f.type);
  assert.equal(types.at(-1), 'replay_complete', `the replay ends with replay_complete: ${types.join(', ')}`);
  assert.equal(frames.at(-1).data.sessionState, 'closed');
  assert.equal(types.at(-2), 'session_closed', `the history's last event is session_closed: ${types.join(', ')}`);
  assert.equal(frames.at(-2).data.sessionId, sessionId);
}

/** POST /session; asserts 200 and the documented fields. */
export async function createSession(clientId, extra = {}) {
  const res = await api('POST', '/session', { body: { cwd: WORKSPACE, ...extra }, clientId });
  assert.equal(res.status, 200, `POST /session: ${show(res)}`);
  const s = res.json;
  assert.equal(typeof s.sessionId, 'string', 'sessionId');
  assert.ok(s.sessionId.length > 0, 'sessionId non-empty');
  assert.equal(typeof s.attached, 'boolean', 'attached');
  assert.equal(typeof s.workspaceCwd, 'string', 'workspaceCwd');
  assert.equal(fs.realpathSync(s.workspaceCwd), fs.realpathSync(WORKSPACE), 'workspaceCwd is the workspace');
  assert.equal(typeof s.clientId, 'string', 'clientId (the id to use on later calls)');
  assert.equal(typeof s.createdAt, 'string', 'createdAt');
  assert.ok(!Number.isNaN(Date.parse(s.createdAt)), `createdAt is a date: ${s.createdAt}`);
  return s;
}

/** POST /session/:id/prompt with `Prefer: respond-async`; asserts 202 {promptId, lastEventId}. */
export async function startPrompt(sessionId, text, clientId) {
  const res = await api('POST', `/session/${encodeURIComponent(sessionId)}/prompt`, {
    body: { prompt: [{ type: 'text', text }] },
    clientId,
    headers: { Prefer: 'respond-async' },
  });
  assert.equal(res.status, 202, `async prompt (Prefer: respond-async) must answer 202: ${show(res)}`);
  assert.equal(typeof res.json?.promptId, 'string', `202 body has promptId: ${res.text}`);
  assert.ok(Number.isSafeInteger(res.json.lastEventId) && res.json.lastEventId >= 0, `202 body has numeric lastEventId: ${res.text}`);
  return res.json;
}

export async function vote(sessionId, requestId, optionId, clientId) {
  return api('POST', `/session/${encodeURIComponent(sessionId)}/permission/${encodeURIComponent(requestId)}`, {
    body: { outcome: { outcome: 'selected', optionId } },
    clientId,
  });
}

/** The first offered option whose kind is in `kinds` (in preference order). */
export function optionByKind(options, kinds) {
  assert.ok(Array.isArray(options) && options.length > 0, `permission_request offers options: ${JSON.stringify(options)}`);
  for (const kind of kinds) {
    const o = options.find((x) => x.kind === kind);
    if (o) {
      assert.equal(typeof o.optionId, 'string');
      assert.equal(typeof o.name, 'string');
      return o;
    }
  }
  assert.fail(`no option of kind ${kinds.join('/')} among ${JSON.stringify(options)}`);
}

export const isTurnEnd = (promptId) => (e) =>
  (e.type === 'turn_complete' || e.type === 'turn_error') && e.data?.promptId === promptId;

export const isPermissionRequest = (sessionId) => (e) =>
  e.type === 'permission_request' && e.data?.sessionId === sessionId;

export function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]);
}

export async function waitForFile(file, expected, timeoutMs = 10_000) {
  // The agent answers the turn only after fs/write_text_file returned, so normally this is immediate;
  // the poll only covers an agent that writes the file itself. Bounded.
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (fs.existsSync(file) && fs.readFileSync(file, 'utf8') === expected) return;
    if (Date.now() > deadline) {
      const got = fs.existsSync(file) ? JSON.stringify(fs.readFileSync(file, 'utf8')) : 'no file';
      assert.fail(`expected ${file} to contain ${JSON.stringify(expected)} within ${timeoutMs} ms; found ${got}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Events collected in the background, with bounded waits. Subclasses push to `events`, set
 * `done`/`endReason` when their source ends, and call `notify()`.
 */
export class EventCollector {
  constructor(label) {
    this.label = label;
    this.events = [];
    this.waiters = [];
    this.done = false;
    this.endReason = undefined;
  }

  push(ev) {
    this.events.push(ev);
    this.notify();
  }

  finish(reason) {
    this.done = true;
    this.endReason = reason;
    this.notify();
  }

  notify() {
    for (const w of [...this.waiters]) w();
  }

  /**
   * Resolve with the first collected event (at index >= `from`) matching `pred`, waiting at most
   * `timeoutMs`. Rejects if the source ends first or on timeout, naming `what`.
   */
  waitFor(pred, { timeoutMs = T.turn, what = 'an event', from = 0 } = {}) {
    return new Promise((resolve, reject) => {
      let timer;
      const check = () => {
        for (let i = from; i < this.events.length; i++) {
          if (pred(this.events[i])) {
            cleanup();
            resolve(this.events[i]);
            return;
          }
        }
        if (this.done) {
          cleanup();
          reject(new Error(`${this.label}: stream ended (${this.endReason}) while waiting for ${what}; saw: ${this.summary()}`));
        }
      };
      const cleanup = () => {
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== check);
      };
      timer = setTimeout(() => {
        cleanup();
        reject(new Error(`${this.label}: timed out after ${timeoutMs} ms waiting for ${what}; saw: ${this.summary()}`));
      }, timeoutMs);
      this.waiters.push(check);
      check();
    });
  }

  /** Wait until the source ends by itself. */
  waitEnd(timeoutMs = T.streamEnd) {
    return new Promise((resolve, reject) => {
      let timer;
      const check = () => {
        if (this.done) {
          cleanup();
          resolve(this.endReason);
        }
      };
      const cleanup = () => {
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== check);
      };
      timer = setTimeout(() => {
        cleanup();
        reject(new Error(`${this.label}: stream still open ${timeoutMs} ms later; last events: ${this.summary()}`));
      }, timeoutMs);
      this.waiters.push(check);
      check();
    });
  }

  summary(n = 12) {
    return this.events
      .slice(-n)
      .map((e) => `${e.id ?? '-'}:${e.type}${e.type === 'session_update' ? '/' + e.data?.update?.sessionUpdate : ''}`)
      .join(' ');
  }
}

/**
 * An open `GET /session/:id/events` stream that collects every frame in the background.
 * `events` holds parsed envelopes (frames with data); `violations` collects wire-format problems
 * (bad JSON, missing v/type/data, `event:`/`id:` lines disagreeing with the envelope, ids not
 * increasing).
 */
export class EventStream extends EventCollector {
  constructor(label) {
    super(label);
    this.frames = [];
    this.violations = [];
    this.lastId = 0;
    this.controller = new AbortController();
  }

  static async open(sessionId, { clientId, lastEventId, label = 'stream' } = {}) {
    const s = new EventStream(label);
    const headers = { Accept: 'text/event-stream' };
    if (clientId) headers['X-Qwen-Client-Id'] = clientId;
    if (lastEventId !== undefined) headers['Last-Event-ID'] = String(lastEventId);
    const timer = setTimeout(() => s.controller.abort(new Error('connect timeout')), T.connect);
    let res;
    try {
      res = await fetch(`${BASE_URL}/session/${encodeURIComponent(sessionId)}/events`, {
        headers,
        signal: s.controller.signal,
      });
    } catch (err) {
      throw new Error(`${label}: GET /session/${sessionId}/events: no response headers within ${T.connect} ms (${err.message})`);
    } finally {
      clearTimeout(timer);
    }
    s.status = res.status;
    s.headers = res.headers;
    if (res.status !== 200) {
      s.errorBody = await res.text();
      s.finish(`HTTP ${res.status}`);
      return s;
    }
    s.pump(res.body);
    return s;
  }

  async pump(body) {
    let reason = 'eof';
    try {
      for await (const frame of parseSse(body, { signal: this.controller.signal })) {
        this.frames.push(frame);
        if (frame.data === undefined) continue;
        let env;
        try {
          env = JSON.parse(frame.data);
        } catch {
          this.violations.push(`data is not JSON: ${frame.data.slice(0, 200)}`);
          continue;
        }
        this.check(frame, env);
        this.push(env);
      }
    } catch (err) {
      reason = this.controller.signal.aborted ? 'closed-by-test' : `error: ${err.message}`;
    } finally {
      this.finish(this.controller.signal.aborted ? 'closed-by-test' : reason);
    }
  }

  check(frame, env) {
    if (env === null || typeof env !== 'object' || Array.isArray(env)) {
      this.violations.push(`envelope is not an object: ${frame.data.slice(0, 200)}`);
      return;
    }
    if (env.v !== 1) this.violations.push(`envelope v !== 1: ${frame.data.slice(0, 200)}`);
    if (typeof env.type !== 'string') this.violations.push(`envelope without type: ${frame.data.slice(0, 200)}`);
    if (!('data' in env)) this.violations.push(`envelope without data: ${frame.data.slice(0, 200)}`);
    if (frame.event !== undefined && frame.event !== env.type) {
      this.violations.push(`event: line ${frame.event} != envelope type ${env.type}`);
    }
    if (env.id !== undefined) {
      if (!Number.isSafeInteger(env.id) || env.id < 1) this.violations.push(`bad envelope id ${env.id}`);
      if (frame.id !== String(env.id)) this.violations.push(`id: line ${frame.id} != envelope id ${env.id}`);
      if (env.id <= this.lastId) this.violations.push(`id ${env.id} not above previous ${this.lastId} (${env.type})`);
      this.lastId = Math.max(this.lastId, env.id);
    } else if (frame.id !== undefined) {
      this.violations.push(`id-less envelope ${env.type} carries an id: line ${frame.id}`);
    }
  }

  close() {
    if (!this.done) this.controller.abort();
  }
}

export function agentText(events) {
  return events
    .filter((e) => e.type === 'session_update' && e.data?.update?.sessionUpdate === 'agent_message_chunk')
    .map((e) => (e.data.update.content?.type === 'text' ? e.data.update.content.text : ''))
    .join('');
}

// ---------------------------------------------------------------------------------------------------
// Processes: what is left of a daemon's agents (for the shutdown scenarios).

/** Processes (other than this test and the daemon) whose HOME is the agents' throw-away HOME. */
export function agentProcesses(agentHome, exclude) {
  const out = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (exclude.has(pid)) continue;
    let env;
    let stat;
    try {
      env = fs.readFileSync(`/proc/${pid}/environ`, 'latin1');
      stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
    } catch {
      continue; // gone, or not ours to read
    }
    if (!env.split('\0').includes(`HOME=${agentHome}`)) continue;
    if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue; // exited, not yet reaped
    let cmd = '';
    try {
      cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ').trim();
    } catch {}
    out.push({ pid, cmd: cmd.slice(0, 160) });
  }
  return out;
}

export function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z'); // a zombie has exited (run.sh reaps it)
  } catch {
    return false;
  }
}

/** Poll `pred` (it may be async) every 100 ms for at most `timeoutMs`; `what` may be a function (evaluated on failure). */
export async function until(pred, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await pred()) return;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * SIGTERM the daemon under test (E2E_DAEMON_PID); then every stream in `live` (open before) ends,
 * the daemon exits within its agents' grace, and no process with the agents' HOME (E2E_AGENT_HOME)
 * is left.
 */
export async function sigtermLeavesNoAgent(t, live) {
  const daemonPid = Number(process.env.E2E_DAEMON_PID);
  const agentHome = process.env.E2E_AGENT_HOME;
  assert.ok(daemonPid && agentHome, 'E2E_DAEMON_PID and E2E_AGENT_HOME come from run.sh');
  assert.ok(live.length > 0 && live.every((s) => !s.done), 'open streams exist before shutdown');
  const exclude = new Set([process.pid, daemonPid]);
  const before = agentProcesses(agentHome, exclude);
  assert.ok(before.length > 0, 'the agents are running before shutdown (else this check proves nothing)');
  t.diagnostic(`agent processes before shutdown: ${before.map((p) => `${p.pid} ${p.cmd}`).join(' | ')}`);

  const t0 = Date.now();
  process.kill(daemonPid, 'SIGTERM');
  for (const s of live) await s.waitEnd(T.streamEnd);
  const streamEndMs = Date.now() - t0;
  // docs/protocol.md#10-shutdown: each agent gets up to 10 s after its stdin closes, then its process group is killed.
  await until(() => !alive(daemonPid), 30_000, `daemon ${daemonPid} to exit after SIGTERM`);
  const exitMs = Date.now() - t0;
  await until(
    () => agentProcesses(agentHome, exclude).length === 0,
    5_000,
    () => `no agent process left; still running: ${JSON.stringify(agentProcesses(agentHome, exclude))}`,
  );
  t.diagnostic(`streams ended ${streamEndMs} ms after SIGTERM; daemon exited after ${exitMs} ms; no agent process left`);
}
