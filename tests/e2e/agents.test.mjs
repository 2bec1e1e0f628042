// The agent-generic core scenarios, run once per real ACP agent (E2E_AGENT=qwen|claude|gemini) against a
// daemon of its own that run.sh starts for it. Nothing here knows an agent's option ids or names,
// tool names, _meta, update kinds or timing: options are chosen by ACP `kind`, files by path, and the
// assertions are the daemon's contract (docs/protocol.md), identical for every agent.
//
// Most scenarios run in a fresh session of their own (`sessionScope: "thread"`) so that one failing
// scenario cannot leave a turn or a permission behind for the next; "two WRITE turns in one session"
// checks that an agent's session takes turn after turn (Claude Code folds the previous turn's tool
// result into the next user message; the fake model's script follows the latest prompt regardless).
// The last test shuts the daemon down (SIGTERM) and checks that no agent process is left.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { client, methods } from '@agentclientprotocol/sdk';
import { createWebSocketStream } from '@agentclientprotocol/sdk/experimental/ws-client';
import {
  assertClosedSessionEvents,
  DAEMON_KIND,
  EventStream,
  FAKE_TEXT,
  STALL_OPENING,
  T,
  WORKSPACE,
  agentText,
  api,
  createSession,
  isPermissionRequest,
  isTurnEnd,
  optionByKind,
  show,
  sigtermLeavesNoAgent,
  startPrompt,
  uniqueName,
  vote,
  waitForFile,
  withTimeout,
  workspaceFile,
} from './lib.mjs';

const AGENT = process.env.E2E_AGENT || 'qwen';
const enc = encodeURIComponent;
const tag = (name) => `[${AGENT}] ${name}`;

const streams = []; // every stream opened here, closed in after()
const updateKinds = new Set(); // session/update kinds this agent produced (reported at the end)
let shared; // {a, b, sA, sB}: the session two clients share (text turn, DELETE)
let survivor; // {s, stream}: a session left open for the shutdown test

async function open(sessionId, clientId, label) {
  // Last-Event-ID: 0 replays everything since the session began, so updates the agent sent right after
  // session/new (before any subscriber could exist) are seen too, and nothing is missed in between.
  const s = await EventStream.open(sessionId, { clientId, lastEventId: 0, label: `${AGENT}:${label}` });
  streams.push(s);
  assert.equal(s.status, 200, `GET /session/:id/events: ${s.errorBody}`);
  return s;
}

function noteKinds(events) {
  for (const e of events) {
    if (e.type === 'session_update' && typeof e.data?.update?.sessionUpdate === 'string') updateKinds.add(e.data.update.sessionUpdate);
  }
}

/** A fresh session of its own (thread scope) with an open event stream. */
async function freshSession(label) {
  const s = await createSession(`e2e-${AGENT}-${label}`, { sessionScope: 'thread' });
  assert.equal(s.attached, false, 'a thread-scope create is a new session');
  const stream = await open(s.sessionId, s.clientId, label);
  return { s, stream };
}

