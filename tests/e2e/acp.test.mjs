// `/acp` with clients the project does not write, on the built-in demo agent (run.sh's `acp-demo`
// phase): the official ACP TypeScript SDK (@agentclientprotocol/sdk) over WebSocket, over Streamable
// HTTP, and over stdio through `mediatord connect` (as an editor that only launches stdio agents
// runs it), and @qwen-code/sdk's negotiateTransport + DaemonClient over `acp-ws`. Each drives a
// prompt whose write needs permission, answers the request, and the file is on disk. The official
// SDK also deletes and closes a session, cancels a queued and a running prompt with
// `$/cancel_request` (its question withdrawn the same way), and meets a wrong `Acp-Protocol-Version`
// and a batch (#45).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http2 from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { test } from 'node:test';
import { client, methods, ndJsonStream } from '@agentclientprotocol/sdk';
import { createHttpStream } from '@agentclientprotocol/sdk/experimental/http-client';
import { createWebSocketStream } from '@agentclientprotocol/sdk/experimental/ws-client';
import { DaemonClient } from '@qwen-code/sdk/daemon';
import { negotiateTransport } from '@qwen-code/sdk/daemon/transports';
import { BASE_URL, T, WORKSPACE, agentText, api, until, waitForFile, withTimeout, workspaceFile } from './lib.mjs';

const WS_URL = `${BASE_URL.replace(/^http/, 'ws')}/acp`;

/**
 * An ACP client (the official SDK's) on `stream`: it creates a session, prompts the demo agent to
 * write a file, allows the permission request it is sent, and returns what it saw.
 */
async function writeThroughAcp(stream, label) {
  const file = workspaceFile(label);
  const updates = [];
  const asked = [];
  const app = client({ name: `e2e-${label}` })
    .onNotification(methods.client.session.update, ({ params }) => {
      updates.push(params.update);
    })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      asked.push(params);
      const allow = params.options.find((o) => o.kind === 'allow_once');
      return { outcome: { outcome: 'selected', optionId: allow.optionId } };
    });
  const run = app.connectWith(stream, async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    const session = await ctx.request(methods.agent.session.new, { cwd: WORKSPACE, mcpServers: [] });
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId: session.sessionId,
      prompt: [{ type: 'text', text: `write ${path.basename(file)} written over ${label}` }],
    });
    return { init, session, result };
  });
  const done = await withTimeout(run, T.turn, `${label}: initialize, session/new and a WRITE turn`);
  return { ...done, updates, asked, file };
}

function assertWrote(label, done) {
  assert.equal(done.init.protocolVersion, 1);
  assert.equal(done.init.agentCapabilities.loadSession, true);
  assert.equal(done.result.stopReason, 'end_turn', JSON.stringify(done.result));
  assert.equal(done.asked.length, 1, `one permission request: ${JSON.stringify(done.asked)}`);
  assert.equal(done.asked[0].sessionId, done.session.sessionId);
  assert.ok(
    done.updates.some((u) => u.sessionUpdate === 'tool_call'),
    `the tool call was announced: ${JSON.stringify(done.updates.map((u) => u.sessionUpdate))}`,
  );
}

test('the ACP TypeScript SDK over WebSocket: a WRITE turn, its permission allowed, the file on disk', async () => {
  const done = await writeThroughAcp(createWebSocketStream(WS_URL, { WebSocket: globalThis.WebSocket }), 'ws');
  assertWrote('ws', done);
  await waitForFile(done.file, 'written over ws');
  // The vote is the daemon's: in the audit, cast over ACP.
  const audit = await api('GET', `/session/${encodeURIComponent(done.session.sessionId)}/permissions?audit=1`);
  assert.equal(audit.json.audit.at(-1).via, 'acp', audit.text);
});

test('the ACP TypeScript SDK over Streamable HTTP: a WRITE turn, its permission allowed, the file on disk', async () => {
  const done = await writeThroughAcp(createHttpStream(`${BASE_URL}/acp`), 'http');
  assertWrote('http', done);
  await waitForFile(done.file, 'written over http');
});

