// One session on screen: the transcript (turns with the prompt, who sent it, and what the agent did),
// the pending permission cards, the queued prompts, the composer, the model and mode switchers, the
// rules and the decisions. Each piece of state gets its element once and is updated in place when it
// changes, so a long stream costs work proportional to what arrives, and focus and open/closed
// details survive updates.

import { clock, h, icon, replace, shortPath } from './dom.js';
import { decision } from './audit.js';
import { daemonHunks, renderDiff, renderHunks } from './diff.js';
import { renderMarkdown, stableCut } from './markdown.js';
import { identity } from './names.js';
import { marked, renderPresented } from './present.js';
import { questionForm } from './question.js';
import { reveal, revealPieces } from './reveal.js';
import { forbiddenText, modeName, modelName, pending, queued, running } from './state.js';

/**
 * Characters of an unfinished Markdown block re-rendered on each update of a streaming message.
 * Past it the block streams as plain text, appended and never re-rendered, until a blank line
 * finishes it (then it is rendered as Markdown once): an agent streaming one 300 KB paragraph
 * used to make every chunk re-render and re-lay out all of it.
 */
const MAX_TAIL = 8 * 1024;
/** Characters per block of streamed plain text: an update lays out the last block, not the whole text. */
const PLAIN_BLOCK = 4 * 1024;

/**
 * Text someone else chose, as nodes that hide nothing (`reveal.js`): escapes and run lengths are
 * set apart, so they are not read as the text itself.
 */
function shown(text) {
  return revealPieces(text).map((p) => (p.mark !== undefined ? h('span', { class: 'reveal' }, p.mark) : p.text));
}

/**
 * Appends what `text` has beyond `view.plain.shown` to `container` as plain text, in blocks of at
 * most PLAIN_BLOCK characters: each update adds nodes for the new characters only.
 */
function appendPlain(container, view, text) {
  if (!view.plain) {
    container.replaceChildren();
    view.plain = { shown: view.from ?? 0, block: null, size: 0 };
  }
  const p = view.plain;
  while (p.shown < text.length) {
    if (!p.block || p.size >= PLAIN_BLOCK) {
      p.block = h('div', { class: 'plain-block' });
      p.size = 0;
      container.append(p.block);
    }
    const take = Math.min(PLAIN_BLOCK - p.size, text.length - p.shown);
    p.block.append(document.createTextNode(text.slice(p.shown, p.shown + take)));
    p.size += take;
    p.shown += take;
  }
}

let nextId = 0;

/**
 * Paired devices' names by client id, as the decisions this browser has read name them (a device
 * votes and prompts as its id; the audit entry carries its name). Only ever filled by renderAudit.
 */
const deviceNames = new Map();

/** Who a client id is, as this browser says it: a paired device by its name and id (names.js). */
function who(s, clientId) {
  if (!clientId) return 'a client without an id';
  return clientId === s.me ? 'you' : identity(deviceNames.get(clientId), clientId, true);
}

const KIND_LABEL = {
  read: 'read', edit: 'edit', delete: 'delete', move: 'move', search: 'search', execute: 'run',
  think: 'think', fetch: 'fetch', switch_mode: 'switch mode', other: 'tool',
};

const STATUS_LABEL = { pending: 'pending', in_progress: 'running', completed: 'done', failed: 'failed' };

/** A changed file's status as a turn's change set shows it (docs/protocol.md §18.2). */
const CHANGE_LABEL = { added: 'added', modified: 'modified', deleted: 'deleted' };

function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/** The tool call a permission request is about: what was announced for it, overlaid by the request. */
function requestedCall(s, request) {
  const call = request.toolCall || {};
  const announced = s.tools.get(call.toolCallId)?.item.call || {};
  const merged = { ...announced };
  for (const [k, v] of Object.entries(call)) if (v !== null && v !== undefined) merged[k] = v;
  return merged;
}

function toolName(call) {
  const meta = call._meta || {};
  return meta.toolName || meta.claudeCode?.toolName || null;
}

/** A content block (ACP ContentBlock) as nodes: text as Markdown or plain, the rest as labels. */
function contentBlock(block, markdown) {
  if (!block || typeof block !== 'object') return null;
  switch (block.type) {
    case 'text':
      return markdown ? h('div', { class: 'md' }, renderMarkdown(String(block.text ?? ''))) : h('p', { class: 'plain-text' }, String(block.text ?? ''));
    case 'image':
      return h('p', { class: 'attachment' }, icon('image'), ` image (${block.mimeType || 'unknown type'})`);
    case 'audio':
      return h('p', { class: 'attachment' }, ` audio (${block.mimeType || 'unknown type'})`);
    case 'resource_link':
      return h('p', { class: 'attachment' }, icon('file'), ' ', block.name || block.uri || 'a resource');
    case 'resource':
      return h('p', { class: 'attachment' }, icon('file'), ' ', block.resource?.uri || 'an embedded resource');
    default:
      return h('p', { class: 'attachment' }, `(${String(block.type || 'unknown')} content)`);
  }
}

/**
 * The body of a tool call: its command, paths (relative to the workspace `cwd` when inside it, the
 * whole path on hover), content (text, diffs, terminals) and raw output.
 */
