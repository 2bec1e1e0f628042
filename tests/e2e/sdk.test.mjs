// Real-world e2e with the official TypeScript client: `DaemonClient` from @qwen-code/sdk/daemon,
// unchanged, against the daemon under test and the real Qwen Code agent. Run through run.sh.
// Tests run in order on one session; the last ones close it. Tests named [spec] check points where
// docs/protocol.md says more than qwen serve does.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import {
  DaemonClient,
  DaemonHttpError,
  createDaemonTranscriptState,
  normalizeDaemonEvent,
  reduceDaemonTranscriptEvents,
  selectPendingPermissionBlocks,
  selectTranscriptBlocks,
  selectUnrecognizedDiagnostics,
} from '@qwen-code/sdk/daemon';
import {
  BASE_URL,
  EventCollector,
  FAKE_TEXT,
  T,
  WORKSPACE,
  agentText,
  isPermissionRequest,
  optionByKind,
  until,
  waitForFile,
  withTimeout,
  workspaceFile,
} from './lib.mjs';

const client = new DaemonClient({ baseUrl: BASE_URL, fetchTimeoutMs: T.request });
let created; // first createOrAttachSession result
let attached; // second createOrAttachSession result
let events; // SdkEvents over client.subscribeEvents
const sid = () => created.sessionId;
const cid = () => created.clientId;

/** Collects `client.subscribeEvents()` in the background. */
class SdkEvents extends EventCollector {
  constructor(sessionId, opts) {
    super('sdk-subscription');
    this.controller = new AbortController();
    (async () => {
      let reason = 'eof';
      try {
        for await (const ev of client.subscribeEvents(sessionId, { ...opts, signal: this.controller.signal })) {
          this.push(ev);
        }
      } catch (err) {
        reason = this.controller.signal.aborted ? 'closed-by-test' : `error: ${err.name}: ${err.message}`;
        if (!this.controller.signal.aborted) this.error = err;
      } finally {
        this.finish(this.controller.signal.aborted ? 'closed-by-test' : reason);
      }
    })();
  }
  close() {
    this.controller.abort();
  }
}

/** SDK prompt, bounded: the signal aborts (and the SDK then cancels) after T.turn. */
function sdkPrompt(text) {
  return withTimeout(
    client.prompt(sid(), { prompt: [{ type: 'text', text }] }, AbortSignal.timeout(T.turn), cid()),
    T.turn + 1_000,
    `client.prompt(${JSON.stringify(text)})`,
  );
}

/** The turn_complete of a prompt() that just resolved (the result has promptId only from a blocking daemon). */
async function turnCompleteAfter(from, result) {
  return events.waitFor(
    (e) => e.type === 'turn_complete' && (result.promptId === undefined || e.data?.promptId === result.promptId),
    { what: 'turn_complete on the subscription', from, timeoutMs: T.turn },
  );
}

/** Start a WRITE prompt through the SDK and return it with its permission_request. */
async function writeUntilPermission(file, text) {
  const from = events.events.length;
  const pending = sdkPrompt(`WRITE ${file} ${text}`);
  pending.catch(() => {}); // observed below; avoid an unhandled rejection while we wait
  const req = await events.waitFor(isPermissionRequest(sid()), { what: `permission_request for ${file}`, from, timeoutMs: T.permission });
  return { pending, req, from };
}

before(async () => {
  created = await client.createOrAttachSession({ workspaceCwd: WORKSPACE }, 'e2e-sdk-1');
  // Replay from the start of the session so nothing is missed however late the subscription lands.
  events = new SdkEvents(sid(), { clientId: cid(), lastEventId: 0 });
});

after(() => {
  events?.close();
});

test('health()', async () => {
  assert.deepEqual(await client.health(), { status: 'ok' });
});

test('capabilities() advertises the core features and the workspace', async () => {
  const caps = await client.capabilities();
  assert.equal(caps.v, 1);
  assert.equal(typeof caps.mode, 'string');
  for (const f of [
    'health',
    'capabilities',
    'session_create',
    'session_list',
    'session_prompt',
    'session_cancel',
    'session_events',
    'session_set_model',
    'client_heartbeat',
    'permission_vote',
    'session_permission_vote',
  ]) {
    assert.ok(caps.features.includes(f), `feature ${f} in ${JSON.stringify(caps.features)}`);
  }
  assert.equal(fs.realpathSync(caps.workspaceCwd), fs.realpathSync(WORKSPACE));
  assert.ok(Array.isArray(caps.workspaces) && caps.workspaces.some((w) => w.primary === true));
});

