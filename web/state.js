// One session as this page knows it, built from its event stream alone (docs/protocol.md §5): the
// timeline of turns and notes, the prompts still queued, tool calls, plans, permission requests and
// their votes, rules, the current model and mode. Pure data: the view (view.js) renders what changed,
// listed in `dirty` and `added`.
//
// Turns run one at a time in the order their prompts were queued, and the daemon echoes each prompt
// (user_message_chunk) when it is queued: so the first unfinished prompt is the running one and the
// others wait, and a turn enters the timeline when it starts.

// Text kept per message or thought (MAX_TEXT): beyond it the start is dropped, a bound on memory
// per session that the terminal client keeps too (limits.js is written from src/bounds.rs).
import { MAX_TEXT } from './limits.js';

export function createSession(summary, me) {
  return {
    id: summary.sessionId,
    summary,
    me,
    lastEventId: 0,
    /** Turns and notes in display order. */
    entries: [],
    turns: new Map(),
    /** promptIds of turns not finished yet, in the order they will run. */
    fifo: [],
    /** toolCallId → {turn, item} */
    tools: new Map(),
    /** requestId → permission */
    permissions: new Map(),
    shells: new Map(),
    models: summary.models ?? null,
    modes: summary.modes ?? null,
    rules: null,
    ended: null,
    replaying: false,
    /** Objects whose view is stale, and entries new to the timeline, since the view last looked. */
    dirty: new Set(),
    added: [],
    /** Other parts of the view that are stale: 'queue', 'pending', 'header', 'rules'. */
    stale: new Set(),
  };
}

function turnObject(promptId, originator) {
  return { kind: 'turn', promptId, originator, user: [], items: [], state: 'queued', stopReason: null, error: null };
}

/** Puts `entry` at the end of the timeline. */
function show(s, entry) {
  s.entries.push(entry);
  s.added.push(entry);
}

/** A note at `at`: the time of the event it is about (its `_meta.serverTimestamp`, so a past
 * session's notes say when things happened, not when the page read them), else now. */
function note(s, text, level = 'info', at = Date.now()) {
  show(s, { kind: 'note', text, level, at });
}

/** When the daemon published `env` (ms), if it said. */
function eventTime(env) {
  const at = env?._meta?.serverTimestamp;
  return Number.isFinite(at) ? at : undefined;
}

/** Starts `turn` (it enters the timeline). */
function start(s, turn) {
  if (turn.state !== 'queued') return;
  turn.state = 'running';
  show(s, turn);
  s.stale.add('queue');
  s.stale.add('header');
}

/** The turn of prompt `promptId`, made (queued, or started when nothing runs before it) if new. */
function turnOf(s, promptId, originator) {
  let turn = s.turns.get(promptId);
  if (!turn) {
    turn = turnObject(promptId, originator);
    s.turns.set(promptId, turn);
    s.fifo.push(promptId);
    s.stale.add('queue');
    if (s.fifo[0] === promptId) start(s, turn);
  }
  return turn;
}

/** Where an agent update goes: its prompt's turn (started now if the stream skipped ahead), or a turn
 * of its own for updates outside any prompt. */
function agentTurn(s, env) {
  if (env.promptId) {
    const turn = turnOf(s, env.promptId, env.originatorClientId);
    start(s, turn);
    return turn;
  }
  const last = s.entries[s.entries.length - 1];
  if (last && last.kind === 'turn' && last.promptId === null) return last;
  const turn = turnObject(null, null);
  turn.state = 'done';
  show(s, turn);
  return turn;
}

function finish(s, promptId, update) {
  const turn = s.turns.get(promptId);
  if (!turn) return;
  start(s, turn);
  Object.assign(turn, update);
  s.fifo = s.fifo.filter((p) => p !== promptId);
  s.dirty.add(turn);
  s.stale.add('queue');
  s.stale.add('header');
  const next = s.turns.get(s.fifo[0]);
  if (next) start(s, next);
}

function appendText(s, turn, kind, text) {
  const last = turn.items[turn.items.length - 1];
  if (last && last.kind === kind) {
    last.text = (last.text + text).slice(-MAX_TEXT);
    s.dirty.add(last);
    return;
  }
  const item = { kind, text: text.slice(-MAX_TEXT) };
  turn.items.push(item);
  s.dirty.add(turn);
}

/** Non-null fields of `from` over `into` (ACP's tool-call update rule). */
function overlay(into, from) {
  for (const [k, v] of Object.entries(from)) if (v !== null && v !== undefined && k !== 'sessionUpdate') into[k] = v;
  return into;
}

