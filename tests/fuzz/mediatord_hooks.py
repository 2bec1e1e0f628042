"""Schemathesis hooks for tests/fuzz.rs: a server-error check that allows only the documented agent
5xx answers (the daemon relays an agent's failure; it is not the daemon's own fault)."""

import schemathesis
from schemathesis.core.failures import Failure

# 502 agent_error / agent_start_failed, 503 agent_exited / daemon_draining / the load limits (the
# request-body budget and the ACP connection cap among them), 504 init_timeout: each documented in docs/openapi.json with its code.
# And 501 batch_not_supported: what ACP's transport RFD tells a Streamable HTTP server to answer a
# JSON-RPC batch (docs/protocol.md §16), not a fault.
ALLOWED_5XX = {
    501: {"batch_not_supported"},
    502: {"agent_error", "agent_start_failed"},
    503: {
        "agent_exited",
        "daemon_draining",
        "session_limit_exceeded",
        "prompt_queue_full",
        "body_budget_exceeded",
        "acp_connection_limit",
    },
    504: {"init_timeout"},
}


@schemathesis.check
def no_undocumented_server_error(ctx, response, case):
    status = response.status_code
    if status < 500:
        return None
    try:
        code = response.json().get("code")
    except Exception:  # noqa: BLE001 - any unparsable 5xx body is a failure
        code = None
    if code in ALLOWED_5XX.get(status, set()):
        return None
    raise Failure(
        operation=case.operation.label,
        title="Server error outside the documented agent errors",
        message=f"{status} with code {code!r}",
    )