function toolBody(call, cwd) {
  const parts = [];
  const command = call.rawInput && typeof call.rawInput.command === 'string' ? call.rawInput.command : null;
  if (command) parts.push(h('pre', { class: 'command' }, '$ ', shown(command)));
  const locations = Array.isArray(call.locations) ? call.locations.filter((l) => l && typeof l.path === 'string') : [];
  if (locations.length) {
    parts.push(h('ul', { class: 'paths' }, locations.map((l) => {
      const path = shortPath(l.path, cwd);
      return h('li', { title: l.path }, icon('file'), ' ', shown(l.line ? `${path}:${l.line}` : path));
    })));
  }
  for (const c of Array.isArray(call.content) ? call.content : []) {
    if (c?.type === 'diff') parts.push(renderDiff(c, cwd));
    else if (c?.type === 'terminal') parts.push(h('p', { class: 'attachment' }, icon('terminal'), ` terminal ${c.terminalId ?? ''}`));
    else if (c?.type === 'content') {
      const block = c.content;
      parts.push(block?.type === 'text' ? h('pre', { class: 'output' }, String(block.text ?? '')) : contentBlock(block, false));
    }
  }
  if (!call.content?.length && call.rawOutput !== undefined && call.rawOutput !== null) {
    const raw = typeof call.rawOutput === 'string' ? call.rawOutput : JSON.stringify(call.rawOutput, null, 2);
    parts.push(h('pre', { class: 'output' }, raw));
  }
  return parts;
}

/** What a reviewer's verdict does, as a card says it (docs/protocol.md §8.6). */
const VERDICT_LABEL = { allow: 'allows', deny: 'denies', escalate: 'asks a person' };

/**
 * "Reviewer guard asks a person: pipes a download into a shell" — one review, as the card and the
 * record show it; a failure (no answer in time, a dead or garbled reviewer) says so, not a verdict.
 */
function reviewText(review) {
  const name = `Reviewer ${reveal(String(review.reviewer ?? ''))}`;
  const reason = reveal(String(review.reason ?? ''));
  if (review.failure) return `${name} failed (${reveal(String(review.failure))}), so a person decides: ${reason}`;
  return `${name} ${VERDICT_LABEL[review.verdict] || reveal(String(review.verdict))}: ${reason}`;
}

/** "Allow once by bob" — how a permission request was decided. */
export function resolutionText(s, perm) {
  const r = perm.resolved;
  const option = (perm.request.options || []).find((o) => o.optionId === r.outcome?.optionId);
  const chosen = r.outcome?.outcome === 'selected' ? option?.name || r.outcome.optionId : 'Cancelled';
  switch (r.resolvedBy) {
    case 'vote':
      if (r.via === 'reviewer') {
        // A reviewer trusted with the kind decided: say which and why.
        const review = (perm.reviews || []).find((v) => v.clientId === r.voterClientId);
        const name = reveal(String(r.voterClientId ?? '').replace(/^reviewer:/, ''));
        return review ? `${chosen} by reviewer ${name}: ${reveal(String(review.reason ?? ''))}` : `${chosen} by reviewer ${name}`;
      }
      return `${chosen} by ${who(s, r.voterClientId)}`;
    case 'rule':
      return `${chosen} by rule ${r.ruleId ?? ''}`.trim();
    case 'timeout':
      return 'Cancelled: nobody answered in time';
    case 'cancel':
      return 'Cancelled: the turn was stopped';
    case 'session_closed':
      return 'Cancelled: the session ended';
    default:
      return `${chosen} (${r.resolvedBy})`;
  }
}

/** What a rule does: a require rule says how many approvals it waits for, and whose. */
function effectText(rule) {
  if (rule.effect === 'deny') return 'Deny';
  if (rule.effect !== 'require') return 'Allow';
  const q = rule.quorum;
  return `Require ${q} approval${q === 1 ? '' : 's'}${rule.group ? ` from ${rule.group}` : ''}`;
}

function ruleText(rule) {
  const parts = [effectText(rule)];
  if (rule.kinds) parts.push(rule.kinds.join(', '));
  if (rule.tools) parts.push(`tools ${rule.tools.join(', ')}`);
  if (rule.paths) parts.push(`paths ${rule.paths.join(', ')}`);
  if (rule.commands) parts.push(`commands ${rule.commands.join(', ')}`);
  return parts.join(' · ');
}

/**
 * Changed files, each a button that opens its diff below it: status, path, line counts, and
 * "not approved" when no approved request named it. `opened`: path → {el, error} of the open ones.
 */
function fileList(files, opened, toggle) {
  return h('ul', { class: 'changes-files' }, files.map((f) => {
    const open = opened.get(f.path);
    return h('li', { class: 'changed-file', dataset: { path: String(f.path), status: String(f.status), unapproved: String(Boolean(f.unapproved)) } },
      h('button', { type: 'button', class: 'ghost file-toggle', 'aria-expanded': String(Boolean(open)), onclick: () => toggle(f.path) },
        h('span', { class: `file-status change-${f.status}` }, CHANGE_LABEL[f.status] || String(f.status)), ' ',
        h('span', { class: 'file-path' }, String(f.path)), ' ',
        h('span', { class: 'file-counts' }, f.isBinary ? 'binary' : `+${Number(f.added) || 0} −${Number(f.removed) || 0}`),
        f.unapproved ? h('span', { class: 'unapproved', title: 'No permission request approved in this turn names this file' }, 'not approved') : null),
      open ? (open.error ? h('p', { class: 'form-error' }, open.error) : open.el || h('p', { class: 'loading' }, 'Loading the diff…')) : null);
  }));
}

/** Opens (fetching it with `load`) or closes the diff of `path` among `opened`; `redraw` after each step. */
async function toggleFile(opened, path, load, redraw) {
  if (opened.has(path)) {
    opened.delete(path);
    redraw();
    return;
  }
  const open = { el: null, error: null };
  opened.set(path, open);
  redraw();
  try {
    const diff = await load(path);
    if (diff?.available === false) open.error = 'No diff: the file is unchanged, or its snapshots are gone.';
    else open.el = renderHunks(path, diff?.truncated ? `${path} (cut short)` : path, daemonHunks(diff?.hunks));
  } catch (err) {
    open.error = `Diff: ${err.message}`;
  }
  if (opened.get(path) === open) redraw();
}

