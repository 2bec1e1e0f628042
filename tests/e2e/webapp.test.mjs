// The web app in a real headless Chromium beside the real Qwen Code (issue #43): Qwen Code's own
// `ask_user_question` (the fake model calls it: ASK) is shown as a question card; a person picks an
// option and submits; Qwen Code sends the answer back to the model, whose reply quotes the tool
// result it was sent ("answered: ..."). Run through run.sh (phase qwen-api).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { DaemonClient } from '@qwen-code/sdk/daemon';
import { BASE_URL, DAEMON_KIND, EventCollector, T, WORKSPACE, agentText, isPermissionRequest, withTimeout } from './lib.mjs';
import { Browser } from './webdriver.mjs';

const client = new DaemonClient({ baseUrl: BASE_URL, fetchTimeoutMs: T.request });
let browser;

/** XPath of the button named `name` in the page's question card. */
const button = (name) =>
  `//section[contains(@class, 'card')]//button[normalize-space() = '${name}' or .//span[@class = 'option-name' and normalize-space() = '${name}']]`;
/** XPath of the choice labelled `label` in the card's question `key`. */
const choice = (key, label) =>
  `//section[contains(@class, 'card')]//*[@data-key = '${key}']//label[span[normalize-space() = '${label}']]`;

before(async () => {
  if (DAEMON_KIND === 'mediatord') browser = await Browser.start(T.request);
});

after(() => browser?.close());

test("Qwen Code's question answered by a person in the web app in Chromium; the model's next request carries the answer", { skip: DAEMON_KIND !== 'mediatord' && 'the web app is mediatord\'s' }, async () => {
  const created = await client.createOrAttachSession({ workspaceCwd: WORKSPACE }, 'e2e-webapp');
  const sid = created.sessionId;
  const controller = new AbortController();
  const events = new EventCollector('webapp-subscription');
  (async () => {
    try {
      for await (const ev of client.subscribeEvents(sid, { clientId: created.clientId, signal: controller.signal })) events.push(ev);
    } catch {
      // closed by the test
    } finally {
      events.finish('closed');
    }
  })();
  try {
    await browser.goto(`${BASE_URL}/#/s/${sid}`);
    await browser.until(
      'the session live in the page',
      `document.querySelector("section.session[data-session-id='${sid}'] .conn[data-state=live]")`,
      T.request,
    );
    const from = events.events.length;
    const turn = client.prompt(sid, { prompt: [{ type: 'text', text: 'ASK Which database should we use? | sqlite | postgres' }] }, AbortSignal.timeout(T.turn), created.clientId);
    turn.catch(() => {});
    await events.waitFor(isPermissionRequest(sid), { what: "Qwen Code's question", from, timeoutMs: T.permission });
    const shown = await browser.until(
      "the question's card",
      "document.querySelector('section.card .question[data-form=user_question]')?.textContent",
      T.permission,
    );
    assert.match(shown, /Which database should we use\?/);
    await browser.click('postgres', choice('0', 'postgres'), T.request);
    await browser.click('Submit', button('Submit'), T.request);
    await browser.until('the card resolved', "document.querySelectorAll('section.card').length === 0", T.request);
    const result = await withTimeout(turn, T.turn, 'the question turn');
    assert.equal(result.stopReason, 'end_turn', JSON.stringify(result));
    const end = await events.waitFor((e) => e.type === 'turn_complete', { what: 'turn_complete', from, timeoutMs: T.turn });
    const said = agentText(events.events.slice(from).filter((e) => e.id !== undefined && e.id < end.id));
    assert.match(said, /^answered: .*\*\*Question\*\*: postgres/, 'the model was sent the answer the person clicked');
    await browser.until(
      "the model's reply in the page",
      "[...document.querySelectorAll('.turn .agent .msg')].some((m) => m.textContent.includes('postgres'))",
      T.request,
    );
  } finally {
    controller.abort();
  }
});
