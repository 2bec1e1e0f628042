// One daemon running every real agent of E2E_AGENTS at once (run.sh's `agents-all` phase): the config
// file's agents map names each after itself and gives it its own environment (none of which is in
// the daemon's, so each agent reaches the fake model only through its own settings). A session on
// each, driven at the same time; GET /agents; an unknown name; and the shutdown leaving no process.
// Nothing here is agent-specific: options are chosen by ACP kind, files by path.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, test } from 'node:test';
import {
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
  sigtermLeavesNoAgent,
  startPrompt,
  vote,
  waitForFile,
  workspaceFile,
} from './lib.mjs';

const AGENTS = (process.env.E2E_AGENTS || '').split(/\s+/).filter(Boolean);
const streams = [];
const sessions = new Map(); // agent -> {s, stream}

after(() => {
  for (const s of streams) s.close();
});

async function agentsList() {
  const res = await api('GET', '/agents');
  assert.equal(res.status, 200, show(res));
  assert.deepEqual(
    res.json.agents.map((a) => a.name),
    AGENTS,
    `GET /agents lists the configured agents in the config file's order: ${res.text}`,
  );
  return res.json.agents;
}

test('GET /agents lists every configured agent, the first the default, none running yet; capabilities name them', async () => {
  assert.ok(AGENTS.length >= 2, `E2E_AGENTS names at least two agents: ${AGENTS}`);
  const list = await agentsList();
  for (const [i, a] of list.entries()) {
    assert.equal(a.default, i === 0, `${a.name}: only the first is the default`);
    assert.equal(a.running, false, `${a.name} is started by its first session, not before`);
    assert.deepEqual(a.workspaces, []);
    assert.equal(a.initialize, null);
    assert.equal(a.found, true, `${a.name}: ${a.error}`);
    assert.ok(a.program.startsWith('/') && !a.program.includes(' '), `the program only, no arguments: ${a.program}`);
  }
  const caps = await api('GET', '/capabilities');
  assert.ok(caps.json.features.includes('agents'), caps.text);
  assert.deepEqual(caps.json.agents, AGENTS);
  assert.equal(caps.json.agent.name, AGENTS[0]);
});

test('an unknown agent is refused: 400 unknown_agent listing the configured ones', async () => {
  const res = await api('POST', '/session', { body: { cwd: WORKSPACE, agent: 'no-such-agent' }, clientId: 'e2e-all' });
  assert.equal(res.status, 400, show(res));
  assert.equal(res.json.code, 'unknown_agent');
  assert.deepEqual(res.json.agents, AGENTS);
});

test('a session on each agent at once: each WRITE asks its own permission, each vote writes its file', async (t) => {
  await Promise.all(
    AGENTS.map(async (agent) => {
      const s = await createSession(`e2e-all-${agent}`, { agent, sessionScope: 'thread' });
      assert.equal(s.agent, agent, `the session runs on ${agent}`);
      const stream = await EventStream.open(s.sessionId, { clientId: s.clientId, lastEventId: 0, label: `all:${agent}` });
      streams.push(stream);
      assert.equal(stream.status, 200, stream.errorBody);
      sessions.set(agent, { s, stream });
    }),
  );
  assert.equal(new Set([...sessions.values()].map(({ s }) => s.sessionId)).size, AGENTS.length, 'one session each');

  // Every agent gets its WRITE at the same time; each asks, each is allowed, each writes its file.
  const files = new Map(AGENTS.map((agent) => [agent, workspaceFile(`all-${agent}`)]));
  await Promise.all(
    AGENTS.map(async (agent) => {
      const { s, stream } = sessions.get(agent);
      const file = files.get(agent);
      const text = `written by ${agent} beside the others`;
      const from = stream.events.length;
      const p = await startPrompt(s.sessionId, `WRITE ${file} ${text}`, s.clientId);
      const req = await stream.waitFor(isPermissionRequest(s.sessionId), { what: `${agent}'s permission_request`, timeoutMs: T.permission, from });
      assert.ok(JSON.stringify(req.data.toolCall).includes(file), `${agent} asks about its own file: ${JSON.stringify(req.data.toolCall)}`);
      assert.equal(fs.existsSync(file), false, `${agent}: nothing written before the vote`);
      const res = await vote(s.sessionId, req.data.requestId, optionByKind(req.data.options, ['allow_once']).optionId, s.clientId);
      assert.equal(res.status, 200, `${agent}: vote: ${show(res)}`);
      const end = await stream.waitFor(isTurnEnd(p.promptId), { what: `end of ${agent}'s WRITE turn`, from });
      assert.equal(end.type, 'turn_complete', `${agent}: ${JSON.stringify(end.data)}`);
      assert.equal(end.data.stopReason, 'end_turn');
      await waitForFile(file, text);
      const status = await api('GET', `/session/${encodeURIComponent(s.sessionId)}`);
      assert.equal(status.json.agent, agent, show(status));
    }),
  );

  // And a plain text turn on each, at the same time: every one answers with the model's text.
  await Promise.all(
    AGENTS.map(async (agent) => {
      const { s, stream } = sessions.get(agent);
      const from = stream.events.length;
      const p = await startPrompt(s.sessionId, 'hi', s.clientId);
      const end = await stream.waitFor(isTurnEnd(p.promptId), { what: `end of ${agent}'s text turn`, from });
      assert.equal(end.type, 'turn_complete', `${agent}: ${JSON.stringify(end.data)}`);
      const turn = stream.events.slice(from).filter((e) => e.id !== undefined && e.id < end.id);
      assert.equal(agentText(turn), FAKE_TEXT, `${agent}'s answer: ${stream.summary(20)}`);
    }),
  );
  t.diagnostic(`sessions: ${[...sessions].map(([a, { s }]) => `${a}=${s.sessionId}`).join(', ')}`);
});

test('GET /agents: each agent runs in the workspace and shows what its initialize reported', async (t) => {
  const ws = fs.realpathSync(WORKSPACE);
  for (const a of await agentsList()) {
    assert.equal(a.running, true, `${a.name} runs: ${JSON.stringify(a)}`);
    assert.deepEqual(a.workspaces, [ws]);
    const init = a.initialize;
    assert.equal(typeof init, 'object', `${a.name}: ${JSON.stringify(a)}`);
    assert.equal(init.protocolVersion, 1, `${a.name} speaks ACP v1: ${JSON.stringify(init)}`);
    assert.equal(typeof init.agentCapabilities, 'object', `${a.name}: ${JSON.stringify(init)}`);
    assert.ok(Array.isArray(init.authMethods ?? []), `${a.name}: ${JSON.stringify(init)}`);
    t.diagnostic(
      `${a.name}: agentInfo ${JSON.stringify(init.agentInfo ?? null)}, loadSession ${init.agentCapabilities.loadSession}, ` +
        `promptCapabilities ${JSON.stringify(init.agentCapabilities.promptCapabilities ?? null)}, ` +
        `authMethods ${JSON.stringify((init.authMethods ?? []).map((m) => m.id))}`,
    );
  }
});

test('SIGTERM: the daemon drains every agent, ends the streams, exits, and no agent process is left', async (t) => {
  assert.equal(sessions.size, AGENTS.length, 'needs the sessions of the earlier test');
  await sigtermLeavesNoAgent(
    t,
    [...sessions.values()].map(({ stream }) => stream),
  );
});
