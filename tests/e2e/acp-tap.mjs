#!/usr/bin/env node
// A transparent logging proxy for the ACP stdio channel, for diagnosing what an agent and the daemon
// say to each other:   node acp-tap.mjs <log-file> <agent command...>
// run.sh puts it in front of the agent when E2E_ACP_TAP=1 (the log lands in the phase's logs/ dir).
// Every NDJSON line is forwarded unchanged and appended to the log as
//   {"t": <ms since start>, "dir": "daemon->agent" | "agent->daemon", "msg": <parsed line or raw text>}
// stderr is passed through. stdin EOF is forwarded; the proxy exits with the agent's status. It runs in
// the agent's process group, so the daemon's group kill ends it together with the agent.
import { spawn } from 'node:child_process';
import fs from 'node:fs';

const [logFile, cmd, ...args] = process.argv.slice(2);
if (!logFile || !cmd) {
  process.stderr.write('usage: node acp-tap.mjs <log-file> <agent command...>\n');
  process.exit(2);
}
const t0 = Date.now();
const log = fs.createWriteStream(logFile, { flags: 'a' });
const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });

function tap(dir, src, dst) {
  let buf = '';
  src.on('data', (chunk) => {
    dst.write(chunk);
    buf += chunk.toString('utf8');
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (!line.trim()) continue;
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        msg = line;
      }
      log.write(JSON.stringify({ t: Date.now() - t0, dir, msg }) + '\n');
    }
  });
}

tap('daemon->agent', process.stdin, child.stdin);
tap('agent->daemon', child.stdout, process.stdout);
process.stdin.on('end', () => {
  log.write(JSON.stringify({ t: Date.now() - t0, dir: 'daemon->agent', msg: '<stdin EOF>' }) + '\n');
  child.stdin.end();
});
child.stdin.on('error', () => {});
process.stdout.on('error', () => {});
for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
  process.on(sig, () => child.kill(sig));
}
child.on('exit', (code, signal) => {
  log.write(JSON.stringify({ t: Date.now() - t0, dir: 'agent->daemon', msg: `<agent exited code=${code} signal=${signal}>` }) + '\n');
  log.end(() => process.exit(code ?? 1));
});
