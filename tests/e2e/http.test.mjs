// Real-world e2e over plain HTTP + SSE: the real Qwen Code agent (talking to the scripted fake
// model) behind the daemon under test. Run through run.sh, which provides E2E_BASE_URL and
// E2E_WORKSPACE. Tests run in order and share one session (single scope); the last ones close it.
// Tests whose name starts with [spec] check points where docs/protocol.md says more than qwen serve does.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import {
  assertClosedSessionEvents,
  DAEMON_KIND,
  EventStream,
  FAKE_TEXT,
  T,
  WORKSPACE,
  agentText,
  api,
  createSession,
  isPermissionRequest,
  isTurnEnd,
  optionByKind,
  show,
  startPrompt,
  vote,
  waitForFile,
  workspaceFile,
} from './lib.mjs';

const sid = () => session.sessionId;
const enc = encodeURIComponent;
let session; // client 1's create response
let client2; // client 2's create (attach) response
let stream1; // client 1's SSE stream, open from before the first prompt to the end
let stream2; // client 2's SSE stream
let resolvedRequest; // {requestId, optionId} of a permission decided by a vote

async function textTurn(clientId, stream, label) {
  const from = stream.events.length;
  const p = await startPrompt(sid(), 'hi', clientId);
  const end = await stream.waitFor(isTurnEnd(p.promptId), { what: `end of ${label} (${p.promptId})`, from });
  assert.equal(end.type, 'turn_complete', `${label}: ${JSON.stringify(end.data)}`);
  assert.equal(end.data.stopReason, 'end_turn');
  const turn = stream.events.slice(from).filter((e) => e.id !== undefined && e.id > p.lastEventId && e.id < end.id);
  return { p, end, turn };
}

/** Send `WRITE <file> <text>` and wait for its permission_request. */
async function writeTurnUntilPermission(file, text, clientId, stream = stream1) {
  const from = stream.events.length;
  const p = await startPrompt(sid(), `WRITE ${file} ${text}`, clientId);
  const req = await stream.waitFor(isPermissionRequest(sid()), {
    what: `permission_request for ${file}`,
    timeoutMs: T.permission,
    from,
  });
  const d = req.data;
  assert.equal(typeof d.requestId, 'string');
  assert.ok(d.requestId.length > 0);
  assert.equal(typeof d.toolCall, 'object', 'toolCall passed through');
  assert.ok(JSON.stringify(d.toolCall).includes(file), `toolCall names the file: ${JSON.stringify(d.toolCall)}`);
  for (const o of d.options) {
    assert.equal(typeof o.optionId, 'string');
    assert.equal(typeof o.kind, 'string');
  }
  if (req.promptId !== undefined) assert.equal(req.promptId, p.promptId, 'permission_request envelope promptId');
  return { p, req, from };
}

before(async () => {
  const h = await api('GET', '/health');
  assert.equal(h.status, 200, `GET /health: ${show(h)}`);
  assert.equal(h.json?.status, 'ok');
  session = await createSession('e2e-http-1');
  stream1 = await EventStream.open(sid(), { clientId: session.clientId, label: 'client-1' });
  assert.equal(stream1.status, 200, `GET /session/:id/events: ${stream1.errorBody}`);
});

after(() => {
  stream1?.close();
  stream2?.close();
});

test('the event stream answers text/event-stream with no-cache', () => {
  assert.match(stream1.headers.get('content-type') ?? '', /^text\/event-stream/);
  assert.match(stream1.headers.get('cache-control') ?? '', /no-cache/);
});

test('a text turn streams agent_message_chunks that spell the model answer, then turn_complete (stream began with retry: 3000)', async () => {
  const { p, end, turn } = await textTurn(session.clientId, stream1, 'text turn');
  assert.equal(stream1.frames[0]?.retry, 3000, `first frame is retry: 3000, got ${JSON.stringify(stream1.frames[0])}`);
  assert.equal(agentText(turn), FAKE_TEXT);
  assert.equal(end.data.sessionId, sid());
  for (const e of turn.filter((x) => x.type === 'session_update')) {
    assert.equal(e.data.sessionId, sid(), 'session_update data.sessionId');
    assert.equal(typeof e.data.update?.sessionUpdate, 'string', 'data.update is the ACP update');
    if (e.promptId !== undefined) assert.equal(e.promptId, p.promptId, 'envelope promptId of the turn');
  }
  assert.equal(end.originatorClientId, session.clientId, 'the prompting client is the turn originator');
});

