"""`picortex mcp` over stdio, driven by the MCP SDK's own client, on a home where the bot ran."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from tests.e2e.harness import running_bot, wall_time

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

pytestmark = pytest.mark.virtual_time

TOOLS = {
    "get_action_log",
    "get_status",
    "get_config",
    "set_config",
    "list_errors",
    "list_paused",
    "resolve_error",
    "get_trust_list",
    "forget_user",
    "get_access",
    "set_access",
    "get_user_attention",
    "set_user_attention",
    "get_chat",
    "set_chat",
}


@asynccontextmanager
async def mcp_session(home: Path, owner_id: int) -> AsyncIterator[ClientSession]:
    # Imported here: the SDK takes about a second of CPU to import, and only the worker
    # that runs these tests needs it.
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICORTEX_", "DISCORD_"))}
    env.update({"PICORTEX_HOME": str(home), "PICORTEX_OWNER_ID": str(owner_id)})
    params = StdioServerParameters(command=sys.executable, args=["-m", "picortex", "mcp"], env=env)
    # The server is a child process: the clock runs at wall speed while it works.
    with open(os.devnull, "w") as errlog, wall_time():
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def _call(session: ClientSession, name: str, **args: Any) -> tuple[bool, Any]:
    result = await session.call_tool(name, args)
    text = result.content[0].text  # type: ignore[union-attr]
    if result.is_error:
        return True, text
    return False, orjson.loads(text)


@pytest.mark.long(seconds=3)
async def test_every_tool_over_stdio(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "trusted")
        run.sim.model.script("Hello Alice.")
        asked = run.say(w.general_id, w.alice_id, f"{run.mention()} hi")
        await run.wait_event("reply", trigger_id=int(asked["id"]))
        error_id = await run.bot.store.call(
            lambda db: db.add_invocation_error(
                workspace_id=str(w.guild_id),
                persona="default",
                signal_id="1",
                stage="generate",
                error_message="APITimeoutError: the model did not answer",
                stack_trace=None,
                created_at=1.0,
            )
        )
        run.bot.events.flush()

        async with mcp_session(run.home, w.alice_id) as session:
            listed = await session.list_tools()
            by_name = {t.name: t for t in listed.tools}
            assert set(by_name) == TOOLS
            assert all(t.description and t.input_schema["type"] == "object" for t in listed.tools)
            assert by_name["resolve_error"].input_schema["required"] == ["id", "as"]
            assert by_name["get_action_log"].input_schema["properties"]["n"]["type"] == "integer"

            bad, log = await _call(session, "get_action_log", n=5, message_id=asked["id"])
            fields = ("message_id", "trigger_id", "parent_id", "signal_id")
            assert not bad and log
            assert all(any(str(e.get(f)) == asked["id"] for f in fields) for e in log)
            assert {e["event"] for e in log} >= {"decision", "reply"}
            _, decisions = await _call(session, "get_action_log", event="decision", n=1)
            assert len(decisions) == 1 and decisions[0]["event"] == "decision"
            _, by_user = await _call(session, "get_action_log", user_id=str(w.alice_id), n=100)
            assert by_user and all(str(w.alice_id) in orjson.dumps(e).decode() for e in by_user)

            _, status = await _call(session, "get_status")
            assert status["running"] is True and status["gateway"]["session_id"]

            _, config = await _call(session, "get_config")
            assert config["wakeword"] == {"value": "!s", "runtime": False}
            _, one = await _call(session, "get_config", key="poll_seconds")
            assert one == {"poll_seconds": {"value": "120", "runtime": False}}

            _, changed = await _call(session, "set_config", key="poll_seconds", value="30")
            assert changed["applied"] == "now" and changed["value"] == "30"
            # It reaches the running bot like `picortex config set` does.
            await run.wait_until(lambda: run.bot.source.refresh().poll_seconds == 30.0)
            _, chat = await _call(
                session, "set_config", key=f"attention.{w.general_id}", value="silent"
            )
            assert (chat["key"], chat["value"]) == (f"attention.{w.general_id}", "silent")
            # The running bot sees the change (its store notices another connection's write).

            def silent() -> bool:
                mode = run.bot.store.get_chat_config(w.general_id)
                return mode is not None and mode.attention_mode == "silent"

            await run.wait_until(silent)

            chat_id = str(w.general_id)
            _, own = await _call(session, "set_chat", chat_id=chat_id, threshold="0.6")
            assert own == {"chat_id": chat_id, "changed": True, "message": own["message"]}
            _, seen = await _call(session, "get_chat", chat_id=chat_id)
            assert (seen["attention_mode"], seen["discriminator_threshold"]) == ("silent", 0.6)
            bad, why = await _call(session, "set_chat", chat_id=chat_id, threshold="2")
            assert bad and why == "The threshold is a number from 0 to 1, or `default`."
            bad, why = await _call(session, "set_chat", chat_id=chat_id, model="a", threshold="1")
            assert bad and why == "Give exactly one of `prompt`, `model` or `threshold`."

            _, errors = await _call(session, "list_errors", unresolved=True)
            assert [e["id"] for e in errors] == [error_id]
            _, resolved = await _call(session, "resolve_error", id=error_id, **{"as": "fixed"})
            assert resolved["resolution"] == "fixed"
            _, errors = await _call(session, "list_errors", unresolved=True)
            assert errors == []
            _, paused = await _call(session, "list_paused")
            assert paused == []

            _, trust = await _call(session, "get_trust_list")
            assert trust == [
                {"user_id": str(w.alice_id), "tier": "admin", "owner": True},
                {"user_id": str(w.bob_id), "tier": "trusted", "owner": False},
            ]

            # Alice's mention is stored for recall; forgetting her deletes it at once.
            async def authors() -> list[int | None]:
                hits = await run.bot.store.read(
                    lambda db: db.search_memory("hi", since=0.0, workspace=None, limit=10)
                )
                return [h.author_id for h in hits]

            assert await authors() == [w.alice_id]
            assert by_name["forget_user"].annotations.destructive_hint is True
            _, forgot = await _call(session, "forget_user", user_id=str(w.alice_id))
            assert forgot == {"user_id": str(w.alice_id), "messages": 1, "observations": 0}
            assert await authors() == []

            # Bad arguments: a tool error with one sentence, never a crash.
            for name, args, words in (
                ("get_action_log", {"n": 0}, "`n` must be"),
                ("get_action_log", {"channel_id": "general"}, "Discord id"),
                ("get_config", {"key": "no_such_key"}, "unknown config key"),
                ("set_config", {"key": "poll_seconds", "value": "soon"}, "poll_seconds"),
                ("set_config", {"key": "wakeword"}, "`value` is required"),
                ("resolve_error", {"id": 999, "as": "fixed"}, "No invocation error has id 999"),
                ("resolve_error", {"id": error_id, "as": "maybe"}, "`as` must be one of"),
                ("forget_user", {}, "Discord id of the user to forget"),
                ("forget_user", {"user_id": "99999999999999999999"}, "Discord id"),
                ("no_such_tool", {}, "no tool named"),
            ):
                is_error, text = await _call(session, name, **args)
                assert is_error, (name, args)
                assert words in text and "\n" not in text and "Traceback" not in text
    # The bot has stopped: a change is stored and applies at the next start.
    async with mcp_session(run.home, w.alice_id) as session:
        _, status = await _call(session, "get_status")
        assert status["running"] is False
        _, later = await _call(session, "set_config", key="wakeword", value="!pc")
        assert later["applied"] == "next start" and "next start" in later["message"]
    from picortex.store import Store

    store = Store.open(run.home / "picortex.db")
    try:
        assert store.runtime_config()["wakeword"] == "!pc"
    finally:
        store.close()


@pytest.mark.long(seconds=3)
async def test_access_and_users_own_modes_reach_the_running_bot(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        async with mcp_session(run.home, w.alice_id) as session:
            _, access = await _call(session, "get_access")
            assert access == {"allow_roles": [], "allow_channels": [], "deny_channels": []}
            _, changed = await _call(
                session, "set_access", allow_roles=["55"], deny_channels=[str(w.random_id)]
            )
            assert changed["allow_roles"] == ["55"] and changed["applied"] == "now"
            assert changed["deny_channels"] == [str(w.random_id)]
            await run.wait_until(
                lambda: run.bot.source.refresh().access.deny_channels == (w.random_id,)
            )
            _, own = await _call(
                session,
                "set_user_attention",
                chat_id=str(w.general_id),
                user_id=str(w.bob_id),
                mode="always",
            )
            assert own["mode"] == "always"
            await run.wait_commit_seen(
                lambda: run.bot.store.get_user_attention(w.general_id, w.bob_id) == "always"
            )
            _, listed = await _call(session, "get_user_attention", chat_id=str(w.general_id))
            assert listed == [
                {"chat_id": str(w.general_id), "user_id": str(w.bob_id), "mode": "always"}
            ]
            for name, args, words in (
                ("set_access", {}, "Give at least one of"),
                ("set_access", {"allow_roles": "55"}, "must be a list"),
                ("set_access", {"deny_channels": ["general"]}, "Discord id"),
                ("set_user_attention", {"chat_id": "1", "user_id": "2", "mode": "x"}, "`mode`"),
                ("set_user_attention", {"chat_id": "a", "user_id": "2", "mode": "always"}, "id"),
            ):
                is_error, text = await _call(session, name, **args)
                assert is_error, (name, args)
                assert words in text and "\n" not in text and "Traceback" not in text
        # The bot acts on both: bob's plain message in #general is answered (his own mode),
        # his mention in the denied #random is recorded only.
        plain = run.say(w.general_id, w.bob_id, "what is green tea")
        await run.wait_event("reply", trigger_id=int(plain["id"]))
        hush = run.say(w.random_id, w.bob_id, f"{run.mention()} and oolong")
        found = await run.wait_event("decision", message_id=int(hush["id"]))
        assert found[0]["outcome"] == "record"
