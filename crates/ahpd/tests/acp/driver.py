"""An editor's side of `ahpd acp`, on the ACP Python SDK (agent-client-protocol 0.12.1).

Run by the crate's tests as `python driver.py SCENARIO AHPD WORKDIR [SESSION]`, in the
environment the test made (its configuration folder, the scripted model endpoint). Each scenario
checks what an editor would see and prints one JSON line with what the Rust side checks further;
a failed check exits non-zero with the reason.
"""

import asyncio
import json
import os
import sys
from typing import Any

import acp
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    RequestPermissionResponse,
)


def fail(why: str) -> None:
    print(f"driver: {why}", file=sys.stderr)
    sys.exit(1)


def check(ok: bool, why: str) -> None:
    if not ok:
        fail(why)


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


class Editor:
    """Records every update and answers permission requests from a script of option ids."""

    def __init__(self, answers: list[str]) -> None:
        self.updates: list[dict] = []
        self.answers = list(answers)
        self.permissions: list[dict] = []
        self.asked = asyncio.Event()
        self.hold: asyncio.Future | None = None

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append(
            {"toolCall": dump(tool_call), "options": [dump(o) for o in options]}
        )
        if os.environ.get("DRIVER_TRACE"):
            print("PERMISSION", json.dumps(self.permissions[-1]), file=sys.stderr)
        self.asked.set()
        if self.hold is not None:
            await self.hold
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        choice = self.answers.pop(0)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(dump(update))
        if os.environ.get("DRIVER_TRACE"):
            print(json.dumps(self.updates[-1]), file=sys.stderr)

    def kinds(self) -> list[str]:
        return [u["sessionUpdate"] for u in self.updates]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(
            u["content"].get("text", "") for u in self.updates if u["sessionUpdate"] == kind
        )

    def on_connect(self, conn) -> None:
        pass


def text(t: str):
    return acp.text_block(t)


async def connect(editor: Editor, ahpd: str, work: str, **kwargs):
    return acp.spawn_agent_process(editor, ahpd, "acp", cwd=work, env=dict(os.environ), **kwargs)


async def initialize(conn) -> dict:
    init = await conn.initialize(
        protocol_version=acp.PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
    )
    return dump(init)


def option(session: dict, oid: str) -> dict:
    found = [o for o in session.get("configOptions", []) if o["id"] == oid]
    check(len(found) == 1, f"no config option {oid} in {session.get('configOptions')}")
    return found[0]


async def permissions(ahpd: str, work: str) -> dict:
    """Read a file, allow its edit once, reject a write: the file changes, the new one is not
    made."""
    editor = Editor(["allow-once", "deny"])
    async with await connect(editor, ahpd, work) as (conn, _proc):
        await initialize(conn)
        session = dump(await conn.new_session(cwd=work, mcp_servers=[]))
        sid = session["sessionId"]
        await conn.set_config_option(config_id="mode", session_id=sid, value="default")
        done = dump(await conn.prompt(session_id=sid, prompt=[text("change hello")]))
        check(done["stopReason"] == "end_turn", f"the turn ended {done}")
        check(len(editor.permissions) == 2, f"asked {len(editor.permissions)} times")
        first = editor.permissions[0]
        kinds = {o["kind"] for o in first["options"]}
        check(
            kinds == {"allow_once", "allow_always", "reject_once"},
            f"the options offered were {first['options']}",
        )
        diff = [c for c in first["toolCall"].get("content", []) if c.get("type") == "diff"]
        check(len(diff) == 1, f"the edit's approval showed no diff: {first['toolCall']}")
        check(diff[0]["oldText"] == "hello\n" and diff[0]["newText"] == "goodbye\n", f"diff {diff}")
        calls = [u for u in editor.updates if u["sessionUpdate"] == "tool_call"]
        check([c["kind"] for c in calls] == ["read", "edit", "edit"], f"tool calls {calls}")
        # What an editor shows of the first call, once every update about it is applied.
        first_call = {}
        for u in editor.updates:
            if u.get("toolCallId") == calls[1]["toolCallId"]:
                first_call.update(u)
        check(
            any(loc["path"].endswith("a.txt") for loc in first_call.get("locations", [])),
            f"the edit has no location: {first_call}",
        )
        check(first_call.get("status") == "completed", f"the edit ended {first_call}")
        statuses = [
            u.get("status")
            for u in editor.updates
            if u["sessionUpdate"] == "tool_call_update" and u["toolCallId"] == calls[2]["toolCallId"]
        ]
        check("failed" in statuses, f"the rejected call's statuses were {statuses}")
        check(editor.text() == "one edit made, one refused", f"the reply was {editor.text()!r}")
        return {"session": sid, "updates": editor.kinds()}