/**
 * A `fetch` over one HTTP/2 connection with prior knowledge (h2c), made with Node's own `http2`
 * module: Node's `fetch` speaks only HTTP/1.1 (its undici offers h2 only over TLS, by ALPN), and the
 * transport RFD says Streamable HTTP is served over HTTP/2. What the SDK asks of `fetch` (method,
 * headers, a string body, an abort signal, a streamed response body) is all it does.
 */
function h2cFetch(origin) {
  const session = http2.connect(origin);
  session.on('error', () => {}); // each request reports its own failure
  const fetch = async (input, init = {}) => {
    const url = new URL(typeof input === 'string' ? input : input.url);
    const headers = { ':method': init.method ?? 'GET', ':path': `${url.pathname}${url.search}` };
    for (const [k, v] of new Headers(init.headers ?? {})) headers[k] = v;
    const body = init.body === undefined || init.body === null ? null : Buffer.from(await new Response(init.body).arrayBuffer());
    const req = session.request(headers, { endStream: body === null });
    if (body !== null) req.end(body);
    init.signal?.addEventListener('abort', () => req.close(http2.constants.NGHTTP2_CANCEL), { once: true });
    const head = await new Promise((resolve, reject) => {
      req.once('response', resolve);
      req.once('error', reject);
    });
    const status = head[':status'];
    const out = new Headers();
    for (const [k, v] of Object.entries(head)) {
      if (!k.startsWith(':')) for (const one of [v].flat()) out.append(k, String(one));
    }
    return new Response(status === 204 || status === 304 ? null : Readable.toWeb(req), { status, headers: out });
  };
  return { fetch, close: () => session.close() };
}

test('the ACP TypeScript SDK over Streamable HTTP on HTTP/2 (h2c): a WRITE turn, its permission allowed, the file on disk', async () => {
  const h2 = h2cFetch(BASE_URL);
  try {
    const done = await writeThroughAcp(createHttpStream(`${BASE_URL}/acp`, { fetch: h2.fetch }), 'h2');
    assertWrote('h2', done);
    await waitForFile(done.file, 'written over h2');
  } finally {
    h2.close();
  }
});

test('the ACP TypeScript SDK over Streamable HTTP: a fresh connection loads a session, gets its history, and writes', async () => {
  // The first connection makes the session and its history, then ends (an editor restarting).
  const first = await writeThroughAcp(createHttpStream(`${BASE_URL}/acp`), 'http-first');
  assertWrote('http-first', first);
  await waitForFile(first.file, 'written over http-first');
  const sessionId = first.session.sessionId;

  // A fresh connection: the SDK opens the session's stream (GET with Acp-Session-Id) before it
  // POSTs session/load, as the transport RFD's reconnect flow does.
  const file = workspaceFile('http-load');
  const updates = [];
  const asked = [];
  const app = client({ name: 'e2e-http-load' })
    .onNotification(methods.client.session.update, ({ params }) => {
      if (params.sessionId === sessionId) updates.push(params.update);
    })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      asked.push(params);
      const allow = params.options.find((o) => o.kind === 'allow_once');
      return { outcome: { outcome: 'selected', optionId: allow.optionId } };
    });
  const replayed = () => JSON.stringify(updates).includes(path.basename(first.file));
  const run = app.connectWith(createHttpStream(`${BASE_URL}/acp`), async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    assert.equal(init.agentCapabilities.loadSession, true);
    await ctx.request(methods.agent.session.load, { sessionId, cwd: WORKSPACE, mcpServers: [] });
    // The answer comes on the connection's stream, the replay on the session's: wait for it.
    await until(replayed, T.request, () => `the replayed first turn: ${JSON.stringify(updates)}`);
    const replay = updates.length;
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: 'text', text: `write ${path.basename(file)} written after session/load` }],
    });
    return { replay, result };
  });
  const done = await withTimeout(run, T.turn, 'initialize, session/load and a WRITE turn over a fresh connection');
  const history = updates.slice(0, done.replay);
  assert.ok(
    history.some((u) => u.sessionUpdate === 'tool_call'),
    `the first turn's tool call was replayed: ${JSON.stringify(history.map((u) => u.sessionUpdate))}`,
  );
  assert.equal(done.result.stopReason, 'end_turn', JSON.stringify(done.result));
  assert.equal(asked.length, 1, `one permission request (the first turn's was decided): ${JSON.stringify(asked)}`);
  assert.equal(asked[0].sessionId, sessionId);
  await waitForFile(file, 'written after session/load');
});

