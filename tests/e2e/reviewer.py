"""The e2e suite's `command` reviewer (docs/operations.md#reviewers): one request line in, one
verdict line out. A shell command that pipes into a shell is for a person; `rm -rf` is denied;
what only reads (`ls`, `cat`, `sha256sum`, a read or search tool call) is allowed; anything else is for a person.
"""
import json
import re
import sys

READS = re.compile(r"^\s*(ls|cat|head|wc|pwd|find|grep|sha256sum|md5sum|file)(\s|$)")

for line in sys.stdin:
    req = json.loads(line)
    raw = req.get("rawInput") or {}
    command = raw.get("command") if isinstance(raw, dict) else None
    command = command if isinstance(command, str) else ""
    if re.search(r"\|\s*(ba|z)?sh\b", command):
        answer = ("escalate", "pipes a download into a shell: a person should look")
    elif re.search(r"\brm\s+-[a-zA-Z]*r[a-zA-Z]*f|\brm\s+-[a-zA-Z]*f[a-zA-Z]*r", command):
        answer = ("deny", "rm -rf deletes for good")
    elif req.get("kind") in ("read", "search") or READS.match(command):
        answer = ("allow", "reads only")
    else:
        answer = ("escalate", "not a read: a person decides")
    print(json.dumps({"id": req["id"], "verdict": answer[0], "reason": answer[1]}), flush=True)