/** Send `WRITE <file> <text>` and wait for its permission_request; checks the request's shape. */
async function writeUntilPermission(t, { s, stream }, file, text) {
  const from = stream.events.length;
  const p = await startPrompt(s.sessionId, `WRITE ${file} ${text}`, s.clientId);
  const req = await stream.waitFor(isPermissionRequest(s.sessionId), { what: `permission_request for ${file}`, timeoutMs: T.permission, from });
  const d = req.data;
  assert.equal(typeof d.requestId, 'string');
  assert.ok(d.requestId.length > 0);
  assert.equal(typeof d.toolCall, 'object', 'toolCall passed through');
  assert.ok(JSON.stringify(d.toolCall).includes(file), `toolCall names the file: ${JSON.stringify(d.toolCall)}`);
  assert.ok(Array.isArray(d.options) && d.options.length >= 2, `options: ${JSON.stringify(d.options)}`);
  for (const o of d.options) {
    assert.equal(typeof o.optionId, 'string');
    assert.equal(typeof o.name, 'string');
    assert.equal(typeof o.kind, 'string');
  }
  assert.equal(new Set(d.options.map((o) => o.optionId)).size, d.options.length, 'option ids are distinct');
  assert.equal(req.promptId, p.promptId, 'permission_request envelope carries the turn promptId');
  const toolCallId = d.toolCall.toolCallId;
  assert.equal(typeof toolCallId, 'string', `toolCall.toolCallId: ${JSON.stringify(d.toolCall)}`);
  // Whether the agent announced the tool call (a `tool_call` update) before asking is its own
  // business: Qwen Code and Claude Code do, Gemini CLI's call first appears in the request. The
  // daemon passes on what it gets either way.
  const announced = stream.events
    .slice(from)
    .some((e) => e.type === 'session_update' && e.data?.update?.sessionUpdate === 'tool_call' && e.data.update.toolCallId === toolCallId);
  t.diagnostic(`tool call announced before the request: ${announced}`);
  t.diagnostic(`permission options: ${d.options.map((o) => `${o.kind}=${JSON.stringify(o.optionId)}/${JSON.stringify(o.name)}`).join(', ')}`);
  return { p, req, from, toolCallId };
}

async function resolvedEvent(stream, requestId, from) {
  return stream.waitFor((e) => e.type === 'permission_resolved' && e.data?.requestId === requestId, {
    what: `permission_resolved for ${requestId}`,
    from,
    timeoutMs: T.permission,
  });
}