export class SessionView {
  /**
   * `actions`: sendPrompt(text), cancel(), vote(requestId, body), presented(requestId, all), setModel(id), setMode(id),
   * loadRules(), removeRule(ruleId), loadAudit(), back(), announce(text).
   */
  constructor(s, actions) {
    this.s = s;
    this.actions = actions;
    this.els = new Map();
    this.cards = new Map();
    this.uid = ++nextId;
    this.build();
  }

  build() {
    const s = this.s;
    const title = `${s.summary.agent || 'agent'} · ${s.id.slice(0, 18)}`;
    this.conn = h('span', { class: 'conn', role: 'status' }, 'connecting');
    this.detailsButton = h('button', {
      type: 'button', class: 'ghost', 'aria-expanded': 'false', 'aria-controls': `details-${this.uid}`,
      onclick: () => this.toggleDetails(),
    }, icon('sliders'), h('span', { class: 'label' }, 'Rules & decisions'));
    this.model = h('select', { id: `model-${this.uid}`, onchange: () => this.actions.setModel(this.model.value) });
    this.mode = h('select', { id: `mode-${this.uid}`, onchange: () => this.actions.setMode(this.mode.value) });
    this.controlError = h('p', { class: 'form-error', role: 'alert' });
    this.rulesList = h('ul', { class: 'rules' });
    this.audit = h('div', { class: 'audit' });
    this.workspaceView = { el: h('div', { class: 'changes workspace-changes' }), diff: null, opened: new Map() };
    this.details = h('div', { class: 'details', id: `details-${this.uid}`, hidden: true },
      h('section', { 'aria-labelledby': `rules-${this.uid}` },
        h('h3', { id: `rules-${this.uid}` }, 'Rules'),
        h('p', { class: 'hint' }, 'Rules answer matching permission requests of this session without a vote.'),
        this.rulesList),
      h('section', { 'aria-labelledby': `audit-${this.uid}` },
        h('h3', { id: `audit-${this.uid}` }, 'Decisions'),
        h('button', { type: 'button', onclick: () => this.actions.loadAudit() }, 'Refresh decisions'),
        this.audit),
      h('section', { 'aria-labelledby': `workspace-${this.uid}` },
        h('h3', { id: `workspace-${this.uid}` }, 'Workspace changes'),
        h('button', { type: 'button', onclick: () => this.loadWorkspaceDiff() }, 'Show workspace changes'),
        this.workspaceView.el),
      h('p', { class: 'hint' }, `Workspace ${s.summary.workspaceCwd || ''}. You are ${s.me}.`),
    );
    this.transcript = h('ol', { class: 'transcript', 'aria-label': 'Transcript' });
    this.scroller = h('div', { class: 'scroller' }, this.transcript);
    this.approvals = h('section', { class: 'approvals', 'aria-label': 'Needs approval' });
    this.queue = h('section', { class: 'queue', 'aria-label': 'Queued prompts' });
    const promptId = `prompt-${this.uid}`;
    this.input = h('textarea', {
      id: promptId, name: 'prompt', rows: 1, placeholder: 'Ask the agent…', enterkeyhint: 'send',
      onkeydown: (e) => {
        if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          this.form.requestSubmit();
        }
      },
      oninput: () => this.fit(),
    });
    this.stop = h('button', { type: 'button', class: 'stop', disabled: true, onclick: () => this.actions.cancel() }, icon('stop'), h('span', { class: 'label' }, 'Stop'));
    this.send = h('button', { type: 'submit', class: 'primary send' }, icon('send'), h('span', { class: 'label' }, 'Send'));
    this.composerError = h('p', { class: 'form-error', role: 'alert' });
    this.form = h('form', {
      class: 'composer',
      onsubmit: async (e) => {
        e.preventDefault();
        const text = this.input.value;
        if (!text.trim() || this.s.ended) return;
        this.send.disabled = true;
        this.composerError.textContent = '';
        try {
          await this.actions.sendPrompt(text);
          if (this.input.value === text) this.input.value = '';
          this.fit();
        } catch (err) {
          this.composerError.textContent = err.message;
        } finally {
          this.send.disabled = Boolean(this.s.ended);
          this.input.focus();
        }
      },
    },
      h('label', { for: promptId, class: 'visually-hidden' }, 'Prompt'),
      this.input,
      h('div', { class: 'composer-buttons' }, this.stop, this.send),
    );
    this.root = h('section', { class: 'session', 'aria-labelledby': `title-${this.uid}`, dataset: { sessionId: s.id } },
      h('header', { class: 'session-head' },
        h('button', { type: 'button', class: 'ghost back', onclick: () => this.actions.back() }, icon('back'), h('span', { class: 'label' }, 'Sessions')),
        h('div', { class: 'title' },
          h('h2', { id: `title-${this.uid}` }, title),
          h('p', { class: 'sub' }, `${s.summary.workspaceCwd || ''}`)),
        this.conn,
      ),
      h('div', { class: 'controls' },
        h('span', { class: 'field' }, h('label', { for: this.model.id }, 'Model'), this.model),
        h('span', { class: 'field' }, h('label', { for: this.mode.id }, 'Mode'), this.mode),
        this.detailsButton,
      ),
      this.controlError,
      this.details,
      this.scroller,
      h('div', { class: 'dock' }, this.approvals, this.queue, this.composerError, this.form),
    );
    this.renderHeader();
  }

  fit() {
    this.input.style.height = 'auto';
    this.input.style.height = `${Math.min(this.input.scrollHeight, 200)}px`;
  }

  toggleDetails() {
    const open = this.details.hidden;
    this.details.hidden = !open;
    this.detailsButton.setAttribute('aria-expanded', String(open));
    if (open) {
      this.actions.loadRules();
      this.actions.loadAudit();
    }
  }

  setConnection(status) {
    const text = { connecting: 'connecting…', live: 'live', reconnecting: 'reconnecting…', ended: 'ended', unauthorized: 'signed out' }[status] || status;
    this.connStatus = status;
    if (this.resynced && status === 'live') {
      this.conn.textContent = 'resynced';
      this.conn.dataset.state = 'resynced';
      return;
    }
    this.conn.textContent = text;
    this.conn.dataset.state = status;
  }

  /** Renders everything the model marked as changed. */
  update() {
    const s = this.s;
    const atBottom = this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight < 48;
    for (const entry of s.added.splice(0)) this.transcript.append(this.entryEl(entry));
    for (const obj of [...s.dirty]) this.refresh(obj);
    s.dirty.clear();
    if (s.stale.has('pending')) this.renderPending();
    if (s.stale.has('queue')) this.renderQueue();
    if (s.stale.has('header')) this.renderHeader();
    if (s.stale.has('rules')) this.renderRules();
    if (s.stale.has('resync')) {
      this.resynced = true;
      this.setConnection(this.connStatus || 'live');
    }
    s.stale.clear();
    if (atBottom) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  entryEl(entry) {
    let el = this.els.get(entry);
    if (el) return el;
    if (entry.kind === 'turn') {
      el = h('li', { class: 'turn', dataset: { promptId: entry.promptId || '' } },
        h('div', { class: 'user' }), h('div', { class: 'agent' }), h('p', { class: 'turn-state' }));
    } else if (entry.kind === 'shell') {
      el = h('li', { class: 'shell' });
    } else {
      el = h('li', { class: `note note-${entry.level}` },
        h('time', { class: 'time', datetime: new Date(entry.at).toISOString() }, clock(entry.at)), ' ', entry.text);
    }
    this.els.set(entry, el);
    this.refresh(entry);
    return el;
  }

  refresh(obj) {
    switch (obj.kind) {
      case 'turn':
        return this.refreshTurn(obj);
      case 'message':
      case 'thought':
        return this.refreshText(obj);
      case 'tool':
        return this.refreshTool(obj);
      case 'plan':
        return this.refreshPlan(obj);
      case 'permission':
        return this.refreshRecord(obj);
      case 'changes':
        return this.refreshChanges(obj);
      case 'shell':
        return this.refreshShell(obj);
      default:
    }
  }

  refreshTurn(turn) {
    const el = this.els.get(turn);
    if (!el) return; // a queued turn: shown in the queue until it starts
    const [user, agent, state] = el.children;
    el.dataset.state = turn.state === 'running' ? 'running' : turn.stopReason || turn.state;
    if (turn.user.length) {
      replace(user,
        h('p', { class: 'who' }, icon('user'), ' ', turn.originator === this.s.me ? 'You' : turn.originator ? who(this.s, turn.originator) : 'A client without an id'),
        turn.user.map((b) => contentBlock(b, false)));
    }
    for (const item of turn.items) {
      if (!this.els.has(item)) {
        const itemEl = this.itemEl(item);
        agent.append(itemEl);
      }
    }
    if (turn.state === 'running') replace(state, h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'Working…');
    else if (turn.error) replace(state, icon('alert'), ` Error: ${turn.error}`);
    else if (turn.stopReason === 'cancelled') replace(state, 'Cancelled');
    else if (turn.stopReason === 'ended') replace(state, 'Ended with the session');
    else if (turn.stopReason && turn.stopReason !== 'end_turn') replace(state, `Stopped: ${turn.stopReason}`);
    else replace(state);
    state.className = `turn-state${turn.error ? ' error' : ''}`;
  }

  itemEl(item) {
    let el;
    switch (item.kind) {
      case 'message':
        el = h('div', { class: 'msg md' }, h('div', { class: 'stable' }), h('div', { class: 'tail' }));
        item.view = { scan: {}, cut: 0, length: 0 };
        break;
      case 'thought':
        el = h('details', { class: 'thought' }, h('summary', {}, 'Thought'), h('div', { class: 'thought-text' }));
        break;
      case 'tool':
        el = h('details', { class: 'tool' }, h('summary', {}), h('div', { class: 'tool-body' }));
        break;
      case 'plan':
        el = h('div', { class: 'plan', role: 'group', 'aria-label': 'Plan' });
        break;
      case 'permission':
        el = h('p', { class: 'perm-record', dataset: { requestId: item.requestId } });
        break;
      case 'content':
        el = h('div', { class: 'msg' }, contentBlock(item.content, true));
        break;
      case 'changes':
        el = h('section', { class: 'changes', 'aria-label': 'What this turn changed', dataset: { turnIndex: String(item.data.turnIndex ?? '') } });
        break;
      default:
        el = h('div', {});
    }
    this.els.set(item, el);
    this.refresh(item);
    return el;
  }

  /**
   * A streaming text brought up to date with work bounded per update: a thought's text and a long
   * unfinished block are appended as plain text (`appendPlain`); a message's finished blocks are
   * rendered as Markdown once, its unfinished tail again on each update while it is short.
   */
  refreshText(item) {
    const el = this.els.get(item);
    if (!el) return;
    if (item.kind === 'thought') {
      const v = item.view || (item.view = { length: 0, plain: null });
      if (item.text.length < v.length) v.plain = null; // cut at its start: shown afresh
      appendPlain(el.lastChild, v, item.text);
      v.length = item.text.length;
      return;
    }
    const [stable, tail] = el.children;
    const v = item.view;
    if (item.text.length < v.length) {
      // The text was cut at its start (it outgrew its bound): render afresh.
      item.view = { scan: {}, cut: 0, length: 0, plain: null };
      stable.replaceChildren();
      tail.replaceChildren();
      return this.refreshText(item);
    }
    const cut = stableCut(item.text, v.scan);
    if (cut > v.cut) {
      stable.append(renderMarkdown(item.text.slice(v.cut, cut)));
      v.cut = cut;
      v.plain = null;
      tail.replaceChildren();
    }
    if (!v.plain && item.text.length - v.cut <= MAX_TAIL) {
      tail.replaceChildren(renderMarkdown(item.text.slice(v.cut)));
    } else {
      v.from = v.cut;
      appendPlain(tail, v, item.text);
    }
    v.length = item.text.length;
  }

  refreshTool(item) {
    const el = this.els.get(item);
    if (!el) return;
    const call = item.call;
    const status = call.status || 'pending';
    el.dataset.status = status;
    const hasDiff = Array.isArray(call.content) && call.content.some((c) => c?.type === 'diff');
    if (hasDiff && !item.opened) {
      el.open = true;
      item.opened = true;
    }
    replace(el.firstChild,
      h('span', { class: `status status-${status}` }, STATUS_LABEL[status] || status),
      ' ', h('span', { class: 'tool-title' }, shown(call.title || toolName(call) || 'Tool call')),
      call.kind ? h('span', { class: 'kind' }, KIND_LABEL[call.kind] || call.kind) : null);
    replace(el.lastChild, toolBody(call, this.s.summary.workspaceCwd));
  }

  /**
   * A turn's change set: a summary, each file (its status, its line counts, "not approved" when no
   * approved request of the turn named it) opening its diff, and a rewind to before the turn that
   * asks to be confirmed (and again, with `force`, when a file was changed since).
   */
  refreshChanges(item) {
    const el = this.els.get(item);
    if (!el) return;
    const d = item.data;
    if (d.available === false) {
      replace(el, h('p', { class: 'changes-summary' }, icon('alert'), ` The changes of this turn were not recorded: ${d.message || 'no snapshot'}`));
      return;
    }
    const files = Array.isArray(d.files) ? d.files : [];
    const summary = h('p', { class: 'changes-summary' },
      h('strong', {}, `${plural(Number(d.filesChanged) || files.length, 'file')} changed`),
      h('span', { class: 'file-counts' }, ` +${Number(d.insertions) || 0} −${Number(d.deletions) || 0}`),
      d.unapprovedCount ? h('span', { class: 'unapproved-count' }, ` · ${d.unapprovedCount} not approved`) : null);
    const list = fileList(files, item.diffs, (path) => this.toggleDiff(item, path));
    const more = d.hiddenCount ? h('p', { class: 'changes-more' }, `and ${plural(d.hiddenCount, 'more file')}`) : null;
    replace(el, summary, list, more, this.s.ended || !d.promptId ? null : this.rewindControls(item));
  }

  /** The files a rewind to before the turn of `item` would put back: what it and the turns after it changed. */
  rewindPaths(item) {
    const from = Number(item.data.turnIndex) || 0;
    const paths = new Set();
    for (const turn of this.s.turns.values()) {
      for (const it of turn.items) {
        if (it.kind === 'changes' && Number(it.data.turnIndex) >= from) {
          for (const f of it.data.files || []) paths.add(String(f.path));
        }
      }
    }
    return [...paths].sort();
  }

  rewindControls(item) {
    const r = item.rewind || { state: 'idle' };
    const refresh = (next) => {
      item.rewind = next;
      this.refreshChanges(item);
    };
    const go = async (force) => {
      refresh({ state: 'busy' });
      try {
        const done = await this.actions.rewind(item.data.promptId, force);
        const failed = done?.filesFailed || [];
        refresh({ state: 'done', text: `Put back ${plural((done?.filesChanged || []).length, 'file')}` + (failed.length ? `; not put back: ${failed.join('; ')}` : '.') });
      } catch (err) {
        if (err.code === 'rewind_conflict') {
          const paths = err.body?.paths || [];
          refresh({ state: 'conflict', text: `Changed since this turn: ${paths.join(', ') || 'some files'}. Rewinding puts them back anyway.` });
        } else {
          refresh({ state: 'error', text: err.message });
        }
      }
    };
    const keep = h('button', { type: 'button', class: 'ghost', onclick: () => refresh({ state: 'idle' }) }, 'Keep the files');
    switch (r.state) {
      case 'confirm':
        return h('div', { class: 'rewind', role: 'group', 'aria-label': 'Rewind' },
          h('p', {}, 'Put these files back as they were before this turn? The conversation stays as it is.'),
          h('ul', { class: 'rewind-files' }, this.rewindPaths(item).map((p) => h('li', { class: 'file-path' }, p))),
          h('button', { type: 'button', class: 'danger', onclick: () => go(false) }, 'Rewind the files'), ' ', keep);
      case 'conflict':
        return h('div', { class: 'rewind', role: 'group', 'aria-label': 'Rewind' },
          h('p', { class: 'form-error' }, r.text),
          h('button', { type: 'button', class: 'danger', onclick: () => go(true) }, 'Rewind anyway'), ' ', keep);
      case 'busy':
        return h('p', { class: 'rewind' }, 'Rewinding…');
      case 'done':
        return h('p', { class: 'rewind rewind-done' }, r.text);
      case 'error':
        return h('div', { class: 'rewind' }, h('p', { class: 'form-error' }, `Rewind: ${r.text}`),
          h('button', { type: 'button', class: 'ghost', onclick: () => refresh({ state: 'idle' }) }, 'Close'));
      default:
        return h('div', { class: 'rewind' },
          h('button', { type: 'button', class: 'ghost rewind-start', onclick: () => refresh({ state: 'confirm' }) }, icon('back'), ' Rewind files to before this turn'));
    }
  }

  /** Opens (fetching it once) or closes the diff of `path` in the change set `item`. */
  toggleDiff(item, path) {
    return toggleFile(item.diffs, path, (p) => this.actions.turnDiff(item.data.turnIndex, p), () => this.refreshChanges(item));
  }

  /** The workspace's changes (against git's HEAD, or the first snapshot in a plain folder), loaded on demand. */
  async loadWorkspaceDiff() {
    const view = this.workspaceView;
    view.opened = new Map();
    replace(view.el, h('p', { class: 'loading' }, 'Loading…'));
    try {
      view.diff = await this.actions.workspaceDiff();
    } catch (err) {
      replace(view.el, h('p', { class: 'form-error' }, `Workspace changes: ${err.message}`));
      return;
    }
    this.renderWorkspaceDiff();
  }

  renderWorkspaceDiff() {
    const { el, diff, opened } = this.workspaceView;
    if (!diff?.available) {
      replace(el, h('p', { class: 'hint' }, 'Nothing to compare with: the folder is not in a git repository and no turn of it took a snapshot.'));
      return;
    }
    const base = diff.base === 'head' ? "git's HEAD" : diff.base === 'snapshot' ? 'the start of the first turn' : String(diff.base || '');
    const files = (diff.files || []).map((f) => ({ ...f, status: f.isUntracked ? 'added' : f.isDeleted ? 'deleted' : 'modified' }));
    replace(el,
      h('p', { class: 'changes-summary' }, h('strong', {}, `${plural(Number(diff.filesCount) || files.length, 'file')} changed`),
        h('span', { class: 'file-counts' }, ` +${Number(diff.linesAdded) || 0} −${Number(diff.linesRemoved) || 0} since ${base}`)),
      fileList(files, opened, (path) => toggleFile(opened, path, (p) => this.actions.workspaceFileDiff(p), () => this.renderWorkspaceDiff())),
      diff.hiddenCount ? h('p', { class: 'changes-more' }, `and ${plural(diff.hiddenCount, 'more file')}`) : null);
  }

  refreshPlan(item) {
    const el = this.els.get(item);
    if (!el) return;
    replace(el, h('p', { class: 'plan-title' }, 'Plan'),
      h('ol', {}, item.entries.map((e) => h('li', { class: `plan-${e.status || 'pending'}`, dataset: { status: e.status || 'pending' } },
        h('span', { class: 'plan-mark', 'aria-hidden': 'true' }, e.status === 'completed' ? '✓' : e.status === 'in_progress' ? '▸' : '○'),
        ' ', String(e.content ?? ''),
        h('span', { class: 'visually-hidden' }, ` (${e.status || 'pending'})`)))));
  }

  refreshRecord(item) {
    const el = this.els.get(item);
    const perm = this.s.permissions.get(item.requestId);
    if (!el || !perm) return;
    const call = requestedCall(this.s, perm.request);
    const title = call.title || toolName(call) || 'a tool call';
    if (!perm.resolved) {
      replace(el, icon('shield'), ' Asked permission: ', shown(title), ' — waiting for a decision');
      el.dataset.state = 'pending';
      return;
    }
    el.dataset.state = 'resolved';
    el.dataset.resolvedBy = perm.resolved.resolvedBy;
    replace(el, icon('shield'), ' ', shown(title), ': ', h('strong', {}, resolutionText(this.s, perm)));
  }

  refreshShell(entry) {
    const el = this.els.get(entry);
    if (!el) return;
    const r = entry.result;
    replace(el,
      h('p', { class: 'who' }, icon('terminal'), ` ${who(this.s, entry.originator)} ran a command`),
      h('pre', { class: 'command' }, `$ ${entry.command}`),
      r ? h('pre', { class: 'output' }, r.output || '') : h('p', { class: 'hint' }, 'Running…'),
      r ? h('p', { class: 'hint' }, r.aborted ? 'Aborted' : `Exit code ${r.exitCode}`, r.truncated ? ' (output truncated)' : '') : null);
  }

  renderPending() {
    const list = pending(this.s);
    const keep = new Set(list.map((p) => p.requestId));
    for (const [id, card] of this.cards) {
      if (!keep.has(id)) {
        card.el.remove();
        this.cards.delete(id);
      }
    }
    for (const perm of list) {
      let card = this.cards.get(perm.requestId);
      if (!card) {
        card = this.card(perm);
        this.cards.set(perm.requestId, card);
        this.approvals.append(card.el);
        if (!this.s.replaying) this.actions.announce(`Permission needed: ${reveal(card.title)}`);
      }
      this.updateCard(perm, card);
    }
    this.approvals.hidden = list.length === 0;
    for (const perm of this.s.permissions.values()) this.refreshRecord(perm.item);
  }

  card(perm) {
    const s = this.s;
    const request = perm.request;
    const call = requestedCall(s, request);
    const title = call.title || toolName(call) || 'A tool call';
    const titleId = `perm-${this.uid}-${perm.requestId}`;
    const options = Array.isArray(request.options) ? request.options : [];
    // A question (`docs/protocol.md#19-questions`): its form, whose answers the accepting option's
    // vote carries; no rule answers it, so no "for this session".
    const form = request.question && typeof request.question === 'object' ? questionForm(request.question) : null;
    const buttons = options.map((o) => {
      const tally = h('span', { class: 'tally' });
      const kindClass = String(o.kind || '').startsWith('allow') ? 'allow' : String(o.kind || '').startsWith('reject') ? 'reject' : '';
      const always = String(o.kind || '').endsWith('_always') ? 'always' : '';
      const vote = () => {
        const body = { outcome: { outcome: 'selected', optionId: o.optionId } };
        if (form && kindClass === 'allow') body.answers = form.answers();
        return this.vote(perm, body, o.optionId);
      };
      const button = h('button', { type: 'button', class: ['option', kindClass, always], onclick: vote },
        h('span', { class: 'option-name' }, always ? icon('repeat') : null, shown(String(o.name ?? o.optionId))), tally);
      return { option: o, button, tally };
    });
    const kinds = new Set(options.map((o) => o.kind));
    const shorthands = [];
    if (!form && kinds.has('allow_once')) {
      shorthands.push(h('button', { type: 'button', class: 'ghost session-rule', onclick: () => this.vote(perm, { decision: 'allow-session' }) },
        h('span', { class: 'option-name' }, 'Allow for this session')));
    }
    if (!form && kinds.has('reject_once')) {
      shorthands.push(h('button', { type: 'button', class: 'ghost session-rule', onclick: () => this.vote(perm, { decision: 'deny-session' }) },
        h('span', { class: 'option-name' }, 'Deny for this session')));
    }
    const policy = h('p', { class: 'policy' });
    // The reviewers' verdicts that left it to the people, with their reasons (updateCard).
    const reviews = h('ul', { class: 'reviews', 'aria-label': 'Reviewers' });
    const error = h('p', { class: 'form-error', role: 'alert' });
    const tool = toolName(call);
    // The summary until the daemon's presentation arrives (`present`).
    const body = h('div', { class: 'card-body' }, form ? form.el : toolBody(call, this.s.summary.workspaceCwd));
    // What the choices that look alike do: the agent's "always" and this daemon's "for this session".
    const meanings = h('ul', { class: 'option-meanings' });
    const el = h('section', { class: 'card', 'aria-labelledby': titleId, dataset: { requestId: perm.requestId } },
      h('h3', { id: titleId }, icon('shield'), ' ', shown(title)),
      form
        ? h('p', { class: 'what' }, request.question.form === 'url' ? 'The agent asks you to open a link' : 'The agent asks you')
        : h('p', { class: 'what' }, call.kind ? `Wants to ${KIND_LABEL[call.kind] || ''}` : 'Wants to use a tool',
          call.kind && !KIND_LABEL[call.kind] ? shown(String(call.kind)) : null, tool ? [' with ', shown(String(tool))] : null),
      body,
      reviews,
      policy,
      h('div', { class: 'options' }, buttons.map((b) => b.button)),
      shorthands.length ? h('div', { class: 'shorthands' }, shorthands) : null,
      meanings,
      error,
    );
    const card = { el, title, body, buttons, shorthands, policy, reviews, error, meanings, kinds };
    // A question's card is its form (the daemon's presentation of a tool call has nothing to add).
    if (!form) this.present(perm, card, false);
    return card;
  }

  /**
   * Shows the request as the daemon presents it (every section, bounded unless `all`), in place of
   * the summary the card starts with; each option's button says what choosing it does. A request
   * decided meanwhile keeps the summary (its card is about to go).
   */
  async present(perm, card, all) {
    let presented;
    try {
      presented = await this.actions.presented(perm.requestId, all);
    } catch {
      return;
    }
    if (!presented || this.cards.get(perm.requestId) !== card) return;
    replace(card.body, renderPresented(presented, () => this.present(perm, card, true), this.s.summary.workspaceCwd));
    card.body.dataset.presented = all ? 'all' : 'card';
    const always = (presented.options || []).filter((o) => String(o.kind).endsWith('_always') && o.meaning);
    const session = [];
    if (card.kinds.has('allow_once')) session.push(['Allow for this session', 'This daemon allows matching calls until the session ends; the agent is told “once” and remembers nothing.']);
    if (card.kinds.has('reject_once')) session.push(['Deny for this session', 'This daemon rejects matching calls until the session ends.']);
    replace(card.meanings,
      always.map((o) => h('li', {}, h('strong', {}, marked(o.name)), ': ', o.meaning)),
      always.length ? session.map(([name, meaning]) => h('li', {}, h('strong', {}, name), ': ', meaning)) : null);
  }

  updateCard(perm, card) {
    const s = this.s;
    const request = perm.request;
    let text;
    let mayVote = true;
    switch (request.policy) {
      case 'designated':
        if (!perm.originator) text = 'Designated: no prompt is running, so the first answer decides.';
        else if (perm.originator === s.me) text = 'Designated: you sent the prompt, so you decide.';
        else {
          text = `Designated: only ${perm.originator} (who sent the prompt) may decide; this browser may not vote.`;
          mayVote = false;
        }
        break;
      case 'consensus':
        text = perm.partial
          ? `Consensus: ${perm.partial.votesReceived} vote${perm.partial.votesReceived === 1 ? '' : 's'} so far, ${perm.partial.quorum} needed to decide.`
          : 'Consensus: a quorum of the clients present when it was raised decides.';
        break;
      case 'local-only':
        text = 'Local-only: only a vote from the daemon’s own machine counts.';
        break;
      default:
        text = 'The first answer decides.';
    }
    // A require rule replaces the policy (docs/protocol.md §7): distinct people (of its group, if it
    // names one) approve, anyone stops it.
    const required = request.required;
    if (required) {
      const approvals = perm.partial ? perm.partial.votesReceived : (required.approvals || 0);
      const q = required.quorum;
      text = required.group
        ? `${approvals} of ${q} approvals from ${required.group}: rule ${required.ruleId} needs ${q === 1 ? '1 member' : `${q} different members`} of ${required.group} to allow this; one rejection stops it.`
        : `${approvals} of ${q} approvals: rule ${required.ruleId} needs ${q} different people to allow this; one rejection stops it.`;
      mayVote = true;
    }
    if (request.expiresAt) text += ` Cancelled at ${clock(request.expiresAt)} if nobody answers.`;
    if (perm.myVote) text += ` Your vote: ${perm.myVote}.`;
    card.policy.textContent = text;
    const reviews = perm.reviews || [];
    replace(card.reviews, reviews.map((r) => h('li', {
      class: ['review', r.failure ? 'failed' : String(r.verdict)],
      dataset: { reviewer: String(r.reviewer ?? ''), verdict: String(r.verdict ?? '') },
    }, reviewText(r))));
    card.reviews.hidden = reviews.length === 0;
    const tallies = perm.partial?.optionTallies || {};
    for (const b of card.buttons) {
      const n = tallies[b.option.optionId];
      b.tally.textContent = n ? ` · ${n}` : '';
      b.button.disabled = !mayVote || perm.voting;
    }
    for (const b of card.shorthands) b.disabled = !mayVote || perm.voting;
    card.error.textContent = perm.error || '';
  }

  async vote(perm, body, optionId) {
    perm.voting = true;
    perm.error = null;
    this.updateCard(perm, this.cards.get(perm.requestId));
    try {
      await this.actions.vote(perm.requestId, body);
      const option = (perm.request.options || []).find((o) => o.optionId === optionId);
      perm.myVote = option ? option.name : body.decision;
    } catch (err) {
      perm.error = err.code === 'permission_forbidden' ? forbiddenText(err.body?.reason) : err.message;
    } finally {
      perm.voting = false;
      const card = this.cards.get(perm.requestId);
      if (card) this.updateCard(perm, card);
    }
  }

  renderQueue() {
    const waiting = queued(this.s);
    replace(this.queue, waiting.length ? h('h3', {}, `Queued (${waiting.length})`) : null,
      waiting.length ? h('ol', {}, waiting.map((t) => {
        const text = t.user.filter((b) => b.type === 'text').map((b) => b.text).join(' ');
        return h('li', { dataset: { promptId: t.promptId } }, h('span', { class: 'who' }, `${who(this.s, t.originator)}: `), text.slice(0, 200) || '(no text)');
      })) : null);
    this.queue.hidden = waiting.length === 0;
  }

  renderHeader() {
    const s = this.s;
    // The agent's list, and the current one even when the list does not name it (a past session
    // knows only what its events said); a field with nothing to show is hidden, not an empty select.
    const fill = (select, list, current, value, label) => {
      const items = [...(list || [])];
      if (current && !items.some((m) => value(m) === current)) items.push(null);
      select.replaceChildren(...items.map((m) => (m === null
        ? h('option', { value: current, selected: true }, current)
        : h('option', { value: value(m), selected: value(m) === current }, label(m)))));
      select.disabled = items.length < 2 || Boolean(s.ended);
      select.parentElement.hidden = items.length === 0;
    };
    fill(this.model, s.models?.availableModels, s.models?.currentModelId, (m) => m.modelId, (m) => m.name || m.modelId);
    fill(this.mode, s.modes?.availableModes, s.modes?.currentModeId, (m) => m.id, (m) => m.name || m.id);
    this.model.title = s.models ? `Model: ${modelName(s, s.models.currentModelId)}` : 'The agent offers no models';
    this.mode.title = s.modes ? `Mode: ${modeName(s, s.modes.currentModeId)}` : 'The agent offers no modes';
    this.stop.disabled = !running(s) || Boolean(s.ended);
    if (s.ended) {
      this.input.disabled = true;
      this.send.disabled = true;
      this.input.placeholder = 'This session has ended.';
    }
  }

  renderRules() {
    const rules = this.s.rules;
    if (!rules) return;
    replace(this.rulesList, rules.length === 0 ? h('li', { class: 'hint' }, 'No rules yet. “Allow for this session” on a request adds one.') : null,
      rules.map((rule) => h('li', {},
        h('span', { class: `effect effect-${rule.effect}` }, ruleText(rule)),
        rule.createdBy ? h('span', { class: 'hint' }, ` by ${who(this.s, rule.createdBy)}`) : null,
        ' ',
        h('button', { type: 'button', class: 'ghost', 'aria-label': `Remove rule: ${ruleText(rule)}`, onclick: () => this.actions.removeRule(rule.ruleId) }, 'Remove'))));
  }

  renderAudit(entries) {
    if (!entries.length) {
      replace(this.audit, h('p', { class: 'hint' }, 'No decisions yet.'));
      return;
    }
    replace(this.audit, h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, ['When', 'Tool call', 'Decision', 'By', 'Policy'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, entries.slice().reverse().map((a) => {
        if (a.voterDeviceName && a.voterClientId) deviceNames.set(a.voterClientId, a.voterDeviceName);
        const by = a.resolvedBy === 'vote' ? who(this.s, a.voterClientId) : a.resolvedBy === 'rule' ? `rule ${a.ruleId}` : a.resolvedBy;
        return h('tr', {}, h('td', {}, clock(a.resolvedAt)), h('td', {}, shown(a.toolCall?.title || a.toolCall?.toolCallId || '')),
          h('td', {}, decision(a)), h('td', {}, by), h('td', {}, a.policy || ''));
      })))));
  }

  showControlError(message) {
    this.controlError.textContent = message || '';
  }
}
