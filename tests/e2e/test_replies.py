"""Reply shape end to end (SPEC 4, 6): split under 2000 chars, safe mentions, reference, typing."""

from __future__ import annotations

from pathlib import Path

import pytest

from picortex.sim.model import ModelReply
from picortex.sim.rest import RecordedRequest
from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time

DISCORD_LIMIT = 2000


def posts_at(requests: list[RecordedRequest], channel_id: int) -> list[float]:
    """When the bot posted in a channel."""
    return [r.at for r in requests if r.path == f"/channels/{channel_id}/messages"]


def _long_answer() -> str:
    prose = [f"Line {n} of the explanation, with some words to fill it out." for n in range(30)]
    code = ["```python", *(f"value_{n} = compute({n})  # step {n}" for n in range(60)), "```"]
    tail = [f"Closing remark {n}: @everyone and <@&42> must not ping anyone." for n in range(20)]
    return "\n".join([*prose, *code, *tail])


async def test_long_reply_is_split_without_breaking_code_and_pings_nobody(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        answer = _long_answer()
        assert len(answer) > 2 * DISCORD_LIMIT
        run.sim.model.script(ModelReply(text=answer, delay=0.3))
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} explain everything")
        reply = await run.wait_event("reply")
        parts = reply[0]["parts"]
        assert parts >= 3
        posted = run.sim.bot_messages(w.general_id)
        assert len(posted) == parts
        for part in posted:
            assert 0 < len(part["content"]) <= DISCORD_LIMIT
            assert part["content"].count("```") % 2 == 0  # every code block closes in its part
            assert part["mention_everyone"] is False
            assert part["mention_roles"] == []
        # Nothing lost but the fences added around a split code block.
        joined = "\n".join(p["content"] for p in posted)
        for line in answer.splitlines():
            assert line in joined
        # The first part replies to the trigger; the answer came with a typing indicator.
        assert posted[0]["message_reference"]["message_id"] == msg["id"]
        requests = [r for r in run.sim.requests if r.method == "POST"]
        typing = [r for r in requests if r.path == f"/channels/{w.general_id}/typing"]
        assert typing and typing[0].at < posts_at(requests, w.general_id)[0]
        posts = [r for r in requests if r.path == f"/channels/{w.general_id}/messages"]
        assert len(posts) == parts
        for request in posts:
            allowed = request.json["allowed_mentions"]
            assert "everyone" not in allowed.get("parse", [])
            assert "roles" not in allowed.get("parse", [])
            assert not allowed.get("roles")
        assert posts[0].json["message_reference"]["message_id"] == msg["id"]


async def test_command_replies_never_ping_everyone_either(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} !s @everyone")
        await run.wait_until(lambda: bool(run.replies_to(int(msg["id"]))))
        reply = run.replies_to(int(msg["id"]))[0]
        assert "@everyone" in reply["content"]
        assert reply["mention_everyone"] is False
        posts = [r for r in run.sim.requests if r.method == "POST" and r.path.endswith("/messages")]
        assert posts and all(
            "everyone" not in r.json["allowed_mentions"].get("parse", []) for r in posts
        )


async def test_even_a_quick_answer_is_typed_before_it_is_posted(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} quick one?")
        await run.wait_until(lambda: bool(run.replies_to(int(msg["id"]))))
        requests = [r for r in run.sim.requests if r.method == "POST"]
        typing = [r.at for r in requests if r.path == f"/channels/{w.general_id}/typing"]
        posts = posts_at(requests, w.general_id)
        assert typing and posts
        assert typing[0] <= posts[0]
        # The typing request comes first in the request log (an independent server's view).
        paths = [r.path for r in requests if r.path.startswith(f"/channels/{w.general_id}/")]
        assert paths.index(f"/channels/{w.general_id}/typing") < paths.index(
            f"/channels/{w.general_id}/messages"
        )


async def test_an_instant_answer_still_sends_typing_before_it(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        for n in range(3):
            run.say(w.general_id, w.alice_id, f"{run.mention()} quick question {n}")
            await run.wait_event("reply", count=n + 1)
        requests = [r for r in run.sim.requests if r.method == "POST"]
        typing = [r.at for r in requests if r.path == f"/channels/{w.general_id}/typing"]
        posts = posts_at(requests, w.general_id)
        assert len(typing) == len(posts) == 3
        # Each reply came after its own typing request (Discord clears the indicator then).
        assert all(t <= p for t, p in zip(typing, posts, strict=True))