function sessionUpdate(s, env) {
  const update = env.data?.update || {};
  switch (update.sessionUpdate) {
    case 'user_message_chunk': {
      const turn = turnOf(s, env.promptId ?? `unknown-${env.id}`, env.originatorClientId);
      if (update.content) turn.user.push(update.content);
      s.dirty.add(turn);
      s.stale.add('queue');
      return;
    }
    case 'agent_message_chunk':
    case 'agent_thought_chunk': {
      const turn = agentTurn(s, env);
      const kind = update.sessionUpdate === 'agent_message_chunk' ? 'message' : 'thought';
      const content = update.content || {};
      if (content.type === 'text' || typeof content.text === 'string') appendText(s, turn, kind, String(content.text ?? ''));
      else {
        turn.items.push({ kind: 'content', content });
        s.dirty.add(turn);
      }
      return;
    }
    case 'tool_call':
    case 'tool_call_update': {
      const id = update.toolCallId;
      const known = id !== undefined && s.tools.get(id);
      if (known) {
        if (update.sessionUpdate === 'tool_call') known.item.call = overlay({}, update);
        else overlay(known.item.call, update);
        s.dirty.add(known.item);
      } else {
        const turn = agentTurn(s, env);
        const item = { kind: 'tool', call: overlay({}, update) };
        turn.items.push(item);
        if (id !== undefined) s.tools.set(id, { turn, item });
        s.dirty.add(turn);
      }
      s.stale.add('pending'); // a pending card shows what was announced for its tool call
      return;
    }
    case 'plan': {
      const turn = agentTurn(s, env);
      let plan = turn.items.find((i) => i.kind === 'plan');
      if (!plan) {
        plan = { kind: 'plan', entries: [] };
        turn.items.push(plan);
        s.dirty.add(turn);
      }
      plan.entries = Array.isArray(update.entries) ? update.entries : [];
      s.dirty.add(plan);
      return;
    }
    case 'current_mode_update': {
      const mode = update.currentModeId;
      if (typeof mode !== 'string') return;
      if (s.modes?.currentModeId !== mode) note(s, `Mode: ${modeName(s, mode)}`, 'info', eventTime(env));
      s.modes = { ...(s.modes || { availableModes: [] }), currentModeId: mode };
      s.stale.add('header');
      return;
    }
    default:
      // available_commands_update and the like: nothing to show.
  }
}

export function modeName(s, id) {
  return s.modes?.availableModes?.find((m) => m.id === id)?.name || id;
}

export function modelName(s, id) {
  return s.models?.availableModels?.find((m) => m.modelId === id)?.name || id;
}

