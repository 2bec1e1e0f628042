// The audit page (`#/audit`): every decision, newest first, as a list that fits a phone (no table,
// no sideways scroll): what was asked, the decision in words, who and how, when (this browser's
// time), under which policy; filters by workspace, decision and date; more pages on demand; the
// same selection exported as CSV or JSON by the daemon (`GET /audit?format=…`). How an entry reads
// is the twin of src/audit.rs, so the app, `mediatord audit` and the CSV say the same words.

import { api, download } from './api.js';
import { h, replace } from './dom.js';
import { identity, identityEl } from './names.js';
import { reveal } from './reveal.js';

/** Entries fetched per page (the daemon allows up to 500). */
const PAGE = 50;

function chosenKind(e) {
  const id = e.outcome?.optionId;
  return (e.options || []).find((o) => o.optionId === id)?.kind || '';
}

/** What every door said of a request that reached outside the session's workspace (src/present.rs). */
const OUTSIDE_WORKSPACE = 'outside the workspace: it will be refused';

/**
 * The decision in words: `Allowed once`, `Always allowed`, `Allowed for this session`, `Rejected`, …;
 * for a request outside the workspace (`outsideWorkspace`), `Allowed once (outside the workspace: …)`.
 */
export function decision(e) {
  const words = decided(e);
  return e.outsideWorkspace?.length ? `${words} (${OUTSIDE_WORKSPACE})` : words;
}

function decided(e) {
  const by = e.resolvedBy || '';
  switch (e.status) {
    case 'pending': return 'Pending';
    case 'timed_out': return 'Timed out';
    case 'abandoned': return 'Abandoned (the daemon stopped)';
    case 'refused': return 'Refused: an agent is never a client of the daemon';
    case 'cancelled': return by === 'session_closed' ? 'Cancelled (the session ended)' : 'Cancelled';
    case 'selected': {
      const kind = chosenKind(e);
      if (by === 'rule') return kind.startsWith('allow') ? 'Allowed by rule' : 'Rejected by rule';
      const words = {
        'allow_always workspace': 'Always allowed in this workspace',
        allow_always: 'Always allowed',
        'reject_always workspace': 'Always rejected in this workspace',
        reject_always: 'Always rejected',
        'allow_once workspace': 'Allowed for this workspace',
        'allow_once session': 'Allowed for this session',
        allow_once: 'Allowed once',
        'reject_once workspace': 'Rejected for this workspace',
        'reject_once session': 'Rejected for this session',
        reject_once: 'Rejected',
      };
      return words[`${kind} ${e.remembered || ''}`] || words[kind] || `Chose ${e.outcome?.optionId || 'an option'}`;
    }
    default: return e.status || '';
  }
}

/** How it was decided: vote, link, ACP, reviewer, rule, timeout, cancel, session end, abandoned. */
export function how(e) {
  switch (e.resolvedBy) {
    case 'vote': return e.via === 'link' ? 'link' : e.via === 'acp' ? 'ACP' : e.via === 'reviewer' ? 'reviewer' : 'vote';
    case 'session_closed': return 'session end';
    case 'rule': case 'timeout': case 'cancel': case 'abandoned': case 'daemon': return e.resolvedBy;
    default: return '';
  }
}

/**
 * The operator's client by its id, or `operator` alone when the vote named none (a link to a target
 * without a clientId); a reviewer trusted with the kind by its name (`reviewer guard`: its ballot is
 * `reviewer:guard`'s, no client's).
 */
function operator(e) {
  if (e.via === 'reviewer') return `reviewer ${reveal(String(e.voterClientId || '').replace(/^reviewer:/, ''))}`;
  return e.voterClientId ? `operator · ${reveal(e.voterClientId)}` : 'operator';
}

/** Who decided, as an element: a device by its name (its id on demand), the operator's client, a rule. */
function whoEl(e) {
  if (e.resolvedBy === 'vote') {
    return e.voterDeviceName ? identityEl(reveal(e.voterDeviceName), e.voterClientId) : h('span', {}, operator(e));
  }
  if (e.resolvedBy === 'rule') return h('span', {}, `rule ${e.ruleId || ''}`);
  return null;
}

/** The words of `whoEl`, for text. */
export function who(e, withId = false) {
  if (e.resolvedBy === 'vote') return e.voterDeviceName ? identity(e.voterDeviceName, e.voterClientId, withId) : operator(e);
  if (e.resolvedBy === 'rule') return `rule ${e.ruleId || ''}`;
  return '';
}

function target(e) {
  const t = e.toolCall || {};
  return t.command || (t.paths || []).join(' ');
}

function when(ms) {
  return Number.isFinite(ms) ? new Date(ms).toLocaleString([], { dateStyle: 'medium', timeStyle: 'medium' }) : '';
}