async def cancel(ahpd: str, work: str) -> dict:
    """Cancel while a command waits for approval: the prompt answers `cancelled`."""
    editor = Editor([])
    editor.hold = asyncio.get_running_loop().create_future()
    async with await connect(editor, ahpd, work) as (conn, _proc):
        await initialize(conn)
        session = dump(await conn.new_session(cwd=work, mcp_servers=[]))
        sid = session["sessionId"]
        await conn.set_config_option(config_id="mode", session_id=sid, value="default")
        turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text("run it")]))
        await editor.asked.wait()
        await conn.cancel(session_id=sid)
        # An editor answers its open permission requests `cancelled` once it cancels.
        editor.hold.set_result(None)
        done = dump(await turn)
        check(done["stopReason"] == "cancelled", f"the cancelled turn ended {done}")
        return {"session": sid}


async def first_turn(ahpd: str, work: str) -> dict:
    """One plain turn, to be loaded by another process."""
    editor = Editor([])
    async with await connect(editor, ahpd, work) as (conn, _proc):
        await initialize(conn)
        sid = dump(await conn.new_session(cwd=work, mcp_servers=[]))["sessionId"]
        done = dump(await conn.prompt(session_id=sid, prompt=[text("say hello")]))
        check(done["stopReason"] == "end_turn", f"the turn ended {done}")
        check(editor.text() == "hello there", f"the reply was {editor.text()!r}")
        return {"session": sid}


