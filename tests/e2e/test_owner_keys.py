"""The owner-only config keys (SPEC 6: `budget.*`, `models.*`, `prices.*`, `response_policy.*`)
through every door that changes config: chat, slash, panel and MCP.

The owner (and the panel and MCP, which act as the owner) may set each of them within its
bounds; an admin may not; a value past its bounds is refused the same way everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from picortex.core import commands as cmds
from picortex.errors import PicortexError
from picortex.mcp import Tools
from picortex.store import Store
from tests.e2e.harness import Running, running_bot, wall_time

pytestmark = pytest.mark.virtual_time

# From SPEC 3 and 6: a key of each owner-only group, a value the owner may set (and the text
# it is stored as), and one past the key's bounds.
OWNER_KEYS = [
    ("budget.ceiling_usd", "2.5", "2.5", "100000"),
    ("models.general", "claude-sonnet-9", "claude-sonnet-9", "not a model"),
    ("prices.claude-haiku-5-5.input", "0.000001", "0.000001", "-1"),
    ("response_policy.default_mode", "dm", "dm", "loud"),
]
ENTRY_POINTS = ["chat", "slash", "panel", "mcp"]


async def _set(run: Running, entry: str, who: int, key: str, value: str) -> tuple[str, str]:
    """Set `key` through one entry point as `who`: the outcome (`ok`, `error`, `denied`) and
    what the requester was told."""
    w = run.world
    if entry == "chat":
        msg = run.say(w.general_id, who, f"{run.mention()} !s config set {key} {value}")
        [event] = await run.wait_event("command", message_id=int(msg["id"]))
        await run.wait_event("reply", trigger_id=int(msg["id"]))
        # `config` is a sensitive command: its answer goes to the requester's DM.
        return event["result"], run.sim.bot_messages(run.dm_id(who))[-1]["content"]
    if entry == "slash":
        inter = run.sim.run_slash(w.general_id, who, f"picortex config set key:{key} value:{value}")
        [event] = await run.wait_event("command", message_id=inter.id)
        await run.wait_until(lambda: bool(inter.answers))
        return event["result"], inter.text
    if entry == "panel":
        changed = await run.bot.panel().run_command(cmds.ConfigSet(key, value))
        return ("ok" if changed.ok else "error"), changed.message
    tools = Tools(run.bot.settings)
    try:
        with wall_time():
            done = await trio.to_thread.run_sync(
                tools.call, "set_config", {"key": key, "value": value}
            )
    except PicortexError as exc:  # an MCP tool error (`isError`): one sentence
        return "error", str(exc)
    return "ok", str(done["message"])


def _stored(home: Path) -> dict[str, str]:
    with Store.open(home / "picortex.db") as store:
        return store.runtime_config()


@pytest.mark.parametrize("entry", ENTRY_POINTS)
async def test_owner_only_keys_through_every_entry_point(tmp_path: Path, entry: str) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        await run.wait_until(lambda: bool(run.sim.app_commands()))
        run.bot.store.set_tier(w.bob_id, "admin")
        for key, value, stored, past_bounds in OWNER_KEYS:
            if entry in ("chat", "slash"):
                # An admin may change config, but never the owner's keys.
                outcome, told = await _set(run, entry, w.bob_id, key, value)
                assert outcome == "denied", (key, told)
                assert f"Only the owner can change `{key}`." in told
                assert key not in _stored(run.home)
            # The owner (the panel and MCP act as the owner) is refused nothing in bounds.
            who = w.alice_id
            outcome, told = await _set(run, entry, who, key, value)
            assert outcome == "ok", (key, told)
            assert _stored(run.home)[key] == stored
            # The same bounds everywhere: the value is refused, the stored one kept.
            outcome, told = await _set(run, entry, who, key, past_bounds)
            assert outcome == "error", (key, past_bounds, told)
            assert f"{key} must be" in told and "1e" not in told
            assert _stored(run.home)[key] == stored