test('createOrAttachSession(): a second call for the same workspace attaches', async () => {
  assert.equal(typeof created.sessionId, 'string');
  assert.equal(typeof created.attached, 'boolean');
  assert.equal(typeof created.clientId, 'string');
  attached = await client.createOrAttachSession({ workspaceCwd: WORKSPACE }, 'e2e-sdk-2');
  assert.equal(attached.sessionId, created.sessionId);
  assert.equal(attached.attached, true);
  assert.equal(typeof attached.clientId, 'string');
});

test('listWorkspaceSessions() lists the session', async () => {
  const list = await client.listWorkspaceSessions(WORKSPACE);
  assert.ok(Array.isArray(list));
  const mine = list.find((s) => s.sessionId === sid());
  assert.ok(mine, JSON.stringify(list));
  assert.equal(typeof mine.workspaceCwd, 'string');
});

test('subscribeEvents() + prompt(): the streamed chunks spell the model answer', async () => {
  const from = events.events.length;
  const result = await sdkPrompt('hi');
  assert.equal(result.stopReason, 'end_turn', JSON.stringify(result));
  const end = await turnCompleteAfter(from, result);
  const turn = events.events.slice(from).filter((e) => e.id !== undefined && e.id < end.id);
  assert.equal(agentText(turn), FAKE_TEXT);
});

test('respondToSessionPermission(): allow by kind, the prompt completes and the file exists', async () => {
  const file = workspaceFile('sdk-session-vote');
  const { pending, req } = await writeUntilPermission(file, 'sdk session vote');
  const allow = optionByKind(req.data.options, ['allow_once', 'allow_always']);
  const ok = await client.respondToSessionPermission(
    sid(),
    req.data.requestId,
    { outcome: { outcome: 'selected', optionId: allow.optionId } },
    cid(),
  );
  assert.equal(ok, true, 'vote accepted (200)');
  const result = await pending;
  assert.equal(result.stopReason, 'end_turn');
  await waitForFile(file, 'sdk session vote');
  const late = await client.respondToSessionPermission(
    sid(),
    req.data.requestId,
    { outcome: { outcome: 'selected', optionId: allow.optionId } },
    cid(),
  );
  assert.equal(late, false, 'a vote after the decision resolves false (404)');
});

test('respondToPermission() (legacy route): allow by kind, the file exists', async () => {
  const file = workspaceFile('sdk-legacy-vote');
  const { pending, req } = await writeUntilPermission(file, 'sdk legacy vote');
  const allow = optionByKind(req.data.options, ['allow_once', 'allow_always']);
  const ok = await client.respondToPermission(req.data.requestId, { outcome: { outcome: 'selected', optionId: allow.optionId } }, cid());
  assert.equal(ok, true, 'vote accepted (200)');
  const result = await pending;
  assert.equal(result.stopReason, 'end_turn');
  await waitForFile(file, 'sdk legacy vote');
});

test('respondToSessionPermission(): reject by kind, no file', async () => {
  const file = workspaceFile('sdk-reject');
  const { pending, req } = await writeUntilPermission(file, 'never');
  const reject = optionByKind(req.data.options, ['reject_once', 'reject_always']);
  const ok = await client.respondToSessionPermission(
    sid(),
    req.data.requestId,
    { outcome: { outcome: 'selected', optionId: reject.optionId } },
    cid(),
  );
  assert.equal(ok, true);
  await pending;
  assert.equal(fs.existsSync(file), false);
});

test('setSessionModel() with a model id the agent reported emits model_switched', async () => {
  // The agent reports its models in the ACP session/new result (`models.currentModelId`,
  // `models.availableModels[].modelId`). qwen serve exposes that state at GET /session/:id/context
  // (`state.models`, DaemonClient.sessionContext); a daemon may also put `models` on the create response.
  let modelId = created.models?.currentModelId ?? created.models?.availableModels?.[0]?.modelId;
  let contextError;
  if (!modelId) {
    try {
      const ctx = await client.sessionContext(sid(), cid());
      modelId = ctx?.state?.models?.currentModelId ?? ctx?.state?.models?.availableModels?.[0]?.modelId;
    } catch (err) {
      contextError = err;
    }
  }
  assert.ok(
    modelId,
    'the daemon does not expose the agent-reported models: expected `models` on the POST /session response ' +
      `or GET /session/:id/context -> state.models (${contextError?.message ?? 'no models in the context'})`,
  );
  const from = events.events.length;
  const result = await client.setSessionModel(sid(), modelId, cid());
  assert.equal(typeof result, 'object');
  const switched = await events.waitFor((e) => e.type === 'model_switched', { what: 'model_switched', from, timeoutMs: T.request });
  assert.equal(switched.data.sessionId, sid());
  assert.equal(switched.data.modelId, modelId);
});