// `mediatord connect` would use a login `mediatord login` saved for this daemon: a configuration
// directory nobody creates, so it finds none (the user's own are never read by a test).
const CONNECT_ENV = { ...process.env, XDG_CONFIG_HOME: path.join(os.tmpdir(), `mediatord-e2e-no-logins-${process.pid}`) };

test('the ACP TypeScript SDK over stdio through `mediatord connect`: a WRITE turn, its permission allowed, the file on disk', async () => {
  const binary = process.env.E2E_MEDIATORD;
  assert.ok(binary, 'E2E_MEDIATORD names the mediatord binary (run.sh sets it)');
  const child = spawn(binary, ['connect', BASE_URL, '--client-id', 'e2e-stdio-editor'], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: CONNECT_ENV,
  });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  try {
    const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
    const done = await writeThroughAcp(stream, 'stdio');
    assertWrote('stdio', done);
    await waitForFile(done.file, 'written over stdio');
  } finally {
    child.stdin.end();
  }
  // The editor closing its side ends connect cleanly.
  assert.equal(await withTimeout(exited, T.request, 'mediatord connect to exit'), 0);
});

test('the ACP TypeScript SDK: session/delete refuses a live session, session/close ends it, then session/delete succeeds', async () => {
  const app = client({ name: 'e2e-delete' });
  const run = app.connectWith(createWebSocketStream(WS_URL, { WebSocket: globalThis.WebSocket }), async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    assert.deepEqual(init.agentCapabilities.sessionCapabilities.delete, {});
    assert.deepEqual(init.agentCapabilities.sessionCapabilities.close, {});
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: WORKSPACE, mcpServers: [] });
    const refused = await ctx.request(methods.agent.session.delete, { sessionId }).then(
      () => null,
      (e) => e,
    );
    assert.ok(refused, 'deleting a live session is refused');
    assert.equal(refused.code, -32004, JSON.stringify(refused));
    assert.equal(refused.data?.code, 'session_live', JSON.stringify(refused));
    assert.deepEqual(await ctx.request(methods.agent.session.close, { sessionId }), {});
    assert.deepEqual(await ctx.request(methods.agent.session.delete, { sessionId }), {});
    const listed = await ctx.request(methods.agent.session.list, {});
    assert.ok(!listed.sessions.some((s) => s.sessionId === sessionId), JSON.stringify(listed));
  });
  await withTimeout(run, T.turn, 'session/delete, session/close, session/delete');
});

