"""The baseline of the turn_latency benchmark: the Python ACP SDK driving an agent directly.

Prints one JSON line: the per-turn latencies in milliseconds."""

import asyncio
import json
import sys
import time

from acp import spawn_agent_process, text_block


class Quiet:
    async def request_permission(self, *args, **kwargs):
        raise RuntimeError("the benchmark's agent asks nothing")

    async def session_update(self, *args, **kwargs):
        return None


async def main(command: str, cwd: str, turns: int, warmup: int) -> None:
    async with spawn_agent_process(Quiet(), command, cwd=cwd) as (conn, _proc):
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        times = []
        for i in range(warmup + turns):
            started = time.perf_counter()
            await conn.prompt(session_id=session.session_id, prompt=[text_block("echo the benchmark turn")])
            if i >= warmup:
                times.append((time.perf_counter() - started) * 1000.0)
        print(json.dumps({"ms": times}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