test('setSessionModel() with an unknown model id rejects with a DaemonHttpError', async () => {
  await assert.rejects(client.setSessionModel(sid(), 'no-such-model-e2e', cid()), (err) => {
    assert.ok(err instanceof DaemonHttpError, String(err));
    assert.ok(err.status >= 400, `status ${err.status}`);
    return true;
  });
});

test('heartbeat()', async () => {
  const hb = await client.heartbeat(sid(), cid());
  assert.equal(hb.sessionId, sid());
  assert.equal(typeof hb.lastSeenAt, 'number');
  if (hb.clientId !== undefined) assert.equal(hb.clientId, cid());
});

test('cancel() on an idle session resolves', async () => {
  await client.cancel(sid(), cid());
});

test('cancel() during a pending permission: prompt() ends cancelled', async () => {
  const file = workspaceFile('sdk-cancel');
  const { pending } = await writeUntilPermission(file, 'never');
  await client.cancel(sid(), cid());
  let outcome;
  try {
    outcome = await pending;
  } catch (err) {
    outcome = err; // a turn_error is also an acceptable end
  }
  if (!(outcome instanceof Error)) assert.equal(outcome.stopReason, 'cancelled', JSON.stringify(outcome));
  assert.equal(fs.existsSync(file), false);
  const again = await sdkPrompt('hi');
  assert.equal(again.stopReason, 'end_turn', 'the session still works after a cancel');
});

test("Qwen Code's own ask_user_question (issue #43): answered through respondToSessionPermission with answers; the model's next request carries the answer", async () => {
  // The fake model calls Qwen Code's question tool (ASK); Qwen Code asks through ACP; the answer
  // goes back to Qwen Code, which sends it to the model as the tool's result; the model's last
  // reply quotes that result ("answered: ..."), so the answer is seen to have reached the model.
  const from = events.events.length;
  const pending = sdkPrompt('ASK Which library should we use? | jiff | chrono');
  pending.catch(() => {});
  const req = await events.waitFor(isPermissionRequest(sid()), { what: "Qwen Code's question", from, timeoutMs: T.permission });
  assert.equal(req.data.toolCall?._meta?.qwenInteractionKind, 'user_question', JSON.stringify(req.data));
  const [asked] = req.data.toolCall._meta.qwenQuestions;
  assert.equal(asked.question, 'Which library should we use?', JSON.stringify(asked));
  assert.deepEqual(
    asked.options.map((o) => o.label),
    ['jiff', 'chrono'],
  );
  const submit = optionByKind(req.data.options, ['allow_once', 'allow_always']);
  const ok = await client.respondToSessionPermission(
    sid(),
    req.data.requestId,
    { outcome: { outcome: 'selected', optionId: submit.optionId }, answers: { 0: 'chrono' } },
    cid(),
  );
  assert.equal(ok, true, 'the answer accepted (200)');
  const result = await pending;
  assert.equal(result.stopReason, 'end_turn', JSON.stringify(result));
  const end = await turnCompleteAfter(from, result);
  const turn = events.events.slice(from).filter((e) => e.id !== undefined && e.id < end.id);
  assert.match(agentText(turn), /^answered: .*\*\*Question\*\*: chrono/, 'the model was sent the answer');
});