test('the ACP TypeScript SDK: $/cancel_request of a queued prompt and of a running one withdraws its permission question', async () => {
  const asked = [];
  const app = client({ name: 'e2e-cancel' }).onRequest(
    methods.client.session.requestPermission,
    ({ params, signal }) =>
      // Never answered by the user: the daemon withdraws it ($/cancel_request) when the turn is cancelled.
      new Promise((resolve) => {
        asked.push({ params, signal });
        signal.addEventListener('abort', () => resolve({ outcome: { outcome: 'cancelled' } }));
      }),
  );
  const run = app.connectWith(createWebSocketStream(WS_URL, { WebSocket: globalThis.WebSocket }), async (ctx) => {
    await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: WORKSPACE, mcpServers: [] });
    const first = new AbortController();
    const running = ctx.request(
      methods.agent.session.prompt,
      { sessionId, prompt: [{ type: 'text', text: `write ${path.basename(workspaceFile('cancel-running'))} never` }] },
      { cancellationSignal: first.signal },
    );
    await until(() => asked.length === 1, T.request, () => 'the permission question');
    const second = new AbortController();
    const queued = ctx.request(
      methods.agent.session.prompt,
      { sessionId, prompt: [{ type: 'text', text: 'queued behind the question' }] },
      { cancellationSignal: second.signal },
    );
    second.abort();
    const cut = await queued.then(
      () => null,
      (e) => e,
    );
    assert.equal(cut?.code, -32800, `the queued prompt is answered Request cancelled: ${JSON.stringify(cut)}`);
    assert.equal(asked[0].signal.aborted, false, 'the running turn goes on');
    first.abort();
    const stopped = await running;
    assert.equal(stopped.stopReason, 'cancelled', JSON.stringify(stopped));
    assert.equal(asked[0].signal.aborted, true, 'the daemon withdrew its question with $/cancel_request');
  });
  await withTimeout(run, T.turn, 'two prompts, each cancelled by $/cancel_request');
});

test('Streamable HTTP: a wrong Acp-Protocol-Version is refused 400, and a batch is answered 501 as the transport RFD says', async () => {
  const wrong = client({ name: 'e2e-version' });
  const run = wrong.connectWith(
    createHttpStream(`${BASE_URL}/acp`, { headers: { 'Acp-Protocol-Version': '2' } }),
    async (ctx) => {
      await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
      return ctx.request(methods.agent.session.list, {});
    },
  );
  const refused = await withTimeout(
    run.then(
      () => null,
      (e) => e,
    ),
    T.request,
    'a request with a wrong Acp-Protocol-Version',
  );
  assert.ok(refused, 'the SDK sees the refusal');
  assert.match(String(refused?.message ?? refused), /400|unsupported_protocol_version|Protocol-Version/i, String(refused));

  const init = await fetch(`${BASE_URL}/acp`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 1 } }),
  });
  assert.equal(init.status, 200);
  assert.equal(init.headers.get('acp-protocol-version'), '1');
  const connection = init.headers.get('acp-connection-id');
  const batch = await fetch(`${BASE_URL}/acp`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Acp-Connection-Id': connection },
    body: JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'session/list', params: {} }]),
  });
  assert.equal(batch.status, 501);
  assert.equal((await batch.json()).code, 'batch_not_supported');
  await fetch(`${BASE_URL}/acp`, { method: 'DELETE', headers: { 'Acp-Connection-Id': connection } });
});

test('@qwen-code/sdk: negotiateTransport picks acp-ws, and the DaemonClient flow works over it', async () => {
  const transport = await negotiateTransport(BASE_URL);
  assert.equal(transport.type, 'acp-ws');
  const sdk = new DaemonClient({ baseUrl: BASE_URL, transport, fetchTimeoutMs: T.request });
  try {
    const caps = await sdk.capabilities();
    assert.deepEqual(caps.transports, ['rest', 'acp-ws', 'acp-http']);
    const created = await sdk.createOrAttachSession({ workspaceCwd: WORKSPACE }, 'qwen-sdk-acp');
    assert.equal(created.clientId, 'qwen-sdk-acp');
    const sid = created.sessionId;
    const controller = new AbortController();
    const seen = [];
    let resolvePermission;
    const permission = new Promise((resolve) => {
      resolvePermission = resolve;
    });
    const pump = (async () => {
      for await (const ev of sdk.subscribeEvents(sid, { signal: controller.signal })) {
        seen.push(ev);
        if (ev.type === 'permission_request') resolvePermission(ev.data);
      }
    })().catch(() => {});
    const file = workspaceFile('qwen-sdk');
    const turn = sdk.prompt(
      sid,
      { prompt: [{ type: 'text', text: `write ${path.basename(file)} written by the qwen sdk` }] },
      AbortSignal.timeout(T.turn),
      'qwen-sdk-acp',
    );
    turn.catch(() => {});
    const request = await withTimeout(permission, T.permission, 'permission_request over acp-ws');
    const allow = request.options.find((o) => o.kind === 'allow_once');
    const voted = await sdk.respondToSessionPermission(
      sid,
      request.requestId,
      { outcome: { outcome: 'selected', optionId: allow.optionId } },
      'qwen-sdk-acp',
    );
    assert.equal(voted, true);
    const result = await withTimeout(turn, T.turn, 'the prompt over acp-ws');
    assert.equal(result.stopReason, 'end_turn', JSON.stringify(result));
    await waitForFile(file, 'written by the qwen sdk');
    // Its own prompt's echo reached it (the SDK's transports read sessions like the REST stream).
    assert.ok(seen.some((e) => e.type === 'user_message_chunk'), JSON.stringify(seen.map((e) => e.type)));
    assert.ok(seen.some((e) => e.type === 'permission_resolved'));
    controller.abort();
    await pump;
  } finally {
    transport.dispose();
  }
});