/** Applies one event envelope (its id, when it has one, already checked to be new). */
export function apply(s, env, id) {
  if (id !== null && id !== undefined) s.lastEventId = id;
  const data = env.data || {};
  switch (env.type) {
    case 'session_update':
      sessionUpdate(s, env);
      break;
    case 'turn_complete':
      finish(s, data.promptId, { state: 'done', stopReason: data.stopReason || 'end_turn' });
      break;
    case 'turn_error':
      finish(s, data.promptId, { state: 'done', stopReason: 'error', error: data.message || data.code });
      break;
    case 'model_switched':
      // A past session knows its models only from its events: the model switched to, at least.
      s.models = { ...(s.models || { availableModels: [] }), currentModelId: data.modelId };
      note(s, `Model: ${modelName(s, data.modelId)}`, 'info', eventTime(env));
      s.stale.add('header');
      break;
    case 'permission_request': {
      const turn = agentTurn(s, env);
      const item = { kind: 'permission', requestId: data.requestId };
      const perm = {
        requestId: data.requestId,
        request: data,
        originator: env.originatorClientId ?? null,
        partial: null,
        resolved: null,
        error: null,
        // The reviewers' verdicts so far (docs/protocol.md §8.6): a pending request fetched after a
        // resync carries those already given.
        reviews: Array.isArray(data.reviews) ? [...data.reviews] : [],
        item,
        turn,
      };
      s.permissions.set(data.requestId, perm);
      turn.items.push(item);
      s.dirty.add(turn);
      s.stale.add('pending');
      break;
    }
    case 'permission_partial_vote': {
      const perm = s.permissions.get(data.requestId);
      if (perm) perm.partial = data;
      s.stale.add('pending');
      break;
    }
    case 'permission_reviewed': {
      // A reviewer's verdict that decided nothing: shown on the card until the people decide.
      const perm = s.permissions.get(data.requestId);
      if (perm && data.review && !perm.reviews.some((r) => r.clientId === data.review.clientId)) {
        perm.reviews.push(data.review);
        s.dirty.add(perm.item);
      }
      s.stale.add('pending');
      break;
    }
    case 'permission_resolved': {
      const perm = s.permissions.get(data.requestId);
      if (perm) {
        perm.resolved = data;
        if (Array.isArray(data.reviews)) perm.reviews = data.reviews;
        s.dirty.add(perm.item);
      }
      s.stale.add('pending');
      break;
    }
    case 'permission_forbidden': {
      const perm = s.permissions.get(data.requestId);
      if (perm && data.clientId === s.me) perm.error = forbiddenText(data.reason);
      s.stale.add('pending');
      break;
    }
    case 'turn_changes': {
      // What the turn changed in the workspace (docs/protocol.md §18.2), shown in the turn.
      const turn = (data.promptId && s.turns.get(data.promptId)) || agentTurn(s, env);
      turn.items.push({ kind: 'changes', data, diffs: new Map() });
      s.dirty.add(turn);
      break;
    }
    case 'session_rewound': {
      const put = Array.isArray(data.filesChanged) ? data.filesChanged.length : 0;
      const failed = Array.isArray(data.filesFailed) ? data.filesFailed : [];
      const by = data.clientId === s.me ? 'You' : data.deviceName || data.clientId || 'A client';
      note(s, `${by} rewound the files to before turn ${Number(data.targetTurnIndex) + 1}: ${put} put back` +
        (failed.length ? `, ${failed.length} not: ${failed.join('; ')}` : ''), failed.length ? 'warn' : 'info', eventTime(env));
      break;
    }
    case 'agent_refused_as_client':
      note(s, `The agent tried to act as a client of the daemon, and was refused: ${data.attempt || ''}`, 'error');
      break;
    case 'policy_updated':
      s.rules = Array.isArray(data.rules) ? data.rules : [];
      s.stale.add('rules');
      break;
    case 'user_shell_command': {
      const entry = { kind: 'shell', command: data.command, originator: data.originatorClientId, result: null };
      s.shells.set(data.shellId, entry);
      show(s, entry);
      break;
    }
    case 'user_shell_result': {
      const entry = s.shells.get(data.shellId);
      if (entry) {
        entry.result = data;
        s.dirty.add(entry);
      }
      break;
    }
    case 'session_closed':
    case 'session_died':
      s.ended = { type: env.type, ...data };
      for (const promptId of [...s.fifo]) finish(s, promptId, { state: 'done', stopReason: 'ended' });
      note(s, endText(env.type, data), env.type === 'session_died' ? 'error' : 'info', eventTime(env));
      s.stale.add('header');
      s.stale.add('pending');
      break;
    case 'state_resync_required':
      note(s, `Resynced: events ${data.lastDeliveredId + 1}–${data.earliestAvailableId - 1} are no longer held by ` +
        'the daemon and are missing above.', 'warn');
      s.stale.add('resync');
      break;
    case 'replay_complete':
      s.replaying = false;
      break;
    default:
      // client_evicted (the stream reconnects by itself), permission_already_resolved, future types.
  }
}

function endText(type, data) {
  if (type === 'session_died') {
    const how = data.signalCode ? ` (${data.signalCode})` : data.exitCode !== null && data.exitCode !== undefined ? ` (exit ${data.exitCode})` : '';
    return `The agent exited${how}: this session has ended.`;
  }
  if (data.reason === 'daemon_shutdown') return 'The daemon shut down: this session has ended.';
  return data.closedBy ? `Session closed by ${data.closedBy}.` : 'Session closed.';
}

export function forbiddenText(reason) {
  if (reason === 'designated_mismatch') return 'Only the designated client may decide this request.';
  if (reason === 'remote_not_allowed') return 'Only votes from the daemon’s own machine count under local-only.';
  if (reason === 'group_required') return 'Only a member of the rule’s group may approve this request; anyone may reject it.';
  return `Vote refused (${reason}).`;
}

/** Pending permission requests, oldest first. */
export function pending(s) {
  return [...s.permissions.values()].filter((p) => !p.resolved && !s.ended);
}

/** The prompts waiting behind the running turn. */
export function queued(s) {
  return s.fifo.map((p) => s.turns.get(p)).filter((t) => t && t.state === 'queued');
}

/** The running turn, if any. */
export function running(s) {
  const turn = s.turns.get(s.fifo[0]);
  return turn && turn.state === 'running' ? turn : null;
}

/** Adds pending requests fetched after a resync that the stream no longer carried. */
export function addPending(s, list) {
  for (const request of list) {
    if (s.permissions.has(request.requestId)) continue;
    apply(s, { type: 'permission_request', data: request }, null);
  }
}
