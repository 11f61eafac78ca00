"""A 401 from Discord while posting a reply ends `picortex run` with exit code 3 (SPEC 2, 4).

The bot runs as a real process (forked, see tests/e2e/forkserver.py) against a simulator.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from picortex.sim import Simulator
from picortex.sim.model import ModelReply
from picortex.sim.simulator import SimURLs
from tests.e2e.forkserver import fork_server
from tests.e2e.test_sigkill import START_TIMEOUT, _bot_process

# SPEC 2: 3 = Discord refused us for good (401, fatal close codes).
EXIT_DISCORD_REFUSED = 3


@pytest.mark.long(seconds=4)
@pytest.mark.forked_bots
async def test_a_401_while_replying_exits_3(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    sim = Simulator(heartbeat_interval_ms=5000)
    world = sim.add_default_world()
    w = world
    async with fork_server() as server, trio.open_nursery() as nursery:
        urls: SimURLs = await nursery.start(sim.serve)
        async with _bot_process(server, home, sim, urls, world, 1) as proc:
            # The token is reset while the bot runs: its reply is the first request refused.
            sim.inject_rest_error("POST", "/channels/*/messages", 401, count=None)
            sim.model.script(ModelReply(text="An answer nobody will see."))
            sim.post_user_message(w.general_id, w.alice_id, f"<@{sim.bot_user_id}> hello?")
            with trio.fail_after(START_TIMEOUT):
                code = await proc.wait()
            err = (home / "run1.err").read_text()
            assert code == EXIT_DISCORD_REFUSED, err
        nursery.cancel_scope.cancel()
    # One clear sentence says which and why; the token is never shown.
    assert "401" in err
    assert sim.token not in err
    assert sim.bot_messages(w.general_id) == []
    assert len(sim.model.calls) == 1
