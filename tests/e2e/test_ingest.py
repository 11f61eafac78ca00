"""Ingest: what is stored for recall, and what a stranger's chatter costs."""

from __future__ import annotations

from pathlib import Path

from picortex.sim.model import ModelReply
from tests.e2e.harness import Running, running_bot


def stored_ids(run: Running, word: str) -> set[int]:
    hits = run.bot.store.search_memory(word, since=0.0, workspace=None, limit=50)
    return {h.message_id for h in hits if h.kind == "message"}


async def test_only_trusted_words_and_the_bots_answers_are_stored_for_recall(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        stranger = run.say(w.general_id, w.bob_id, "zebra chatter from a stranger")
        stranger_mention = run.say(w.general_id, w.bob_id, f"{run.mention()} zebra please")
        trusted = run.say(w.general_id, w.alice_id, "zebra chatter from the owner")
        run.sim.model.script(ModelReply(text="zebra answer from the bot"))
        ask = run.say(w.general_id, w.alice_id, f"{run.mention()} tell me about the zebra")
        await run.wait_until(lambda: bool(run.replies_to(int(ask["id"]))))
        answer = int(run.replies_to(int(ask["id"]))[0]["id"])
        await run.wait_until(lambda: answer in stored_ids(run, "zebra"))
        found = stored_ids(run, "zebra")
        assert int(trusted["id"]) in found
        assert int(stranger["id"]) not in found
        assert int(stranger_mention["id"]) not in found
        assert found == {int(trusted["id"]), int(ask["id"]), answer}
