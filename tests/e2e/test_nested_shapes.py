"""What Discord nests in messages, and its bulk and channel deletes, end to end (SPEC 5)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from picortex.store import MemoryHit
from picortex.store.chathome import ChatHome
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time


async def _recall(run: Running, word: str) -> list[MemoryHit]:
    await run.bot.store.flush()
    return list(await run.bot.store.read(lambda db: db.search_memory(word, 0.0, None)))


def _prompt(run: object, index: int) -> str:
    return str(run.sim.model.calls[index].messages)  # type: ignore[attr-defined]


async def test_a_forward_is_answered_with_what_was_forwarded(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_attention_mode(w.random_id, "always", time.time())
        original = run.say(w.general_id, w.bob_id, "the release moved to friday")
        forward = run.sim.forward_message(
            w.random_id, w.alice_id, w.general_id, int(original["id"])
        )
        await run.wait_until(lambda: bool(run.replies_to(int(forward["id"]))))
        prompt = _prompt(run, 0)
        assert "[forwarded message] the release moved to friday" in prompt
        (decision,) = [d for d in run.events("decision") if d["message_id"] == forward["id"]]
        assert decision["outcome"] == "respond"
        assert "no text" not in decision["reason"]


async def test_poll_sticker_and_nickname_reach_the_context(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.sim.set_nick(w.bob_id, "Bobby")
        run.sim.post_user_message(
            w.general_id,
            w.bob_id,
            "",
            poll={
                "question": {"text": "Which day?"},
                "answers": [{"poll_media": {"text": "monday"}}, {"poll_media": {"text": "friday"}}],
            },
        )
        run.sim.post_user_message(w.general_id, w.bob_id, "", stickers=["Thumbs"])
        run.say(w.general_id, w.bob_id, "see", attachments=["diagram.png"])
        trigger = run.say(w.general_id, w.alice_id, f"{run.mention()} what did bob ask?")
        await run.wait_until(lambda: bool(run.replies_to(int(trigger["id"]))))
        prompt = _prompt(run, 0)
        assert "[poll] Which day? (1) monday (2) friday" in prompt
        assert "[sticker: Thumbs]" in prompt
        assert "diagram.png" in prompt
        assert '"Bobby":' in prompt  # the nickname, as main quotes names


async def test_the_discord_system_user_is_never_answered(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        system = run.sim.add_user("Discord", system=True)
        run.bot.store.set_tier(system, "user")  # even if someone trusted it
        notice = run.say(w.general_id, system, f"{run.mention()} official notice")
        decision = await run.wait_event("decision", message_id=notice["id"])
        assert decision[0]["outcome"] == "ignore"
        assert decision[0]["reason"] == "Discord system user"
        assert run.sim.model.calls == []


async def test_bulk_delete_forgets_messages_and_their_observations(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        first = run.say(w.general_id, w.bob_id, f"{run.mention()} my secret plan is zebra")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        second = run.say(w.general_id, w.bob_id, f"{run.mention()} and zebra again")
        await run.wait_until(lambda: len(run.sim.bot_messages(w.general_id)) == 2)
        assert await _recall(run, "zebra")
        run.sim.delete_messages_bulk(w.general_id, [int(first["id"]), int(second["id"])])
        deleted = await run.wait_event("message-delete", bulk=True)
        assert deleted[0]["message_ids"] == [first["id"], second["id"]]
        await run.bot.store.flush()
        purged = {int(first["id"]), int(second["id"])}
        assert not [h for h in await _recall(run, "zebra") if h.message_id in purged]
        assert all(
            m.id not in (int(first["id"]), int(second["id"]))
            for m in run.bot.cache.recent(w.general_id, 50)
        )


async def test_thread_and_channel_deletes_leave_the_registry(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        thread = run.sim.world.start_thread(w.general_id, "side", owner_id=w.alice_id)
        run.sim._flush()
        await run.wait_until(lambda: run.bot.pipe.registry.get(thread.id) is not None)
        said = run.say(thread.id, w.alice_id, f"{run.mention()} remember walrus")
        await run.wait_until(lambda: bool(run.replies_to(int(said["id"]))))
        homes = {
            c: ChatHome(run.bot.pipe.home, str(c)) for c in (thread.id, w.random_id, w.general_id)
        }
        for home in homes.values():
            home.ensure()
        run.sim.delete_channel(thread.id)
        await run.wait_event("channel-delete", channel_id=str(thread.id))
        assert run.bot.pipe.registry.get(thread.id) is None
        await run.bot.store.flush()
        assert not [h for h in await _recall(run, "walrus") if h.channel_id == thread.id]
        assert not homes[thread.id].root.exists()  # its chat home went with it
        run.sim.delete_channel(w.random_id)
        await run.wait_event("channel-delete", channel_id=str(w.random_id))
        assert run.bot.pipe.registry.get(w.random_id) is None
        assert run.bot.pipe.registry.get(w.general_id) is not None
        await run.bot.store.flush()
        assert not homes[w.random_id].root.exists()
        assert homes[w.general_id].exists()
