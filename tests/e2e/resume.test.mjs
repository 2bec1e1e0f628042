// Resume across a daemon restart with a real agent (docs/agents.md, docs/protocol.md 14.3). run.sh
// runs this file twice against one agent, E2E_AGENT, with one HOME (so one state directory, and the
// agent's own session files) and a daemon restarted in between (SIGTERM, then a new daemon):
//
//   E2E_RESUME_STEP=create  a session, a text turn answered; its id and last event id are saved
//   E2E_RESUME_STEP=resume  the session is dormant; POST /session/:id/resume brings it back on a
//                           fresh agent with ACP session/load; a second prompt on the same id is
//                           answered, its events' ids continuing after the first daemon's
//
// Gemini CLI names its session file after the UTC minute and the session id's first 8 characters
// (`chats/session-YYYY-MM-DDTHH-MM-<id8>.jsonl`); its session/load starts a new recording first, which
// in the same minute is that very file, so the conversation it then looks for is gone ("No previous
// sessions found for this project."). The test accepts exactly that refusal, and only when the
// create and the resume fell in the same minute; across a minute boundary it must resume like the others.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import { EventStream, FAKE_TEXT, agentText, api, createSession, isTurnEnd, show, startPrompt } from './lib.mjs';

const AGENT = process.env.E2E_AGENT || 'qwen';
const STEP = process.env.E2E_RESUME_STEP;
// The phase's directory (beside the agents' HOME) outlives the daemon between the two steps.
const SAVED = path.join(path.dirname(process.env.E2E_AGENT_HOME || '.'), 'resume-session.json');
const enc = encodeURIComponent;
const streams = [];

after(() => {
  for (const s of streams) s.close();
});

async function textTurn(sessionId, clientId, lastEventId, label) {
  const stream = await EventStream.open(sessionId, { clientId, lastEventId, label: `${AGENT}:${label}` });
  streams.push(stream);
  assert.equal(stream.status, 200, `GET /session/:id/events: ${stream.errorBody}`);
  const from = stream.events.length;
  const p = await startPrompt(sessionId, 'hi', clientId);
  const end = await stream.waitFor(isTurnEnd(p.promptId), { what: `the end of the ${label} turn`, from });
  assert.equal(end.type, 'turn_complete', JSON.stringify(end.data));
  const turn = stream.events.slice(from).filter((e) => e.id !== undefined && e.id < end.id);
  assert.equal(agentText(turn), FAKE_TEXT, `the turn is the model's text answer: ${stream.summary(20)}`);
  return { end, turn };
}

test(`[${AGENT}] resume across a restart, step ${STEP}`, async (t) => {
  if (STEP === 'create') {
    const s = await createSession(`e2e-${AGENT}-resume`, { sessionScope: 'thread' });
    const { end } = await textTurn(s.sessionId, s.clientId, 0, 'first');
    fs.writeFileSync(SAVED, JSON.stringify({ sessionId: s.sessionId, clientId: s.clientId, lastEventId: end.id, at: Date.now() }));
    return;
  }
  assert.equal(STEP, 'resume', 'E2E_RESUME_STEP is create or resume');
  const saved = JSON.parse(fs.readFileSync(SAVED, 'utf8'));
  const { sessionId, clientId } = saved;
  const sameMinute = Math.floor(saved.at / 60_000) === Math.floor(Date.now() / 60_000);
  const res = await api('POST', `/session/${enc(sessionId)}/resume`, { clientId, timeoutMs: 90_000 });
  if (AGENT === 'gemini' && res.status !== 200) {
    assert.ok(sameMinute, `Gemini CLI refused a resume across a minute boundary: ${show(res)}`);
    assert.equal(res.json?.code, 'agent_start_failed', show(res));
    assert.match(res.text, /No previous sessions found/, show(res));
    t.diagnostic('Gemini CLI: the create and the resume fell in the same minute; session/load refused as documented');
    return;
  }
  assert.equal(res.status, 200, `POST /session/:id/resume: ${show(res)}`);
  assert.equal(res.json.sessionId, sessionId, 'the same session id');
  assert.equal(res.json.resumed, true);
  assert.ok(res.json.lastEventId >= saved.lastEventId, `ids continue: ${res.text} after ${saved.lastEventId}`);
  const { turn } = await textTurn(sessionId, clientId, saved.lastEventId, 'resumed');
  assert.ok(turn.every((e) => e.id > saved.lastEventId), 'the resumed session\'s events continue the ids');
  t.diagnostic(`resumed ${sessionId} (${sameMinute ? 'same minute' : 'another minute'}); second turn answered`);
});
