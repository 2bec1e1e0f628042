// A tiny Server-Sent-Events reader for fetch() response bodies (WHATWG streams), no dependencies.
//
// parseSse(body) yields one object per dispatched frame:
//   { id?: string, event?: string, data?: string, retry?: number, comments: string[] }
// following the SSE rules: lines end in \n, \r\n or \r; a blank line dispatches; `field: value`
// (one optional space after the colon is dropped); several `data:` lines are joined with \n;
// lines starting with `:` are comments. A frame with only comments or only `retry:` is still yielded
// (so callers can see `: heartbeat` and the first `retry:` frame), marked with `data === undefined`.

export async function* parseSse(body, { signal } = {}) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let frame = newFrame();
  const onAbort = () => reader.cancel().catch(() => {});
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (signal?.aborted) return;
        throw err;
      }
      if (chunk.done) {
        buf += decoder.decode();
        // A trailing frame without its blank line is not dispatched (per the SSE spec).
        return;
      }
      buf += decoder.decode(chunk.value, { stream: true });
      for (;;) {
        const m = /\r\n|\r|\n/.exec(buf);
        if (!m) break;
        // A lone \r at the end of the buffer may be the first half of \r\n: wait for more.
        if (m[0] === '\r' && m.index === buf.length - 1) break;
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === '') {
          if (frame.touched) yield finish(frame);
          frame = newFrame();
          continue;
        }
        frame.touched = true;
        if (line.startsWith(':')) {
          frame.comments.push(line.slice(1).trimStart());
          continue;
        }
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'data') frame.data.push(value);
        else if (field === 'event') frame.event = value;
        else if (field === 'id') frame.id = value;
        else if (field === 'retry' && /^\d+$/.test(value)) frame.retry = Number(value);
        // unknown fields are ignored
      }
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    reader.cancel().catch(() => {});
  }
}

function newFrame() {
  return { touched: false, data: [], comments: [] };
}

function finish(f) {
  const out = { comments: f.comments };
  if (f.id !== undefined) out.id = f.id;
  if (f.event !== undefined) out.event = f.event;
  if (f.retry !== undefined) out.retry = f.retry;
  if (f.data.length) out.data = f.data.join('\n');
  return out;
}