test("Qwen Code in its Auto mode (auto-edit) writes unasked (issue #42): the change set marks the file unapproved, unapproved_change follows, the audit records it", async () => {
  const file = workspaceFile('sdk-auto-mode');
  const mode = (modeId) =>
    fetch(`${BASE_URL}/session/${sid()}/mode`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-qwen-client-id': cid() },
      body: JSON.stringify({ modeId }),
      signal: AbortSignal.timeout(T.request),
    });
  const set = await mode('auto-edit');
  assert.equal(set.status, 200, await set.text());
  try {
    const from = events.events.length;
    const result = await sdkPrompt(`WRITE ${file} written unasked`);
    assert.equal(result.stopReason, 'end_turn', JSON.stringify(result));
    await waitForFile(file, 'written unasked');
    const end = await turnCompleteAfter(from, result);
    const turn = events.events.slice(from).filter((e) => e.id !== undefined && e.id < end.id);
    assert.ok(!turn.some(isPermissionRequest(sid())), 'Auto mode asked nobody');
    const changes = turn.find((e) => e.type === 'turn_changes');
    assert.ok(changes, `a turn_changes event: ${JSON.stringify(turn.map((e) => e.type))}`);
    const changed = changes.data.files.find((f) => file.endsWith(f.path));
    assert.ok(changed, JSON.stringify(changes.data));
    assert.equal(changed.status, 'added', JSON.stringify(changed));
    assert.equal(changed.unapproved, true, 'nobody approved it');
    assert.ok(changes.data.unapprovedCount >= 1, JSON.stringify(changes.data));
    const unapproved = turn.find((e) => e.type === 'unapproved_change');
    assert.ok(unapproved, 'unapproved_change follows turn_changes');
    assert.ok(unapproved.id > changes.id, 'after turn_changes');
    assert.ok(unapproved.data.paths.some((p) => file.endsWith(p)), JSON.stringify(unapproved.data));
    // The audit's writer commits after the event went out: looked up until it has the entry.
    let entries = [];
    const recorded = async () => {
      const audit = await fetch(`${BASE_URL}/audit?sessionId=${encodeURIComponent(sid())}`, {
        signal: AbortSignal.timeout(T.request),
      });
      assert.equal(audit.status, 200);
      ({ entries } = await audit.json());
      return entries.some((e) => e.requestId === `unapproved-${changes.data.promptId}` && e.status === 'unapproved');
    };
    await until(recorded, T.request, () => `the audit records the unasked write: ${JSON.stringify(entries)}`);
  } finally {
    const back = await mode('default');
    assert.equal(back.status, 200, await back.text());
  }
});

test("the SDK's transcript reducer finds every prompt as a user block, nothing unrecognised, nothing pending", async () => {
  // Everything the subscription got from the session's start: the prompts of the tests above were
  // sent by this client, so only the daemon's user_message_chunk echo can make them user blocks.
  const ui = events.events.flatMap((e) => normalizeDaemonEvent(e));
  const state = reduceDaemonTranscriptEvents(createDaemonTranscriptState(), ui);
  const users = selectTranscriptBlocks(state).filter((b) => b.kind === 'user');
  const texts = users.map((b) => b.text);
  assert.ok(texts.some((t) => t.trim() === 'hi'), JSON.stringify(texts));
  for (const name of ['sdk-session-vote', 'sdk-cancel', 'sdk-auto-mode']) {
    assert.ok(texts.some((t) => t.startsWith('WRITE ') && t.includes(name)), `${name}: ${JSON.stringify(texts)}`);
  }
  // mediatord's own events (docs/differences.md) are shown by the SDK as unrecognised blocks, as
  // it shows any event it does not know: a turn's change set is one; nothing else may be.
  const OWN = new Set(['turn_changes', 'unapproved_change', 'session_rewound']);
  const unknown = selectUnrecognizedDiagnostics(state).filter((d) => !OWN.has(String(d.text).split(' ')[0]));
  assert.deepEqual(unknown, [], 'every event the daemon sent but its own is one the SDK knows');
  assert.deepEqual(selectPendingPermissionBlocks(state), [], 'every permission request was resolved');
});

test('detachSession() for the second client resolves', async () => {
  await client.detachSession(sid(), attached.clientId);
});

test('[spec] shellCommand() without a configured token is refused 401 token_required', async () => {
  await assert.rejects(client.shellCommand(sid(), 'echo hi', { clientId: cid() }), (err) => {
    assert.ok(err instanceof DaemonHttpError, String(err));
    assert.equal(err.status, 401, `status ${err.status} ${JSON.stringify(err.body)}`);
    assert.equal(err.body?.code, 'token_required');
    return true;
  });
});

test('closeSession(): the subscription sees session_closed and ends; a second close is fine', async () => {
  const from = events.events.length;
  await client.closeSession(sid(), cid());
  const closed = await events.waitFor((e) => e.type === 'session_closed', { what: 'session_closed', from, timeoutMs: T.streamEnd });
  assert.equal(closed.data.sessionId, sid());
  await events.waitEnd();
  assert.equal(events.error, undefined, `subscription error: ${events.error}`);
  await client.closeSession(sid(), cid()); // 404 is success for the SDK
  await assert.rejects(client.heartbeat(sid(), cid()), (err) => err instanceof DaemonHttpError && err.status === 404);
});