/**
 * An ACP client (the official SDK's) that advertised elicitation (form and URL) on `stream`: it
 * creates a session, prompts the demo agent with each of `prompts` in turn, answers every
 * `elicitation/create` with `answer(params)`, and returns what it was asked, told and said.
 */
async function elicitedThroughAcp(stream, label, prompts, answer) {
  const updates = [];
  const asked = [];
  const completed = [];
  const app = client({ name: `e2e-${label}` })
    .onNotification(methods.client.session.update, ({ params }) => {
      updates.push(params.update);
    })
    .onNotification(methods.client.elicitation.complete, ({ params }) => {
      completed.push(params);
    })
    .onRequest(methods.client.elicitation.create, ({ params }) => {
      asked.push(params);
      return answer(params);
    });
  const run = app.connectWith(stream, async (ctx) => {
    await ctx.request(methods.agent.initialize, {
      protocolVersion: 1,
      clientCapabilities: { elicitation: { form: {}, url: {} } },
    });
    const session = await ctx.request(methods.agent.session.new, { cwd: WORKSPACE, mcpServers: [] });
    const results = [];
    for (const text of prompts) {
      results.push(
        await ctx.request(methods.agent.session.prompt, {
          sessionId: session.sessionId,
          prompt: [{ type: 'text', text }],
        }),
      );
    }
    // The agent's elicitation/complete follows its accepted URL before its reply; the
    // notification is on its way with the reply's updates.
    await until(() => completed.length > 0 || !asked.some((a) => a.mode === 'url'), T.request, () => 'elicitation/complete');
    return { session, results };
  });
  const done = await withTimeout(run, T.turn, `${label}: initialize, session/new and questions`);
  const said = updates
    .filter((u) => u.sessionUpdate === 'agent_message_chunk')
    .map((u) => u.content?.text ?? '')
    .join('');
  return { ...done, asked, completed, said };
}

/** Answers a form with typed content (what a UI built from the schema sends), a URL by opening it. */
function answerAsAPerson(params) {
  if (params.mode === 'url') return { action: 'accept' };
  return { action: 'accept', content: { name: 'api', replicas: 3, region: 'eu', agree: true, token: 'sk-e2e' } };
}

function assertElicited(label, done) {
  const [form, url] = done.asked;
  assert.equal(form.mode, 'form', JSON.stringify(done.asked));
  assert.equal(form.requestedSchema.properties.replicas.type, 'integer');
  assert.deepEqual(form.requestedSchema.required, ['name', 'replicas']);
  assert.ok(
    done.said.includes('action: accept content: {"agree":true,"name":"api","region":"eu","replicas":3,"token":"sk-e2e"}'),
    `${label}: the agent got exactly the answer: ${done.said}`,
  );
  assert.equal(url.mode, 'url');
  assert.equal(url.url, 'https://login.example/auth');
  assert.deepEqual(
    done.completed.map((c) => c.elicitationId),
    [url.elicitationId],
    `${label}: elicitation/complete names the id the client was given`,
  );
  for (const r of done.results) assert.equal(r.stopReason, 'end_turn', JSON.stringify(r));
}

