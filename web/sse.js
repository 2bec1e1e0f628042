// A session's event stream read with fetch(), not EventSource: EventSource cannot send the client id
// or the token as headers, and neither may go in a URL. This module parses the text/event-stream
// format itself, resumes after any drop with Last-Event-ID, and hands each event over exactly once
// (an event whose id is not above the last one handed over is dropped).

import { authHeaders } from './auth.js';
import { sessionPath, url } from './api.js';

/** First reconnection delay after a failure; doubled up to MAX_BACKOFF_MS. The daemon's `retry:` wins. */
const BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 15_000;
/** Longest line kept while parsing (a frame is one JSON line; the daemon caps bodies well below). */
const MAX_LINE = 64 * 1024 * 1024;

/**
 * Follows /session/<id>/events from `lastEventId` (0 replays everything the daemon still holds).
 * Callbacks: onEvent(envelope, {id, type}) for every frame with data; onStatus(status, detail) with
 * 'connecting' | 'live' | 'reconnecting' | 'ended' | 'unauthorized'.
 */
export class EventStream {
  constructor(sessionId, { lastEventId = 0, onEvent, onStatus }) {
    this.sessionId = sessionId;
    this.lastEventId = lastEventId;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.retryMs = null;
    this.failures = 0;
    this.controller = null;
    this.stopped = false;
    this.reconnects = 0;
  }

  start() {
    this.stopped = false;
    this.loop();
  }

  stop() {
    this.stopped = true;
    this.controller?.abort();
  }

  async loop() {
    while (!this.stopped) {
      const outcome = await this.connect();
      if (this.stopped || outcome === 'ended' || outcome === 'unauthorized') return;
      // 'evicted' (the daemon told us to come back) resumes at once; a failure waits.
      this.reconnects++;
      this.onStatus('reconnecting', { attempt: this.failures });
      if (outcome !== 'evicted') {
        const wait = this.retryAfter ?? Math.min(this.retryMs ?? BACKOFF_MS * 2 ** Math.max(0, this.failures - 1), MAX_BACKOFF_MS);
        this.retryAfter = null;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  /** One connection, until it ends; resolves to why it ended. */
  async connect() {
    this.controller = new AbortController();
    this.onStatus(this.reconnects ? 'reconnecting' : 'connecting', {});
    let res;
    try {
      res = await fetch(url(sessionPath(this.sessionId, '/events')), {
        headers: { Accept: 'text/event-stream', 'Last-Event-ID': String(this.lastEventId), ...authHeaders() },
        signal: this.controller.signal,
        credentials: 'same-origin',
        cache: 'no-store',
      });
    } catch {
      this.failures++;
      return 'failed';
    }
    if (res.status === 401) {
      this.onStatus('unauthorized', {});
      return 'unauthorized';
    }
    if (res.status === 404) {
      this.onStatus('ended', { reason: 'gone' });
      return 'ended';
    }
    if (!res.ok || !res.body) {
      const after = Number(res.headers.get('Retry-After'));
      if (Number.isFinite(after) && after > 0) this.retryAfter = after * 1000;
      this.failures++;
      return 'failed';
    }
    this.failures = 0;
    this.onStatus('live', {});
    let ended = null;
    try {
      ended = await this.read(res.body);
    } catch {
      // The connection dropped (or was aborted): resume from the last event handed over.
    }
    if (ended === 'terminal') {
      this.onStatus('ended', { reason: 'closed' });
      return 'ended';
    }
    return ended === 'evicted' ? 'evicted' : 'failed';
  }

  /** Reads frames until the body ends; 'terminal' after the session's last event, 'evicted' after client_evicted. */
  async read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    let frame = { id: null, event: 'message', data: [] };
    let outcome = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return outcome;
      buffer += value;
      if (buffer.length > MAX_LINE) throw new Error('event stream line too long');
      let start = 0;
      for (;;) {
        const nl = buffer.indexOf('\n', start);
        if (nl < 0) break;
        let line = buffer.slice(start, nl);
        start = nl + 1;
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          const result = this.dispatch(frame);
          if (result) outcome = result;
          frame = { id: null, event: 'message', data: [] };
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'data') frame.data.push(value);
        else if (field === 'event') frame.event = value;
        else if (field === 'id') frame.id = value;
        else if (field === 'retry' && /^\d+$/.test(value)) this.retryMs = Number(value);
      }
      buffer = buffer.slice(start);
      this.onBatch?.();
    }
  }

  /** Hands one frame over (once); says whether it ends the stream. */
  dispatch(frame) {
    if (frame.data.length === 0) return null;
    let envelope;
    try {
      envelope = JSON.parse(frame.data.join('\n'));
    } catch {
      return null;
    }
    const id = frame.id !== null && /^\d+$/.test(frame.id) ? Number(frame.id) : null;
    if (id !== null) {
      if (id <= this.lastEventId) return null; // already handed over before a reconnect
      this.lastEventId = id;
    }
    this.onEvent(envelope, { id, type: frame.event });
    if (frame.event === 'session_closed' || frame.event === 'session_died') return 'terminal';
    if (frame.event === 'client_evicted') return 'evicted';
    return null;
  }
}