function entryEl(e) {
  const t = e.toolCall || {};
  const words = decision(e);
  const tone = /^(Allowed|Always allowed)/.test(words) ? 'allow' : /^(Rejected|Always rejected)/.test(words) ? 'reject' : 'other';
  const by = whoEl(e);
  return h('li', { class: 'audit-entry', dataset: { requestId: e.requestId, decision: tone } },
    h('p', { class: 'audit-what' },
      h('span', { class: 'kind' }, t.kind || 'other'), ' ',
      h('span', { class: 'title' }, reveal(t.title || t.toolCallId || ''))),
    target(e) && target(e) !== t.title ? h('p', { class: 'audit-target' }, h('code', {}, reveal(target(e)))) : null,
    h('p', { class: 'audit-decision' },
      h('strong', { class: `decision decision-${tone}` }, words),
      by ? [' by ', by] : null,
      how(e) ? h('span', { class: 'hint' }, ` · ${how(e)}`) : null),
    h('p', { class: 'hint audit-meta' },
      h('time', { datetime: new Date(e.issuedAt || 0).toISOString() }, when(e.issuedAt)),
      ` · ${e.policy || ''} · `,
      h('a', { href: `#/s/${encodeURIComponent(e.sessionId)}`, title: e.workspace }, `session ${String(e.sessionId).slice(0, 12)}`)));
}

/** The `GET /audit` query of the filters (without cursor, limit or format). */
function query(f) {
  const q = new URLSearchParams();
  if (f.workspace) q.set('workspace', f.workspace);
  if (f.outcome) q.set('outcome', f.outcome);
  if (f.since) q.set('since', String(new Date(`${f.since}T00:00:00`).getTime()));
  if (f.until) q.set('until', String(new Date(`${f.until}T00:00:00`).getTime() + 86_400_000));
  return q;
}

/** Renders the audit page into `main`. `workspaces`: the daemon's, for the filter. */
export async function showAudit(main, { workspaces }) {
  const list = h('ol', { class: 'audit-list', 'aria-label': 'Decisions' });
  const status = h('p', { class: 'hint', role: 'status' });
  const error = h('p', { class: 'form-error', role: 'alert' });
  const more = h('button', { type: 'button', hidden: true }, 'Show older');
  const field = (label, el) => h('label', { class: 'field' }, h('span', {}, label), el);
  const workspace = h('select', { name: 'workspace' }, h('option', { value: '' }, 'All workspaces'),
    workspaces.map((w) => h('option', { value: w.cwd }, w.cwd)));
  const outcome = h('select', { name: 'outcome' }, [['', 'Any'], ['selected', 'Decided'], ['pending', 'Pending'],
    ['timed_out', 'Timed out'], ['cancelled', 'Cancelled'], ['abandoned', 'Abandoned'], ['refused', 'Refused (an agent as a client)']].map(([v, t]) => h('option', { value: v }, t)));
  const since = h('input', { type: 'date', name: 'since' });
  const until = h('input', { type: 'date', name: 'until' });
  const filters = () => ({ workspace: workspace.value, outcome: outcome.value, since: since.value, until: until.value });
  let cursor = null;
  let shownCount = 0;
  const load = async (reset) => {
    error.textContent = '';
    if (reset) {
      cursor = null;
      shownCount = 0;
      replace(list);
    }
    const q = query(filters());
    q.set('limit', String(PAGE));
    if (cursor) q.set('cursor', cursor);
    try {
      const page = await api('GET', `audit?${q}`);
      list.append(...page.entries.map(entryEl));
      shownCount += page.entries.length;
      cursor = page.nextCursor;
      more.hidden = !cursor;
      status.textContent = shownCount ? `${shownCount} decision${shownCount === 1 ? '' : 's'}${cursor ? ' so far' : ''}` : 'No decision matches.';
      if (!page.durable) status.textContent += ' (this daemon keeps no history: --ephemeral)';
    } catch (err) {
      error.textContent = `Could not read the audit: ${err.message}`;
    }
  };
  more.onclick = () => load(false);
  for (const el of [workspace, outcome, since, until]) el.onchange = () => load(true);
  const exporter = (format) => h('button', {
    type: 'button', class: 'ghost', dataset: { export: format },
    onclick: async () => {
      error.textContent = '';
      const q = query(filters());
      q.set('format', format);
      try {
        await download(`audit?${q}`, `mediatord-audit.${format}`);
      } catch (err) {
        error.textContent = `Could not export: ${err.message}`;
      }
    },
  }, `Export ${format.toUpperCase()}`);
  replace(main, h('section', { class: 'audit-view' },
    h('p', {}, h('a', { href: '#/' }, 'Back to the sessions')),
    h('h2', {}, 'Audit'),
    h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() },
      field('Workspace', workspace), field('Decision', outcome), field('From', since), field('To', until)),
    h('div', { class: 'exports' }, exporter('csv'), exporter('json')),
    status, error, list, more));
  await load(true);
}
