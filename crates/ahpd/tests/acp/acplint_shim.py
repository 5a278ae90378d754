"""Sits between acplint 0.1.0 and `ahpd acp` and rewrites the three request shapes of acplint
that come from an ACP draft older than version 1, so its other checks reach the agent:

- `initialize` carries `protocolVersion` as the string "1"; version 1 has the integer 1, and the
  Rust SDK refuses the string (so without this every later check fails on "initialization must
  complete first");
- `session/prompt` carries the blocks as `content`; version 1 names them `prompt`;
- `session/set_config_option` names the option `optionId`; version 1 says `configId`.

Everything else passes through unchanged, both ways, one JSON message per line.
Run as `python acplint_shim.py AHPD acp`.
"""

import json
import subprocess
import sys
import threading


def fix(line: str) -> str:
    try:
        msg = json.loads(line)
    except ValueError:
        return line
    params = msg.get("params")
    if not isinstance(params, dict):
        return line
    method = msg.get("method")
    if method == "initialize" and isinstance(params.get("protocolVersion"), str):
        params["protocolVersion"] = int(params["protocolVersion"])
    elif method == "session/prompt" and "prompt" not in params and "content" in params:
        params["prompt"] = params.pop("content")
    elif method == "session/set_config_option" and "configId" not in params and "optionId" in params:
        params["configId"] = params.pop("optionId")
    else:
        return line
    return json.dumps(msg) + "\n"


def main() -> None:
    agent = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=sys.stdout, text=True)

    def pump() -> None:
        for line in sys.stdin:
            agent.stdin.write(fix(line))
            agent.stdin.flush()
        agent.stdin.close()

    threading.Thread(target=pump, daemon=True).start()
    sys.exit(agent.wait())


main()
