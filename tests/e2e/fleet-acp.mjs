// `/acp` over Streamable HTTP through a fleet, with the official ACP TypeScript SDK's client
// (@agentclientprotocol/sdk): tests/e2e.rs starts two daemons on one throwaway PostgreSQL (A and B,
// the demo agent behind each) and runs this file with `node --test` once `run.sh` installed the SDK.
// The client talks only to B, about a session A holds: its `initialize` names the session, so the
// connection is opened on A, and every later request of the connection is relayed to A by its
// `Acp-Connection-Id`. The demo agent's write asks permission, the client allows it, A's agent
// writes the file, and B never starts an agent (docs/protocol.md §17.3).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { client, methods } from '@agentclientprotocol/sdk';
import { createHttpStream } from '@agentclientprotocol/sdk/experimental/http-client';

function env(name) {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: tests/e2e.rs runs this file`);
  return v;
}

const A = env('E2E_FLEET_A');
const B = env('E2E_FLEET_B');
const WORKSPACE = env('E2E_FLEET_WORKSPACE');
/** Every wait is bounded: a turn of the demo agent takes milliseconds. */
const TURN_MS = 60_000;

function within(promise, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

async function json(method, url, body) {
  const res = await fetch(url, {
    method,
    headers: { 'content-type': 'application/json', 'x-qwen-client-id': 'alice' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(TURN_MS),
  });
  return { status: res.status, body: await res.json() };
}

test('the ACP SDK over Streamable HTTP, through B, drives a session A holds: the permission allowed, the file on disk', async () => {
  const created = await json('POST', `${A}/session`, {});
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const sid = created.body.sessionId;

  // A client that knows which session it is for names it on `initialize` (the only message sent
  // before the connection has an id), so the connection lives where the session does.
  const naming = (url, init) => {
    const headers = new Headers(init.headers);
    if (init.method === 'POST' && !headers.has('acp-connection-id')) {
      headers.set('acp-session-id', sid);
    }
    return fetch(url, { ...init, headers });
  };
  const file = path.join(WORKSPACE, 'fleet-sdk.txt');
  const asked = [];
  const app = client({ name: 'e2e-fleet' }).onRequest(methods.client.session.requestPermission, ({ params }) => {
    asked.push(params);
    const allow = params.options.find((o) => o.kind === 'allow_once');
    return { outcome: { outcome: 'selected', optionId: allow.optionId } };
  });
  const run = app.connectWith(createHttpStream(`${B}/acp`, { fetch: naming }), async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    // Attach A's session by id (`_meta["qwen-code/sessionId"]`, docs/protocol.md §16.3).
    const attached = await ctx.request(methods.agent.session.new, {
      cwd: WORKSPACE,
      mcpServers: [],
      _meta: { 'qwen-code/sessionId': sid },
    });
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId: sid,
      prompt: [{ type: 'text', text: `write ${path.basename(file)} written through b` }],
    });
    return { init, attached, result };
  });
  const done = await within(run, TURN_MS, 'initialize, the attach and a WRITE turn through B');
  assert.equal(done.init.protocolVersion, 1);
  assert.equal(done.attached.sessionId, sid, JSON.stringify(done.attached));
  assert.equal(done.result.stopReason, 'end_turn', JSON.stringify(done.result));
  assert.equal(asked.length, 1, JSON.stringify(asked));
  assert.equal(asked[0].sessionId, sid);
  assert.equal(fs.readFileSync(file, 'utf8'), 'written through b');

  // The vote is A's, cast over ACP; B started no agent.
  const audit = await json('GET', `${A}/session/${encodeURIComponent(sid)}/permissions?audit=1`);
  assert.equal(audit.body.audit.at(-1).via, 'acp', JSON.stringify(audit.body));
  const agents = await json('GET', `${B}/agents`);
  assert.equal(agents.body.agents[0].running, false, JSON.stringify(agents.body));
});