test('[spec] a prompt without Prefer: respond-async blocks and answers 200 {stopReason, promptId}', async () => {
  const from = stream1.events.length;
  const res = await api('POST', `/session/${enc(sid())}/prompt`, {
    body: { prompt: [{ type: 'text', text: 'hi' }] },
    clientId: session.clientId,
    timeoutMs: T.turn,
  });
  if (res.status === 202) {
    // Keep the shared session tidy before failing: let this turn finish.
    await stream1.waitFor(isTurnEnd(res.json.promptId), { what: 'end of the 202 turn', from });
    assert.fail(`protocol.md §3.7: blocking by default (200); ${DAEMON_KIND} answered ${show(res)}`);
  }
  assert.equal(res.status, 200, show(res));
  assert.equal(res.json.stopReason, 'end_turn');
  assert.equal(typeof res.json.promptId, 'string');
  const end = await stream1.waitFor(isTurnEnd(res.json.promptId), { what: 'turn_complete of the blocking prompt', from });
  assert.equal(end.type, 'turn_complete');
});

test('a WRITE turn asks permission; a vote for the allow option (chosen by kind) writes the file', async () => {
  const file = workspaceFile('approved');
  const text = 'approved by vote';
  const { p, req, from } = await writeTurnUntilPermission(file, text, session.clientId);
  const allow = optionByKind(req.data.options, ['allow_once', 'allow_always']);
  const res = await vote(sid(), req.data.requestId, allow.optionId, session.clientId);
  assert.equal(res.status, 200, `vote: ${show(res)}`);
  assert.deepEqual(res.json, {});
  const resolved = await stream1.waitFor(
    (e) => e.type === 'permission_resolved' && e.data?.requestId === req.data.requestId,
    { what: 'permission_resolved', from, timeoutMs: T.permission },
  );
  assert.deepEqual(resolved.data.outcome, { outcome: 'selected', optionId: allow.optionId });
  const end = await stream1.waitFor(isTurnEnd(p.promptId), { what: 'end of the approved WRITE turn', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(end.data.stopReason, 'end_turn');
  await waitForFile(file, text);
  resolvedRequest = { requestId: req.data.requestId, optionId: allow.optionId };
});

test('[spec] a vote after the decision is 404 permission_already_resolved', async () => {
  assert.ok(resolvedRequest, 'needs the approved WRITE turn');
  const res = await vote(sid(), resolvedRequest.requestId, resolvedRequest.optionId, session.clientId);
  assert.equal(res.status, 404, show(res));
  assert.equal(res.json?.code, 'permission_already_resolved', show(res));
});

test('[spec] GET /session/:id/permissions lists the pending request', async () => {
  const file = workspaceFile('listed');
  const { p, req, from } = await writeTurnUntilPermission(file, 'listed', session.clientId);
  try {
    const res = await api('GET', `/session/${enc(sid())}/permissions`);
    assert.equal(res.status, 200, show(res));
    assert.ok(Array.isArray(res.json?.pending), show(res));
    const mine = res.json.pending.find((x) => x.requestId === req.data.requestId);
    assert.ok(mine, `pending list has ${req.data.requestId}: ${show(res)}`);
    assert.equal(mine.sessionId, sid());
    assert.deepEqual(mine.options, req.data.options);
  } finally {
    const reject = optionByKind(req.data.options, ['reject_once', 'reject_always']);
    await vote(sid(), req.data.requestId, reject.optionId, session.clientId);
    await stream1.waitFor(isTurnEnd(p.promptId), { what: 'end of the listed WRITE turn', from });
  }
  assert.equal(fs.existsSync(file), false, 'rejected write left no file');
});

test('the same WRITE turn rejected by a vote (reject option by kind) leaves no file', async () => {
  const file = workspaceFile('rejected');
  const { p, req, from } = await writeTurnUntilPermission(file, 'must not exist', session.clientId);
  const reject = optionByKind(req.data.options, ['reject_once', 'reject_always']);
  const res = await vote(sid(), req.data.requestId, reject.optionId, session.clientId);
  assert.equal(res.status, 200, `vote: ${show(res)}`);
  const resolved = await stream1.waitFor(
    (e) => e.type === 'permission_resolved' && e.data?.requestId === req.data.requestId,
    { what: 'permission_resolved', from, timeoutMs: T.permission },
  );
  assert.deepEqual(resolved.data.outcome, { outcome: 'selected', optionId: reject.optionId });
  const end = await stream1.waitFor(isTurnEnd(p.promptId), { what: 'end of the rejected WRITE turn', from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  assert.equal(fs.existsSync(file), false, `${file} must not exist after a rejection`);
});

test('a second client attaches to the same session and sees the identical stream', async () => {
  client2 = await createSession('e2e-http-2');
  assert.equal(client2.sessionId, sid(), 'same session');
  assert.equal(client2.attached, true, 'second create for the same cwd attaches');
  assert.notEqual(client2.clientId, undefined);

  const mark = stream1.lastId; // resume from here: no gap, regardless of when the subscription lands
  stream2 = await EventStream.open(sid(), { clientId: client2.clientId, lastEventId: mark, label: 'client-2' });
  assert.equal(stream2.status, 200, `client-2 events: ${stream2.errorBody}`);

  // client 2 drives: a text turn, then a WRITE turn it approves itself.
  const t = await textTurn(client2.clientId, stream2, 'client-2 text turn');
  assert.equal(agentText(t.turn), FAKE_TEXT);
  assert.equal(t.end.originatorClientId, client2.clientId, 'client 2 is the originator of its turn');
  const file = workspaceFile('client2');
  const w = await writeTurnUntilPermission(file, 'written for client 2', client2.clientId, stream2);
  const allow = optionByKind(w.req.data.options, ['allow_once', 'allow_always']);
  const v = await vote(sid(), w.req.data.requestId, allow.optionId, client2.clientId);
  assert.equal(v.status, 200, show(v));
  const end2 = await stream2.waitFor(isTurnEnd(w.p.promptId), { what: 'end of the client-2 WRITE turn', from: w.from });
  const end1 = await stream1.waitFor(isTurnEnd(w.p.promptId), { what: 'end of the client-2 WRITE turn on client-1 stream' });
  assert.equal(end1.id, end2.id);
  await waitForFile(file, 'written for client 2');

  const pick = (s) =>
    s.events
      .filter((e) => e.id !== undefined && e.id > mark && e.id <= end1.id)
      .map((e) => ({ id: e.id, type: e.type, promptId: e.promptId, originatorClientId: e.originatorClientId, data: e.data }));
  const seen1 = pick(stream1);
  const seen2 = pick(stream2);
  assert.ok(seen1.length >= 8, `expected a real stream, got ${seen1.length} events`);
  assert.deepEqual(seen2, seen1, 'both clients see the same events with the same ids in the same order');
  const ids = seen1.map((e) => e.id);
  assert.deepEqual(ids, [...ids].sort((a, b) => a - b), 'ids increase');
  assert.ok(
    stream2.events.some((e) => e.type === 'replay_complete' && e.id === undefined),
    `a Last-Event-ID subscription gets an id-less replay_complete: ${stream2.summary(40)}`,
  );
});

test('Last-Event-ID resumes with exactly the events after that id', async () => {
  const upto = stream1.lastId;
  const n = Math.max(0, upto - 5);
  const s = await EventStream.open(sid(), { clientId: session.clientId, lastEventId: n, label: 'resume' });
  try {
    assert.equal(s.status, 200, s.errorBody);
    const done = await s.waitFor((e) => e.type === 'replay_complete', { what: 'replay_complete', timeoutMs: T.connect });
    assert.equal(done.id, undefined, 'replay_complete is id-less');
    const replayed = s.events.slice(0, s.events.indexOf(done)).filter((e) => e.id !== undefined);
    assert.ok(replayed.length >= upto - n, `replayed ${replayed.length} events, expected at least ${upto - n}`);
    const firstAfter = stream1.events.find((e) => e.id !== undefined && e.id > n);
    assert.equal(replayed[0].id, firstAfter.id, 'replay starts right after Last-Event-ID');
    const last = replayed.at(-1).id;
    assert.equal(done.data.replayedCount, replayed.length, JSON.stringify(done.data));
    assert.equal(done.data.lastReplayedEventId, last, JSON.stringify(done.data));
    // client 1's live stream must have (or soon get) the same events: nothing lost, nothing extra.
    await stream1.waitFor((e) => e.id === last, { what: `event ${last} on the live stream`, timeoutMs: T.connect });
    const expected = stream1.events.filter((e) => e.id !== undefined && e.id > n && e.id <= last);
    assert.deepEqual(
      replayed.map((e) => [e.id, e.type, e.data]),
      expected.map((e) => [e.id, e.type, e.data]),
    );
    assert.deepEqual(s.violations, []);
  } finally {
    s.close();
  }
});

test('cancel while a permission request is pending ends the turn cancelled; the daemon keeps serving', async () => {
  const file = workspaceFile('cancelled');
  const { p, req, from } = await writeTurnUntilPermission(file, 'cancelled before write', session.clientId);
  const res = await api('POST', `/session/${enc(sid())}/cancel`, { body: {}, clientId: session.clientId });
  assert.equal(res.status, 204, `cancel: ${show(res)}`);
  const end = await stream1.waitFor(isTurnEnd(p.promptId), { what: 'end of the cancelled turn', from });
  if (end.type === 'turn_complete') assert.equal(end.data.stopReason, 'cancelled', JSON.stringify(end.data));
  const resolved = await stream1.waitFor(
    (e) => e.type === 'permission_resolved' && e.data?.requestId === req.data.requestId,
    { what: 'permission_resolved of the cancelled request', from, timeoutMs: T.permission },
  );
  assert.equal(resolved.data.outcome?.outcome, 'cancelled', JSON.stringify(resolved.data));
  assert.equal(fs.existsSync(file), false, 'no file after cancel');
  const late = await vote(sid(), req.data.requestId, optionByKind(req.data.options, ['allow_once', 'allow_always']).optionId, session.clientId);
  assert.equal(late.status, 404, `a vote on the cancelled request: ${show(late)}`);

  const h = await api('GET', '/health');
  assert.equal(h.status, 200, 'still serving');
  const t = await textTurn(session.clientId, stream1, 'text turn after cancel');
  assert.equal(agentText(t.turn), FAKE_TEXT);
});

test('GET /workspace/:cwd/sessions lists the live session', async () => {
  const res = await api('GET', `/workspace/${enc(WORKSPACE)}/sessions`);
  assert.equal(res.status, 200, show(res));
  const mine = res.json?.sessions?.find((x) => x.sessionId === sid());
  assert.ok(mine, `listed: ${show(res)}`);
  assert.equal(typeof mine.createdAt, 'string');
  assert.equal(typeof mine.clientCount, 'number');
  assert.equal(mine.hasActivePrompt, false);
});

test('[spec] GET /session/:id answers the session summary', async () => {
  const res = await api('GET', `/session/${enc(sid())}`);
  assert.equal(res.status, 200, show(res));
  assert.equal(res.json?.sessionId, sid());
  assert.equal(typeof res.json.clientCount, 'number');
  assert.equal(res.json.hasActivePrompt, false);
  assert.equal(typeof res.json.pendingPermissions, 'number');
  assert.equal(typeof res.json.subscribers, 'number');
});

test('POST /session/:id/detach lets client 2 leave while the session stays', async () => {
  const res = await api('POST', `/session/${enc(sid())}/detach`, { clientId: client2.clientId });
  assert.equal(res.status, 204, show(res));
  const list = await api('GET', `/workspace/${enc(WORKSPACE)}/sessions`);
  assert.ok(list.json?.sessions?.some((x) => x.sessionId === sid()), `still listed: ${show(list)}`);
});

test('DELETE /session/:id ends the session: session_closed, streams end, later calls 404', async () => {
  const from1 = stream1.events.length;
  const res = await api('DELETE', `/session/${enc(sid())}`, { clientId: session.clientId });
  assert.equal(res.status, 204, show(res));
  const closed = await stream1.waitFor((e) => e.type === 'session_closed', { what: 'session_closed', from: from1, timeoutMs: T.streamEnd });
  assert.equal(closed.data.sessionId, sid());
  assert.equal(typeof closed.data.reason, 'string');
  await stream1.waitEnd();
  await stream2.waitFor((e) => e.type === 'session_closed', { what: 'session_closed on client-2', timeoutMs: T.streamEnd });
  await stream2.waitEnd();

  await assertClosedSessionEvents(sid());
  const pr = await api('POST', `/session/${enc(sid())}/prompt`, {
    body: { prompt: [{ type: 'text', text: 'hi' }] },
    headers: { Prefer: 'respond-async' },
  });
  assert.equal(pr.status, 404, `prompt to a closed session: ${show(pr)}`);
  const again = await api('DELETE', `/session/${enc(sid())}`);
  assert.equal(again.status, 404, `second DELETE: ${show(again)}`);
  assert.equal(again.json?.code, 'session_not_found');
});

test('[spec] a closed session is gone: GET /session/:id is 404 session_not_found, and it is not listed', async () => {
  const res = await api('GET', `/session/${enc(sid())}`);
  assert.equal(res.status, 404, show(res));
  assert.equal(res.json?.code, 'session_not_found', show(res));
  const list = await api('GET', `/workspace/${enc(WORKSPACE)}/sessions`);
  assert.equal(list.status, 200, show(list));
  assert.ok(!list.json.sessions.some((x) => x.sessionId === sid()), `closed session still listed: ${show(list)}`);
});

test('every SSE frame was well-formed (v:1 envelope, event:/id: lines match, ids increase)', () => {
  assert.deepEqual(stream1.violations, [], 'client-1 stream');
  assert.deepEqual(stream2.violations, [], 'client-2 stream');
});