/** A plain text turn on a session whose last turn was cancelled: it ends end_turn with the model's text. */
async function textTurnAfterCancel({ s, stream }) {
  const from = stream.events.length;
  const p = await startPrompt(s.sessionId, 'hi', s.clientId);
  const end = await stream.waitFor(isTurnEnd(p.promptId), { what: 'end of the turn after cancel', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(end.data.stopReason, 'end_turn');
  const turn = stream.events.slice(from).filter((e) => e.id !== undefined && e.id < end.id);
  assert.equal(agentText(turn), FAKE_TEXT, `the turn after cancel is the model's text answer: ${stream.summary(20)}`);
}

function toolCallStatuses(events, toolCallId) {
  return events
    .filter((e) => e.type === 'session_update' && e.data?.update?.sessionUpdate === 'tool_call_update' && e.data.update.toolCallId === toolCallId)
    .map((e) => e.data.update.status)
    .filter(Boolean);
}

/**
 * The change set of the turn that ended with `end` (issue #42): its `turn_changes` event, and the
 * entry of `file` in it, which must say `status`, approved (`unapproved: false`) by the vote.
 */
function approvedChange(events, end, file, status) {
  const changes = events.filter((e) => e.type === 'turn_changes' && e.id < end.id && e.data?.promptId === end.data?.promptId).pop();
  assert.ok(changes, `a turn_changes event before the turn's end: ${JSON.stringify(events.map((e) => e.type))}`);
  const entry = changes.data.files.find((f) => file.endsWith(`/${f.path}`));
  assert.ok(entry, `${file} in the change set: ${JSON.stringify(changes.data)}`);
  assert.equal(entry.status, status, JSON.stringify(entry));
  assert.equal(entry.unapproved, false, `the approved request covers ${entry.path}: ${JSON.stringify(changes.data)}`);
  assert.ok(!events.some((e) => e.type === 'unapproved_change' && e.data?.promptId === end.data?.promptId), 'nothing unapproved');
  return changes;
}

before(async () => {
  const h = await api('GET', '/health');
  assert.equal(h.status, 200, `GET /health: ${show(h)}`);
  const caps = await api('GET', '/capabilities');
  assert.equal(caps.status, 200, show(caps));
});

after(() => {
  for (const s of streams) s.close();
});

test(tag('a text turn streams to two subscribers: identical events, chunks spell the model answer, turn_complete end_turn'), async (t) => {
  const a = await createSession(`e2e-${AGENT}-a`);
  assert.equal(a.attached, false, `first create on a fresh daemon starts the session (${DAEMON_KIND})`);
  const b = await createSession(`e2e-${AGENT}-b`);
  assert.equal(b.sessionId, a.sessionId, 'second create attaches to the same session');
  assert.equal(b.attached, true);
  const sA = await open(a.sessionId, a.clientId, 'subscriber-a');
  const sB = await open(b.sessionId, b.clientId, 'subscriber-b');
  shared = { a, b, sA, sB };

  const p = await startPrompt(a.sessionId, 'hi', a.clientId);
  const endA = await sA.waitFor(isTurnEnd(p.promptId), { what: 'end of the text turn on subscriber a' });
  const endB = await sB.waitFor(isTurnEnd(p.promptId), { what: 'end of the text turn on subscriber b' });
  assert.equal(endA.type, 'turn_complete', JSON.stringify(endA.data));
  assert.equal(endA.data.stopReason, 'end_turn');
  assert.equal(endA.data.sessionId, a.sessionId);
  assert.equal(endA.originatorClientId, a.clientId, 'the prompting client is the originator');
  assert.equal(endB.id, endA.id, 'same turn_complete id on both streams');

  const upTo = (s) => s.events.filter((e) => e.id !== undefined && e.id <= endA.id).map((e) => [e.id, e.type, e.promptId, e.data]);
  assert.deepEqual(upTo(sB), upTo(sA), 'both subscribers saw the same events, same ids, same order');
  const turn = sA.events.filter((e) => e.id !== undefined && e.id > p.lastEventId && e.id < endA.id);
  assert.equal(agentText(turn), FAKE_TEXT, 'agent_message_chunks spell the model answer');
  for (const e of turn.filter((x) => x.type === 'session_update')) {
    assert.equal(e.data.sessionId, a.sessionId);
    assert.equal(typeof e.data.update?.sessionUpdate, 'string', 'data.update is the ACP update');
  }
  assert.ok(
    sA.events.some((e) => e.type === 'replay_complete' && e.id === undefined),
    'a Last-Event-ID subscription gets an id-less replay_complete',
  );
  noteKinds(sA.events);
});

test(tag('a WRITE turn asks permission; a vote for the allow_once option writes the file'), async (t) => {
  const ctx = await freshSession('approve');
  const file = workspaceFile(`${AGENT}-approved`);
  const text = `approved by vote for ${AGENT}`;
  const { p, req, from, toolCallId } = await writeUntilPermission(t, ctx, file, text);
  assert.equal(fs.existsSync(file), false, 'nothing written before the decision');
  const allow = optionByKind(req.data.options, ['allow_once']);
  const res = await vote(ctx.s.sessionId, req.data.requestId, allow.optionId, ctx.s.clientId);
  assert.equal(res.status, 200, `vote: ${show(res)}`);
  const resolved = await resolvedEvent(ctx.stream, req.data.requestId, from);
  assert.deepEqual(resolved.data.outcome, { outcome: 'selected', optionId: allow.optionId });
  const end = await ctx.stream.waitFor(isTurnEnd(p.promptId), { what: 'end of the approved WRITE turn', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(end.data.stopReason, 'end_turn');
  await waitForFile(file, text);
  const statuses = toolCallStatuses(ctx.stream.events.slice(from), toolCallId);
  assert.ok(statuses.includes('completed'), `tool call ${toolCallId} completed: ${JSON.stringify(statuses)}`);
  approvedChange(ctx.stream.events.slice(from), end, file, 'added');
  noteKinds(ctx.stream.events);
});

test(tag('an ACP client over /acp (the official ACP SDK, WebSocket) drives a WRITE turn, allows it, and REST sees the same updates'), async (t) => {
  const file = workspaceFile(`${AGENT}-acp`);
  const text = `written over acp for ${AGENT}`;
  const updates = [];
  const asked = [];
  let watcher;
  const editor = client({ name: 'e2e-editor' })
    .onNotification(methods.client.session.update, ({ params }) => {
      updates.push(params.update);
    })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      asked.push(params);
      return { outcome: { outcome: 'selected', optionId: optionByKind(params.options, ['allow_once']).optionId } };
    });
  const url = `${process.env.E2E_BASE_URL.replace(/^http/, 'ws')}/acp`;
  const run = editor.connectWith(createWebSocketStream(url, { WebSocket: globalThis.WebSocket }), async (ctx) => {
    await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    const s = await ctx.request(methods.agent.session.new, {
      cwd: process.env.E2E_WORKSPACE,
      mcpServers: [],
      _meta: { 'mediatord/sessionScope': 'thread' },
    });
    watcher = await open(s.sessionId, `e2e-${AGENT}-acp-watcher`, 'acp-watcher');
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId: s.sessionId,
      prompt: [{ type: 'text', text: `WRITE ${file} ${text}` }],
    });
    return { s, result };
  });
  const { s, result } = await withTimeout(run, T.turn, `${AGENT}: a WRITE turn over /acp`);
  assert.equal(result.stopReason, 'end_turn', JSON.stringify(result));
  assert.equal(asked.length, 1, `one permission request: ${JSON.stringify(asked)}`);
  assert.equal(asked[0].sessionId, s.sessionId);
  await waitForFile(file, text);
  // The REST subscriber saw the same updates in the same order (all but the echo of the editor's own
  // prompt, which an editor is not sent: it shows its prompt itself).
  await watcher.waitFor((e) => e.type === 'turn_complete', { what: 'turn_complete on the REST stream' });
  const shape = (u) => [u.sessionUpdate, u.toolCallId ?? null, u.status ?? null];
  const rest = watcher.events
    .filter((e) => e.type === 'session_update' && e.data.update?._meta?.source !== 'bridge-echo')
    .map((e) => shape(e.data.update));
  assert.deepEqual(updates.map(shape), rest);
  t.diagnostic(`updates over /acp: ${updates.length}`);
  noteKinds(watcher.events);
});