async def load(ahpd: str, work: str, sid: str) -> dict:
    """List the folder's sessions, load one: its turns come back before the answer."""
    editor = Editor([])
    async with await connect(editor, ahpd, work) as (conn, _proc):
        init = await initialize(conn)
        check(init["agentCapabilities"].get("loadSession") is True, f"capabilities {init}")
        listed = dump(await conn.list_sessions(cwd=work))
        ids = [s["sessionId"] for s in listed["sessions"]]
        check(sid in ids, f"{sid} is not listed for {work}: {listed}")
        row = [s for s in listed["sessions"] if s["sessionId"] == sid][0]
        check(os.path.samefile(row["cwd"], work), f"listed with cwd {row['cwd']}")
        elsewhere = dump(await conn.list_sessions(cwd="/"))
        check(
            sid not in [s["sessionId"] for s in elsewhere["sessions"]],
            f"listed for / too: {elsewhere}",
        )
        await conn.load_session(cwd=work, session_id=sid, mcp_servers=[])
        # Everything replayed arrived before the answer.
        replayed = list(editor.updates)
        user = "".join(
            u["content"]["text"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"
        )
        agent = "".join(
            u["content"]["text"] for u in replayed if u["sessionUpdate"] == "agent_message_chunk"
        )
        check(user == "say hello", f"the replayed prompt was {user!r}")
        check(agent == "hello there", f"the replayed reply was {agent!r}")
        done = dump(await conn.prompt(session_id=sid, prompt=[text("again")]))
        check(done["stopReason"] == "end_turn", f"the second turn ended {done}")
        return {"session": sid, "replayed": [u["sessionUpdate"] for u in replayed]}


async def config(ahpd: str, work: str) -> dict:
    """The mode, model and thinking options, changed through set_config_option."""
    editor = Editor([])
    async with await connect(editor, ahpd, work) as (conn, _proc):
        await initialize(conn)
        session = dump(await conn.new_session(cwd=work, mcp_servers=[]))
        sid = session["sessionId"]
        mode = option(session, "mode")
        check(mode.get("category") == "mode", f"mode {mode}")
        values = [o["value"] for o in mode["options"]]
        check(
            sorted(values)
            == sorted(["auto", "default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]),
            f"the modes were {values}",
        )
        model = option(session, "model")
        models = [o["value"] for o in model["options"]]
        check(len(models) == 2, f"the model catalogue offered {models}")
        check(model["currentValue"] in models, f"the model in force is {model['currentValue']}")
        check(option(session, "thought_level")["category"] == "thought_level", "thought_level")
        other = [m for m in models if m != model["currentValue"]][0]
        changed = dump(await conn.set_config_option(config_id="model", session_id=sid, value=other))
        check(option(changed, "model")["currentValue"] == other, f"after the change: {changed}")
        changed = dump(await conn.set_config_option(config_id="mode", session_id=sid, value="plan"))
        check(option(changed, "mode")["currentValue"] == "plan", f"after the change: {changed}")
        try:
            await conn.set_config_option(config_id="mode", session_id=sid, value="loud")
            fail("a mode outside the list was taken")
        except acp.RequestError as e:
            check("loud" in str(e.data or e), f"the refusal said {e}")
        done = dump(await conn.prompt(session_id=sid, prompt=[text("hi")]))
        check(done["stopReason"] == "end_turn", f"the turn ended {done}")
        updated = [u for u in editor.updates if u["sessionUpdate"] == "config_option_update"]
        check(len(updated) >= 1, f"no config_option_update among {editor.kinds()}")
        check(
            "available_commands_update" in editor.kinds(), f"no commands update: {editor.kinds()}"
        )
        return {"session": sid, "model": other}


class Asker(Editor):
    """An editor that shows forms: it answers every question with the first option, or "blue"."""

    def __init__(self) -> None:
        super().__init__([])
        self.forms: list[dict] = []

    async def create_elicitation(self, message, mode, **kwargs):
        form = dump(mode)
        self.forms.append({"message": message, **form})
        content = {}
        for key, prop in form["requestedSchema"]["properties"].items():
            if prop.get("oneOf"):
                content[key] = prop["oneOf"][0]["const"]
            else:
                content[key] = "blue"
        return AcceptElicitationResponse(action="accept", content=content)


async def question(ahpd: str, work: str, forms: bool) -> dict:
    """The agent's question: a form when the editor shows them, else the sentence for the model."""
    editor = Asker() if forms else Editor([])
    # The SDK counts elicitation/create among its unstable methods; ACP 1 has it.
    async with await connect(editor, ahpd, work, use_unstable_protocol=forms) as (conn, _proc):
        caps = ClientCapabilities(
            elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()) if forms else None
        )
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps)
        sid = dump(await conn.new_session(cwd=work, mcp_servers=[]))["sessionId"]
        done = dump(await conn.prompt(session_id=sid, prompt=[text("ask me")]))
        check(done["stopReason"] == "end_turn", f"the turn ended {done}")
        if forms:
            check(len(editor.forms) == 1, f"forms shown: {editor.forms}")
            props = editor.forms[0]["requestedSchema"]["properties"]
            check(set(props) == {"colour", "size"}, f"the form asked {props}")
            check(
                [o["const"] for o in props["size"]["oneOf"]] == ["small", "large"],
                f"the choices were {props['size']}",
            )
        return {"session": sid}


async def main() -> None:
    scenario, ahpd, work = sys.argv[1], sys.argv[2], sys.argv[3]
    if scenario == "permissions":
        out = await permissions(ahpd, work)
    elif scenario == "cancel":
        out = await cancel(ahpd, work)
    elif scenario == "first_turn":
        out = await first_turn(ahpd, work)
    elif scenario == "load":
        out = await load(ahpd, work, sys.argv[4])
    elif scenario == "question_form":
        out = await question(ahpd, work, True)
    elif scenario == "question_unasked":
        out = await question(ahpd, work, False)
    elif scenario == "config":
        out = await config(ahpd, work)
    else:
        fail(f"no scenario {scenario}")
        return
    print(json.dumps(out))


asyncio.run(main())
