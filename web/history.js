// Past sessions (`#/history`, `#/h/<id>`): the sessions of each workspace that are no longer live
// (dormant: ended by a shutdown, a crash or their agent's death; closed: by a client), listed from
// the daemon's history (`GET /workspace/{cwd}/sessions?include=ended`) with filters by workspace
// and date, and one opened read-only: its whole transcript replayed from the store
// (`GET /session/{id}/events` ends after `replay_complete`), drawn by the same view as a live
// session, with Resume (`POST /session/{id}/resume`, where the agent supports `session/load`) and
// the transcript exported as Markdown or JSON.

import { api, saveFile, sessionPath } from './api.js';
import { h, replace } from './dom.js';
import { identity } from './names.js';
import { escape, indented } from './reveal.js';
import { EventStream } from './sse.js';
import { apply, createSession } from './state.js';
import { SessionView } from './view.js';

/** Events a transcript export holds at most (the daemon keeps up to 100 000 per session). */
const MAX_EXPORT_EVENTS = 100_000;

function when(iso) {
  const t = Date.parse(iso);
  return Number.isFinite(t) ? new Date(t).toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' }) : '';
}

function stateWords(s) {
  if (s.state === 'closed') return 'closed';
  return s.endReason === 'daemon_shutdown' || s.endReason === 'daemon_stopped' ? 'dormant (the daemon stopped)' : 'dormant';
}

/** Renders the list of past sessions into `main`; `ws` preselects a workspace. */
export async function showHistory(main, { workspaces, ws }) {
  const list = h('ol', { class: 'history-list', 'aria-label': 'Past sessions' });
  const status = h('p', { class: 'hint', role: 'status' });
  const error = h('p', { class: 'form-error', role: 'alert' });
  const field = (label, el) => h('label', { class: 'field' }, h('span', {}, label), el);
  const workspace = h('select', { name: 'workspace' }, h('option', { value: '' }, 'All workspaces'),
    workspaces.map((w) => h('option', { value: w.cwd, selected: w.cwd === ws }, w.cwd)));
  const since = h('input', { type: 'date', name: 'since' });
  const until = h('input', { type: 'date', name: 'until' });
  let all = [];
  const render = () => {
    const from = since.value ? new Date(`${since.value}T00:00:00`).getTime() : -Infinity;
    const to = until.value ? new Date(`${until.value}T00:00:00`).getTime() + 86_400_000 : Infinity;
    const picked = all.filter((s) => (!workspace.value || s.workspaceCwd === workspace.value)
      && Date.parse(s.createdAt) >= from && Date.parse(s.createdAt) < to);
    replace(list, picked.map((s) => h('li', { class: 'past-session', dataset: { sessionId: s.sessionId } },
      h('a', { href: `#/h/${encodeURIComponent(s.sessionId)}` },
        h('span', { class: 'agent' }, s.agent || 'agent'), ' ',
        h('span', { class: 'sid' }, s.sessionId.slice(0, 18))),
      h('p', { class: 'hint' }, `${when(s.createdAt)} → ${when(s.endedAt)} · ${stateWords(s)} · ${s.workspaceCwd}`))));
    status.textContent = picked.length ? `${picked.length} past session${picked.length === 1 ? '' : 's'}` : 'No past session matches.';
  };
  for (const el of [workspace, since, until]) el.onchange = render;
  replace(main, h('section', { class: 'history-view' },
    h('p', {}, h('a', { href: '#/' }, 'Back to the sessions')),
    h('h2', {}, 'Past sessions'),
    h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() },
      field('Workspace', workspace), field('From', since), field('To', until)),
    status, error, list));
  try {
    const lists = await Promise.all(workspaces.map((w) =>
      api('GET', `workspace/${encodeURIComponent(w.cwd)}/sessions?include=ended`).then((r) => r.sessions || [])));
    all = lists.flat().filter((s) => s.state && s.state !== 'live')
      .sort((a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt));
    render();
  } catch (err) {
    error.textContent = `Could not read the history: ${err.message}`;
  }
}

/** The record of a past session (`null` when the history has none): searched in every workspace. */
export async function findPast(id, workspaces) {
  const lists = await Promise.all(workspaces.map((w) =>
    api('GET', `workspace/${encodeURIComponent(w.cwd)}/sessions?include=ended`).then((r) => r.sessions || [], () => [])));
  return lists.flat().find((s) => s.sessionId === id && s.state !== 'live') || null;
}