test('the ACP TypeScript SDK over WebSocket answers an elicitation form and a URL (issue #43)', async () => {
  const stream = createWebSocketStream(WS_URL, { WebSocket: globalThis.WebSocket });
  const done = await elicitedThroughAcp(stream, 'elicit-ws', ['elicit', 'elicit-url https://login.example/auth'], answerAsAPerson);
  assertElicited('ws', done);
  const audit = await api('GET', `/session/${encodeURIComponent(done.session.sessionId)}/permissions?audit=1`);
  const form = audit.json.audit.find((e) => e.question?.form === 'form');
  assert.equal(form.via, 'acp', audit.text);
  assert.equal(form.answers.token, '[redacted]', audit.text);
  assert.ok(!audit.text.includes('sk-e2e'), 'a secret answer never leaves the agent');
});

test('the ACP TypeScript SDK over stdio through `mediatord connect` answers an elicitation (issue #43)', async () => {
  const binary = process.env.E2E_MEDIATORD;
  assert.ok(binary, 'E2E_MEDIATORD names the mediatord binary (run.sh sets it)');
  const child = spawn(binary, ['connect', BASE_URL, '--client-id', 'e2e-elicit-editor'], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: CONNECT_ENV,
  });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  try {
    const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
    const done = await elicitedThroughAcp(
      stream,
      'elicit-stdio',
      ['elicit', 'elicit-url https://login.example/auth'],
      answerAsAPerson,
    );
    assertElicited('stdio', done);
  } finally {
    child.stdin.end();
  }
  assert.equal(await withTimeout(exited, T.request, 'mediatord connect to exit'), 0);
});

test("@qwen-code/sdk: Qwen Code's question answered by respondToSessionPermission with answers (issue #43)", async () => {
  const sdk = new DaemonClient({ baseUrl: BASE_URL, fetchTimeoutMs: T.request });
  const created = await sdk.createOrAttachSession({ workspaceCwd: WORKSPACE }, 'qwen-sdk-question');
  const sid = created.sessionId;
  const controller = new AbortController();
  const seen = [];
  let resolveQuestion;
  const question = new Promise((resolve) => {
    resolveQuestion = resolve;
  });
  const pump = (async () => {
    for await (const ev of sdk.subscribeEvents(sid, { signal: controller.signal })) {
      seen.push(ev);
      if (ev.type === 'permission_request') resolveQuestion(ev.data);
    }
  })().catch(() => {});
  const turn = sdk.prompt(sid, { prompt: [{ type: 'text', text: 'ask' }] }, AbortSignal.timeout(T.turn), 'qwen-sdk-question');
  turn.catch(() => {});
  const request = await withTimeout(question, T.permission, 'the question as a permission_request');
  assert.equal(request.toolCall._meta.qwenInteractionKind, 'user_question');
  const [library, features] = request.toolCall._meta.qwenQuestions;
  assert.equal(library.header, 'Library');
  assert.equal(features.multiSelect, true);
  const submit = request.options.find((o) => o.kind === 'allow_once');
  const voted = await sdk.respondToSessionPermission(
    sid,
    request.requestId,
    { outcome: { outcome: 'selected', optionId: submit.optionId }, answers: { 0: 'jiff', 1: 'serde, tz' } },
    'qwen-sdk-question',
  );
  assert.equal(voted, true);
  const result = await withTimeout(turn, T.turn, 'the question turn');
  assert.equal(result.stopReason, 'end_turn', JSON.stringify(result));
  const answered = () => agentText(seen).includes('answers: {"0":"jiff","1":"serde, tz"}');
  await until(answered, T.request, () => `the agent's reply: ${agentText(seen)}`);
  controller.abort();
  await pump;
});