test(tag('the same WRITE turn rejected by a vote for the reject_once option leaves no file'), async (t) => {
  const ctx = await freshSession('reject');
  const file = workspaceFile(`${AGENT}-rejected`);
  const { p, req, from, toolCallId } = await writeUntilPermission(t, ctx, file, 'must not exist');
  const reject = optionByKind(req.data.options, ['reject_once']);
  const res = await vote(ctx.s.sessionId, req.data.requestId, reject.optionId, ctx.s.clientId);
  assert.equal(res.status, 200, `vote: ${show(res)}`);
  const resolved = await resolvedEvent(ctx.stream, req.data.requestId, from);
  assert.deepEqual(resolved.data.outcome, { outcome: 'selected', optionId: reject.optionId });
  const end = await ctx.stream.waitFor(isTurnEnd(p.promptId), { what: 'end of the rejected WRITE turn', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(end.data.stopReason, 'end_turn');
  assert.equal(fs.existsSync(file), false, `${file} must not exist after a rejection`);
  // The tool did not run. (Qwen Code and Claude Code report the call `failed`; Gemini CLI sends no
  // update for a rejected call.)
  const statuses = toolCallStatuses(ctx.stream.events.slice(from), toolCallId);
  assert.ok(!statuses.includes('completed'), `tool call ${toolCallId} did not complete: ${JSON.stringify(statuses)}`);
  t.diagnostic(`tool call statuses after the rejection: ${JSON.stringify(statuses)}`);
  noteKinds(ctx.stream.events);
});

test(tag('cancel during a turn (permission pending) ends it cancelled, writes nothing; the session serves the next turn'), async (t) => {
  const ctx = await freshSession('cancel');
  const sid = ctx.s.sessionId;
  const file = workspaceFile(`${AGENT}-cancelled`);
  const { p, req, from } = await writeUntilPermission(t, ctx, file, 'cancelled before write');
  const res = await api('POST', `/session/${enc(sid)}/cancel`, { body: {}, clientId: ctx.s.clientId });
  assert.equal(res.status, 204, `cancel: ${show(res)}`);
  const end = await ctx.stream.waitFor(isTurnEnd(p.promptId), { what: 'end of the cancelled turn', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(end.data.stopReason, 'cancelled', JSON.stringify(end.data));
  const resolved = await resolvedEvent(ctx.stream, req.data.requestId, from);
  assert.equal(resolved.data.outcome?.outcome, 'cancelled', JSON.stringify(resolved.data));
  assert.equal(fs.existsSync(file), false, 'no file after cancel');
  const late = await vote(sid, req.data.requestId, optionByKind(req.data.options, ['allow_once']).optionId, ctx.s.clientId);
  assert.equal(late.status, 404, `a vote on the cancelled request: ${show(late)}`);

  // The same session takes the next prompt (the cancelled tool call stays in the agent's history:
  // Claude Code sends its result together with this prompt).
  await textTurnAfterCancel(ctx);
  noteKinds(ctx.stream.events);
  survivor = ctx; // left open: the shutdown test checks that shutdown ends it
});

test(tag('two WRITE turns in one session: each asks permission, each vote writes its file'), async (t) => {
  const ctx = await freshSession('two-writes');
  for (const n of [1, 2]) {
    const file = workspaceFile(`${AGENT}-session-write-${n}`);
    const text = `write ${n} of one session`;
    const { p, req, from, toolCallId } = await writeUntilPermission(t, ctx, file, text);
    assert.equal(fs.existsSync(file), false, `write ${n}: nothing written before the decision`);
    const allow = optionByKind(req.data.options, ['allow_once']);
    const res = await vote(ctx.s.sessionId, req.data.requestId, allow.optionId, ctx.s.clientId);
    assert.equal(res.status, 200, `write ${n}: vote: ${show(res)}`);
    const end = await ctx.stream.waitFor(isTurnEnd(p.promptId), { what: `end of WRITE turn ${n}`, from });
    assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
    assert.equal(end.data.stopReason, 'end_turn');
    await waitForFile(file, text);
    const statuses = toolCallStatuses(ctx.stream.events.slice(from), toolCallId);
    assert.ok(statuses.includes('completed'), `write ${n}: tool call ${toolCallId} completed: ${JSON.stringify(statuses)}`);
  }
  noteKinds(ctx.stream.events);
});

test(tag('cancel while the model is still answering ends the turn cancelled; the session serves the next turn'), async (t) => {
  const ctx = await freshSession('stall');
  const sid = ctx.s.sessionId;
  const from = ctx.stream.events.length;
  // STALL: the fake model streams its opening text, then holds the response open. Seeing that text
  // means the agent's model call is in flight when the cancel arrives.
  const p = await startPrompt(sid, 'STALL', ctx.s.clientId);
  await ctx.stream.waitFor(
    (e) => e.data?.update?.sessionUpdate === 'agent_message_chunk' && e.data.update.content?.text?.includes(STALL_OPENING),
    { what: `the stalled answer's opening text ${JSON.stringify(STALL_OPENING)}`, from, timeoutMs: T.permission },
  );
  const res = await api('POST', `/session/${enc(sid)}/cancel`, { body: {}, clientId: ctx.s.clientId });
  assert.equal(res.status, 204, `cancel: ${show(res)}`);
  const end = await ctx.stream.waitFor(isTurnEnd(p.promptId), { what: 'end of the cancelled turn', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(end.data.stopReason, 'cancelled', JSON.stringify(end.data));
  // Claude Code merges the cancelled prompt and this one into one user message.
  await textTurnAfterCancel(ctx);
  noteKinds(ctx.stream.events);
});

// ACP's request_permission carries a ToolCallUpdate: only toolCallId is required, and fields it leaves
// out keep the values of the tool_call announced earlier by session/update. Qwen Code repeats kind and
// locations in the request; Claude Code sends only {toolCallId, title, rawInput}, so the daemon matches
// rules on the request laid over the announced tool call (src/session.rs `merged_tool_call`).
test(tag('a session rule {allow, kinds:[edit], paths:[file]} answers the WRITE permission request without a vote'), async (t) => {
  const ctx = await freshSession('rule');
  const sid = ctx.s.sessionId;
  const file = workspaceFile(`${AGENT}-by-rule`);
  const text = 'allowed by a rule';
  const r = await api('POST', `/session/${enc(sid)}/permission-rules`, {
    body: { effect: 'allow', kinds: ['edit'], paths: [file] },
    clientId: ctx.s.clientId,
  });
  assert.equal(r.status, 201, `POST permission-rules: ${show(r)}`);
  const ruleId = r.json?.rule?.ruleId;
  assert.equal(typeof ruleId, 'string', show(r));
  const from = ctx.stream.events.length;
  const p = await startPrompt(sid, `WRITE ${file} ${text}`, ctx.s.clientId);
  const req = await ctx.stream.waitFor(isPermissionRequest(sid), { what: 'permission_request (published even when a rule answers it)', timeoutMs: T.permission, from });
  t.diagnostic(`toolCall of the request: ${JSON.stringify(req.data.toolCall).slice(0, 300)}`);
  let resolved;
  try {
    resolved = await ctx.stream.waitFor((e) => e.type === 'permission_resolved' && e.data?.requestId === req.data.requestId, {
      what: 'permission_resolved by the rule',
      from,
      timeoutMs: 5_000,
    });
  } finally {
    if (!resolved) {
      // Not answered by the rule: end the turn so the session stays tidy, then fail below.
      await vote(sid, req.data.requestId, optionByKind(req.data.options, ['reject_once']).optionId, ctx.s.clientId);
      await ctx.stream.waitFor(isTurnEnd(p.promptId), { what: 'end of the WRITE turn', from });
    }
  }
  assert.equal(resolved.data.resolvedBy, 'rule', JSON.stringify(resolved.data));
  assert.equal(resolved.data.ruleId, ruleId);
  assert.equal(resolved.data.outcome?.outcome, 'selected');
  assert.equal(resolved.data.outcome.optionId, optionByKind(req.data.options, ['allow_once']).optionId);
  const end = await ctx.stream.waitFor(isTurnEnd(p.promptId), { what: 'end of the WRITE turn', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  await waitForFile(file, text);
});

/** Send `SHELL <command>`, vote allow_once on its permission request, and follow the turn to its end. */
async function approvedShell(t, ctx, command) {
  const from = ctx.stream.events.length;
  const p = await startPrompt(ctx.s.sessionId, `SHELL ${command}`, ctx.s.clientId);
  const req = await ctx.stream.waitFor(isPermissionRequest(ctx.s.sessionId), { what: `permission_request for SHELL ${command}`, timeoutMs: T.permission, from });
  const allow = optionByKind(req.data.options, ['allow_once']);
  const res = await vote(ctx.s.sessionId, req.data.requestId, allow.optionId, ctx.s.clientId);
  assert.equal(res.status, 200, `vote: ${show(res)}`);
  const end = await ctx.stream.waitFor(isTurnEnd(p.promptId), { what: `end of the SHELL ${command} turn`, from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(end.data.stopReason, 'end_turn');
  const turn = ctx.stream.events.slice(from).filter((e) => e.id !== undefined && e.id < end.id);
  noteKinds(turn);
  return { req, turn, end };
}

// The sandbox (docs/operations.md#the-sandbox): the agent runs confined by the kernel, so its own
// shell tool may write in the workspace and nowhere else, whoever approved the command.
test(tag('[spec] the daemon reports the agent confined by Landlock (GET /capabilities sandbox)'), async () => {
  const caps = await api('GET', '/capabilities');
  assert.equal(caps.json?.sandbox?.kind, 'landlock', `sandbox: ${JSON.stringify(caps.json?.sandbox)}`);
  assert.ok(caps.json.sandbox.writable.includes('<workspace>'), JSON.stringify(caps.json.sandbox));
});

test(tag('an approved SHELL command writes inside the workspace'), async (t) => {
  const ctx = await freshSession('shell-in');
  const file = workspaceFile(`${AGENT}-shell`);
  const made = await approvedShell(t, ctx, `echo shell-made > ${file}`);
  await waitForFile(file, 'shell-made\n');
  approvedChange(made.turn, made.end, file, 'added');
  // And one that deletes (issue #42): the change set says so, approved by the vote.
  const gone = await approvedShell(t, ctx, `rm ${file}`);
  assert.equal(fs.existsSync(file), false, 'removed');
  approvedChange(gone.turn, gone.end, file, 'deleted');
});

test(tag('[spec] an approved SHELL command that writes outside the workspace fails visibly, and nothing is written'), async (t) => {
  const ctx = await freshSession('shell-out');
  // Beside the workspace: outside it and outside every writable path of the agent.
  const outside = path.join(path.dirname(WORKSPACE), `${uniqueName(`${AGENT}-outside`)}.txt`);
  const denialsBefore = (await api('GET', '/health?deep=1')).json?.sandbox?.denials;
  const { turn } = await approvedShell(t, ctx, `echo escaped > ${outside}`);
  assert.equal(fs.existsSync(outside), false, `${outside} must not exist: the kernel refuses the write`);
  // The kernel refused the write; what the client sees of it is the agent's tool result. Where the
  // agent forwards its tool's output (Qwen Code and Claude Code do), the refusal must be in it, and the
  // daemon counts it; Gemini CLI reports its shell call `completed` with no content at all.
  const updates = turn.filter((e) => e.type === 'session_update' && e.data?.update?.sessionUpdate === 'tool_call_update');
  const forwarded = updates.some((e) => (e.data.update.content ?? []).length > 0 || e.data.update.rawOutput !== undefined);
  const refusalShown = /Permission denied|EACCES/.test(JSON.stringify(updates));
  const denialsAfter = (await api('GET', '/health?deep=1')).json?.sandbox?.denials;
  t.diagnostic(`tool output forwarded: ${forwarded}; refusal shown: ${refusalShown}; sandbox denials counted: ${denialsBefore} -> ${denialsAfter}`);
  if (forwarded) {
    assert.ok(refusalShown, `the refusal reaches the transcript: ${JSON.stringify(updates).slice(0, 1500)}`);
    assert.equal(denialsAfter, denialsBefore + 1, 'the daemon counted the refusal it saw in the tool result');
  } else {
    assert.equal(denialsAfter, denialsBefore, 'nothing seen, nothing counted');
  }
});

// Issue #41, finding 2: nothing an agent runs is a client of the daemon that mediates it. The real
// agent's own shell, confined, calls this daemon (tokenless on loopback, as here: it needs nothing
// else) on REST, on `/acp`, and with a vote; each is refused `403 agent_not_a_client`, audited and
// announced on the agent's sessions, while this test, a process of the same user on the same
// machine that the daemon did not start, is served.
test(tag("[spec] the agent's own shell is refused as a client of its daemon (REST, /acp, a vote), audited and announced"), async (t) => {
  if (DAEMON_KIND !== 'mediatord') return t.skip('mediatord only: qwen serve serves its agent as any client');
  const ctx = await freshSession('as-client');
  const out = workspaceFile(`${AGENT}-as-client`);
  const url = process.env.E2E_BASE_URL.replace(/\/+$/, '');
  const votePath = `${url}/session/${ctx.s.sessionId}/permission/req-of-its-own`;
  const init = '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}';
  // One line per attempt: the daemon's body, then the status curl saw.
  const curl = (args) => `curl -s -w ' HTTP%{http_code}\\n' ${args}`;
  const command = [
    curl(`${url}/capabilities`),
    curl(`-X POST -H 'Content-Type: application/json' -d '{}' ${url}/session`),
    curl(`-X POST -H 'Content-Type: application/json' -d '{"outcome":{"outcome":"selected","optionId":"allow_once"}}' ${votePath}`),
    curl(`-X POST -H 'Content-Type: application/json' -d '${init}' ${url}/acp`),
  ].join('; ');
  const auditBefore = (await api('GET', '/audit?outcome=refused&limit=200')).json?.entries?.length ?? 0;
  const { turn } = await approvedShell(t, ctx, `{ ${command}; } > ${out}`);
  const said = fs.readFileSync(out, 'utf8').trim().split('\n');
  assert.equal(said.length, 4, `four answers: ${JSON.stringify(said)}`);
  for (const line of said) {
    assert.ok(line.includes('"code":"agent_not_a_client"') && line.endsWith(' HTTP403'), `refused: ${line}`);
  }
  const announced = turn.filter((e) => e.type === 'agent_refused_as_client');
  assert.deepEqual(
    announced.map((e) => e.data.attempt),
    ['GET /capabilities', 'POST /session', 'POST /session/{id}/permission/{request_id}', 'POST /acp'],
    'each attempt announced on the agent\'s session, in order',
  );
  const audit = (await api('GET', '/audit?outcome=refused&limit=200')).json;
  assert.equal(audit.entries.length, auditBefore + 4, `each attempt audited: ${JSON.stringify(audit.entries.slice(0, 4))}`);
  // This test's own client, the same user on the same machine, is served on the same routes.
  assert.equal((await api('GET', '/capabilities')).status, 200);
  assert.equal((await api('POST', votePath.slice(url.length), { body: { outcome: { outcome: 'selected', optionId: 'allow_once' } }, clientId: ctx.s.clientId })).status, 404, 'a person\'s vote reaches the mediator (no such request)');
});

test(tag('DELETE /session/:id: session_closed on both subscribers, streams end, later calls 404; other sessions live on'), async (t) => {
  assert.ok(shared, 'needs the shared session of the text-turn test');
  const { a, sA, sB } = shared;
  const fromA = sA.events.length;
  const fromB = sB.events.length;
  const res = await api('DELETE', `/session/${enc(a.sessionId)}`, { clientId: a.clientId });
  assert.equal(res.status, 204, show(res));
  for (const [s, from] of [
    [sA, fromA],
    [sB, fromB],
  ]) {
    const closed = await s.waitFor((e) => e.type === 'session_closed', { what: 'session_closed', from, timeoutMs: T.streamEnd });
    assert.equal(closed.data.sessionId, a.sessionId);
    assert.equal(typeof closed.data.reason, 'string');
    await s.waitEnd();
  }
  await assertClosedSessionEvents(a.sessionId);
  const pr = await api('POST', `/session/${enc(a.sessionId)}/prompt`, {
    body: { prompt: [{ type: 'text', text: 'hi' }] },
    headers: { Prefer: 'respond-async' },
  });
  assert.equal(pr.status, 404, `prompt to a closed session: ${show(pr)}`);
  const again = await api('DELETE', `/session/${enc(a.sessionId)}`);
  assert.equal(again.status, 404, `second DELETE: ${show(again)}`);

  // The agent process is shared by the workspace's sessions: closing one leaves the others working.
  assert.ok(survivor, 'needs the session of the cancel test');
  const from = survivor.stream.events.length;
  const p = await startPrompt(survivor.s.sessionId, 'hi', survivor.s.clientId);
  const end = await survivor.stream.waitFor(isTurnEnd(p.promptId), { what: 'a turn on another session after DELETE', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(end.data.stopReason, 'end_turn');
});

test(tag('every SSE frame was well-formed (v:1 envelope, event:/id: lines match, ids increase)'), (t) => {
  for (const s of streams) assert.deepEqual(s.violations, [], s.label);
  t.diagnostic(`session/update kinds seen: ${[...updateKinds].sort().join(', ')}`);
});

// ---------------------------------------------------------------------------------------------------
// Shutdown: needs the pid of the daemon and its agents' HOME from run.sh.

test(tag('SIGTERM: the daemon drains, ends open streams, exits, and no agent process is left'), async (t) => {
  if (!process.env.E2E_DAEMON_PID || !process.env.E2E_AGENT_HOME) {
    t.skip('E2E_DAEMON_PID / E2E_AGENT_HOME not set (run through run.sh)');
    return;
  }
  // A live session with an open stream (made here when the earlier tests were filtered out).
  const live = survivor ?? (await freshSession('shutdown'));
  await sigtermLeavesNoAgent(t, [live.stream]);
});