/** A transcript as Markdown: who asked what, what the agent answered and did, what was decided. */
export function transcriptMarkdown(summary, events, names) {
  // As the daemon's `src/transcript.rs` writes it: every field others chose on one escaped line,
  // prompts and answers after an indent, so none of it starts a line of the document.
  const out = [`# Session ${escape(summary.sessionId)}`, '',
    `- Workspace: ${escape(summary.workspaceCwd || '')}`, `- Agent: ${escape(summary.agent || '')}`,
    `- Started: ${escape(summary.createdAt || '')}`];
  if (summary.endedAt) out.push(`- Ended: ${escape(summary.endedAt)} (${escape(summary.endReason || summary.state)})`);
  const who = (id) => escape(identity(names.get(id), id, true));
  let block = null;
  let text = '';
  const flush = () => {
    if (text) out.push('', indented(text.trimEnd(), '    '));
    text = '';
  };
  const open = (kind, heading) => {
    if (block === kind) return;
    flush();
    block = kind;
    out.push('', heading);
  };
  for (const env of events) {
    const d = env.data || {};
    if (env.type === 'session_update') {
      const u = d.update || {};
      const piece = u.content?.type === 'text' ? u.content.text || '' : '';
      if (u.sessionUpdate === 'user_message_chunk') {
        open(`user ${env.promptId}`, `## Prompt${env.originatorClientId ? ` from ${who(env.originatorClientId)}` : ''}`);
        text += piece;
      } else if (u.sessionUpdate === 'agent_message_chunk') {
        open('agent', '### Agent');
        text += piece;
      } else if (u.sessionUpdate === 'tool_call') {
        flush();
        block = null;
        out.push('', `- Tool call: ${escape(u.title || u.toolCallId || '')} (${escape(u.kind || 'other')})`);
      }
    } else if (env.type === 'permission_request') {
      flush();
      block = null;
      out.push('', `> Permission asked: ${escape(d.toolCall?.title || d.requestId)}`);
    } else if (env.type === 'permission_resolved') {
      flush();
      block = null;
      const chose = d.outcome?.outcome === 'selected' ? d.outcome.optionId : 'cancelled';
      const by = d.resolvedBy === 'vote' ? who(d.voterClientId) : d.resolvedBy === 'rule' ? `rule ${escape(d.ruleId)}` : escape(d.resolvedBy);
      out.push('', `> Decision: ${escape(chose)}, by ${by}`);
    } else if (env.type === 'turn_complete' || env.type === 'turn_error') {
      flush();
      block = null;
    } else if (env.type === 'session_closed' || env.type === 'session_died') {
      flush();
      block = null;
      out.push('', `_${env.type === 'session_died' ? 'The agent exited' : 'The session ended'}${d.reason ? ` (${escape(d.reason)})` : ''}._`);
    }
  }
  flush();
  return `${out.join('\n')}\n`;
}

/**
 * Opens past session `summary` read-only in `main`: its transcript replayed from the store into a
 * session view, with Resume and the exports. `onResumed(id)` opens it live once resumed.
 */
export async function showPast(main, summary, { me, onResumed, back, announce }) {
  const s = createSession(summary, me);
  s.ended = { type: 'history' };
  const refuse = () => Promise.reject(new Error('This session is not live: resume it first.'));
  const view = new SessionView(s, {
    sendPrompt: refuse, cancel: refuse, vote: refuse, setModel: refuse, setMode: refuse,
    loadRules: async () => {}, removeRule: refuse,
    loadAudit: async () => view.renderAudit((await api('GET', sessionPath(s.id, '/permissions?audit=1'))).audit || []),
    back, announce,
  });
  const events = [];
  const names = new Map();
  const error = h('p', { class: 'form-error', role: 'alert' });
  const resume = h('button', {
    type: 'button', class: 'primary',
    onclick: async () => {
      error.textContent = '';
      resume.disabled = true;
      try {
        await api('POST', sessionPath(s.id, '/resume'));
        onResumed(s.id);
      } catch (err) {
        resume.disabled = false;
        error.textContent = err.code === 'resume_unsupported'
          ? `The agent ${summary.agent || ''} cannot load a session (no session/load): this one can only be read.`
          : `Could not resume: ${err.message}`;
      }
    },
  }, 'Resume');
  const save = (format) => h('button', {
    type: 'button', class: 'ghost', dataset: { export: format },
    onclick: () => {
      const base = `mediatord-session-${s.id.slice(0, 24)}`;
      if (format === 'md') saveFile(new Blob([transcriptMarkdown(summary, events, names)], { type: 'text/markdown' }), `${base}.md`);
      else saveFile(new Blob([JSON.stringify({ session: summary, events }, null, 1)], { type: 'application/json' }), `${base}.json`);
    },
  }, format === 'md' ? 'Export Markdown' : 'Export JSON');
  const banner = h('div', { class: 'past-banner', role: 'note' },
    h('p', {}, `A past session, ${stateWords(summary)}, read from the history${summary.endedAt ? `, ended ${when(summary.endedAt)}` : ''}.`),
    h('div', { class: 'past-actions' }, resume, save('md'), save('json')), error);
  replace(main, h('div', { class: 'past' }, banner, view.root));
  view.setConnection('connecting');
  // Device names for the transcript, from the session's decisions (a device votes as its id).
  api('GET', sessionPath(s.id, '/permissions?audit=1')).then((r) => {
    for (const a of r.audit || []) if (a.voterDeviceName) names.set(a.voterClientId, a.voterDeviceName);
  }, () => {});
  await new Promise((resolve) => {
    const stream = new EventStream(s.id, {
      lastEventId: 0,
      onEvent: (envelope, { id }) => {
        if (envelope.type === 'replay_complete') {
          stream.stop();
          resolve();
          return;
        }
        if (events.length < MAX_EXPORT_EVENTS) events.push(id === null ? envelope : { id, ...envelope });
        apply(s, envelope, id);
      },
      onStatus: (status) => {
        if (status === 'ended' || status === 'unauthorized') resolve();
      },
    });
    stream.start();
  });
  s.ended = s.ended?.type === 'history' ? { type: 'history' } : s.ended;
  s.stale.add('header');
  view.update();
  view.setConnection('ended');
  view.conn.textContent = 'history';
  return view;
}
