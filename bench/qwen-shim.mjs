// Stand-in for the qwen CLI entry when the benchmark drives `qwen serve`: qwen serve runs
// `node $QWEN_CLI_ENTRY --acp`, so pointing QWEN_CLI_ENTRY here makes it talk ACP to the synthetic
// agent (`mediatord demo-agent`) instead of a model. Node cannot exec-replace itself, so the agent
// is spawned with stdio inherited (its stdout is the pipe qwen serve reads), signals are forwarded,
// and the shim exits with the agent's status.
//
// Env: MEDIATORD_BENCH_AGENT = path of the mediatord binary (required).
import { spawn } from "node:child_process";

const bin = process.env.MEDIATORD_BENCH_AGENT;
if (!bin) {
  process.stderr.write("qwen-shim: MEDIATORD_BENCH_AGENT is not set\n");
  process.exit(2);
}
const child = spawn(bin, ["demo-agent"], { stdio: "inherit" });
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(sig, () => child.kill(sig));
}
child.on("error", (e) => {
  process.stderr.write(`qwen-shim: cannot start ${bin}: ${e.message}\n`);
  process.exit(2);
});
child.on("exit", (code, signal) => {
  if (signal) {
    // Die of the same signal; our forwarding handler must not catch it again.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code ?? 1);
  }
});
