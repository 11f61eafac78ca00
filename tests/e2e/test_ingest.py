"""Ingest: what is stored for recall, what a stranger's chatter costs, idle mailboxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from picortex.actors import channel as channel_mod
from picortex.actors import router as router_mod
from picortex.sim.model import ModelReply
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time


async def stored_ids(run: Running, word: str) -> set[int]:
    hits = await run.bot.store.read(
        lambda db: db.search_memory(word, since=0.0, workspace=None, limit=50)
    )
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
        await run.idle()  # every write queued so far is committed
        assert await stored_ids(run, "zebra") == {int(trusted["id"]), int(ask["id"]), answer}
        assert int(stranger["id"]) not in await stored_ids(run, "stranger")
        assert int(stranger_mention["id"]) not in await stored_ids(run, "please")


async def test_chatter_is_decided_inline_counted_and_never_logged_or_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_mod, "INGEST_EVERY_SECONDS", 0.2)
    async with running_bot(tmp_path) as run:
        w = run.world
        chatter = [run.say(w.general_id, w.bob_id, f"just talking {i}") for i in range(5)]
        # A mention from the same stranger is not chatter: it goes through the mailbox.
        mention = run.say(w.general_id, w.bob_id, f"{run.mention()} hello?")
        await run.wait_event("decision", message_id=int(mention["id"]))
        ingest = await run.wait_event("ingest")
        assert ingest[0]["chatter"] == 5
        assert ingest[0]["delivered"] == 1
        decided = {e["message_id"] for e in run.events("decision")}
        assert not decided & {int(m["id"]) for m in chatter}
        assert run.bot.router.chatter == 5
        assert run.bot.snapshot()["ingest"]["chatter"] == 5
        # Fed to the context cache all the same.
        cached = {m.id for m in run.bot.cache.recent(w.general_id, 50)}
        assert {int(m["id"]) for m in chatter} <= cached
        # Not one database write for the stranger: no seen rows, nothing to recall.
        await run.bot.store.flush()
        seen = await run.bot.store.read(
            lambda db: [db.is_seen(int(m["id"])) for m in [*chatter, mention]]
        )
        assert seen == [False] * 5 + [True]


async def test_chatter_in_an_always_chat_is_still_weighed_in_the_mailbox(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_attention_mode(w.general_id, "always", 0.0)
        sent = run.say(w.general_id, w.bob_id, "just talking")
        found = await run.wait_event("decision", message_id=int(sent["id"]))
        assert found[0]["outcome"] == "ignore"
        assert run.bot.router.chatter == 0


async def test_a_replayed_chatter_message_is_dropped_quietly(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        payload = run.say(w.general_id, w.bob_id, "just talking")
        marker = run.say(w.general_id, w.bob_id, f"{run.mention()} marker")
        await run.wait_event("decision", message_id=int(marker["id"]))
        run.bot.router.on_dispatch("MESSAGE_CREATE", payload)
        marker2 = run.say(w.general_id, w.bob_id, f"{run.mention()} marker two")
        await run.wait_event("decision", message_id=int(marker2["id"]))
        assert run.bot.router.chatter == 1
        assert run.bot.router.replays_dropped == 1
        assert not [e for e in run.events("decision") if e["message_id"] == int(payload["id"])]


async def test_idle_channels_release_their_mailboxes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channel_mod, "IDLE_EXIT_SECONDS", 0.1)
    monkeypatch.setattr(router_mod, "INGEST_EVERY_SECONDS", 0.2)
    async with running_bot(tmp_path) as run:
        w = run.world
        ask = run.say(w.general_id, w.alice_id, f"{run.mention()} hi")
        await run.wait_until(lambda: bool(run.replies_to(int(ask["id"]))))
        assert run.bot.snapshot()["ingest"]["mailboxes"] == 1
        await run.wait_event("supervisor", action="exit", actor=f"channel-{w.general_id}")
        await run.wait_until(lambda: not run.bot.snapshot()["ingest"]["mailboxes"])
        # The channel comes back on its next message.
        again = run.say(w.general_id, w.alice_id, f"{run.mention()} again")
        await run.wait_until(lambda: bool(run.replies_to(int(again["id"]))))


TRUSTED_FILES = {
    "agents.yaml": (
        "personas:\n  - id: sleep\n    name: Sleep Coach\n    description: Sleep help.\n"
        "    domain_triggers: [insomnia]\n"
    )
}


async def test_trusted_chatter_is_decided_inline_yet_stored_and_observed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_mod, "INGEST_EVERY_SECONDS", 0.2)
    async with running_bot(tmp_path, files=TRUSTED_FILES) as run:
        w = run.world
        said = [run.say(w.general_id, w.alice_id, f"insomnia again, night {i}") for i in range(3)]
        ids = {int(m["id"]) for m in said}
        marker = run.say(w.general_id, w.bob_id, f"{run.mention()} marker")
        await run.wait_event("decision", message_id=int(marker["id"]))
        # No mailbox, no decision line: counted as chatter, of which trusted.
        ingest = await run.wait_event("ingest")
        assert (ingest[0]["chatter"], ingest[0]["delivered"]) == (3, 1)
        assert run.bot.snapshot()["ingest"]["trusted_chatter"] == 3
        assert not {int(e["message_id"]) for e in run.events("decision")} & ids
        assert ids <= {m.id for m in run.bot.cache.recent(w.general_id, 50)}
        # Yet stored for recall, observed by the persona it matches, and marked handled.
        await run.idle()
        assert await stored_ids(run, "insomnia") == ids
        hits = await run.bot.store.read(
            lambda db: db.search_memory("insomnia", since=0.0, workspace=None, limit=50)
        )
        observed = {h.message_id for h in hits if h.kind == "observation" and h.persona == "sleep"}
        assert observed == ids
        assert (
            await run.bot.store.read(lambda db: [db.is_seen(i) for i in sorted(ids)]) == [True] * 3
        )


async def test_trusted_chatter_in_an_open_request_still_continues_it(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 600\n") as run:
        w = run.world
        run.sim.model.script(ModelReply(text="answer"))
        ask = run.say(w.general_id, w.alice_id, f"{run.mention()} a question")
        follow = run.say(w.general_id, w.alice_id, "and one more thing")
        await run.wait_until(lambda: bool(run.replies_to(int(ask["id"]))))
        found = await run.wait_event("continuation")
        assert int(found[0]["message_id"]) == int(follow["id"])
        assert run.bot.router.trusted_chatter == 0


async def test_chatter_is_decided_within_the_gateways_call_when_the_router_is_idle(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        marker = run.say(w.general_id, w.bob_id, f"{run.mention()} marker")
        await run.wait_event("decision", message_id=int(marker["id"]))
        await run.idle()
        router = run.bot.router
        chatter = {**marker, "id": str(int(marker["id"]) + 1), "content": "just talking"}
        chatter["mentions"] = []
        router.on_dispatch("MESSAGE_CREATE", chatter)
        # No hop through the router's inbox: counted and cached before the call returns.
        assert (router.chatter, router.inbox.depth) == (1, 0)
        assert int(chatter["id"]) in {m.id for m in run.bot.cache.recent(w.general_id, 10)}
        # Anything else still queues for the router's task, in order.
        mention = {**chatter, "id": str(int(chatter["id"]) + 1), "content": "hi again"}
        mention["mentions"] = marker["mentions"]
        mention["content"] = f"{run.mention()} hi again"
        router.on_dispatch("MESSAGE_CREATE", mention)
        assert not router.inbox.settled
        await run.wait_event("decision", message_id=int(mention["id"]))
