// Reads one session's event stream S times at once through the official SDK: @qwen-code/sdk's
// DaemonClient.subscribeEvents, i.e. Node's fetch and the SDK's own SSE parser (parseSseStream),
// the way a client written against qwen serve reads it.
//
//   node bench/sdk-reader.mjs <sdk daemon module> <base URL> <session id> <streams> <timeout ms>
//
// Prints `ready` once every stream's handshake is accepted (the benchmark then sends the prompt),
// and at the end one JSON line per stream: stamped updates seen, whether the turn ended or the
// stream was evicted, the earliest emit stamp and latest receive time (µs since the epoch), and the
// emit → receive latency of each update (µs). Talks to the given loopback URL only.
import { pathToFileURL } from 'node:url';

const [sdkPath, baseUrl, sessionId, streamsArg, timeoutArg] = process.argv.slice(2);
if (!sdkPath || !baseUrl || !sessionId || !streamsArg || !timeoutArg) {
  console.error('usage: sdk-reader.mjs <sdk daemon module> <base URL> <session id> <streams> <timeout ms>');
  process.exit(2);
}
if (!baseUrl.startsWith('http://127.0.0.1:')) {
  console.error(`refusing a non-loopback base URL ${baseUrl}`);
  process.exit(2);
}
const { DaemonClient } = await import(pathToFileURL(sdkPath).href);
const streams = Number(streamsArg);
const deadline = AbortSignal.timeout(Number(timeoutArg));
const client = new DaemonClient({ baseUrl });

const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
let accepted = 0;
const onAccepted = () => {
  accepted += 1;
  if (accepted === streams) console.log('ready');
};

async function read() {
  const r = { updates: 0, ended: false, evicted: false, firstEmitUs: 0, lastRecvUs: 0, latenciesUs: [] };
  try {
    const events = client.subscribeEvents(sessionId, { signal: deadline, onSseStreamAccepted: onAccepted });
    for await (const ev of events) {
      const now = nowUs();
      if (ev.type === 'session_update') {
        const emitted = ev.data?.update?._meta?.emittedAtUs;
        if (typeof emitted === 'number') {
          r.updates += 1;
          r.latenciesUs.push(Math.max(0, now - emitted));
          if (r.firstEmitUs === 0 || emitted < r.firstEmitUs) r.firstEmitUs = emitted;
          r.lastRecvUs = now;
        }
      } else if (ev.type === 'turn_complete' || ev.type === 'turn_error') {
        r.ended = true;
        break;
      } else if (ev.type === 'client_evicted') {
        r.evicted = true;
        break;
      } else if (ev.type === 'session_closed' || ev.type === 'session_died') {
        break;
      }
    }
  } catch (e) {
    if (!deadline.aborted) r.error = String(e);
  }
  return r;
}

const results = await Promise.all(Array.from({ length: streams }, read));
// Exit only once the (asynchronous, when a pipe) stdout has taken every line.
process.stdout.write(results.map((r) => `${JSON.stringify(r)}\n`).join(''), () => process.exit(0));
