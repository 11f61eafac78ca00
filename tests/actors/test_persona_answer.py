"""Persona answers with fakes for the model and Discord: recall, placement, failures."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing

from picortex.actors import persona_answer
from picortex.actors.delivery import ChannelReply
from picortex.actors.pipeline import (
    BotIdentity,
    ChannelRegistry,
    Pipeline,
    SettingsSource,
    TriggerBook,
)
from picortex.actors.replies import Replies
from picortex.config import ResponsePolicySettings, load_settings
from picortex.core.continuation import Request
from picortex.core.llm import LLMRequest, LLMResult
from picortex.discord.rest import DiscordHTTPError
from picortex.store import Store, StoreActor
from picortex.store.personas import PersonaLoader
from picortex.types import Channel, ChannelType, Message, User
from tests.helpers import RecordingSink

AGENTS = """
personas:
  - id: sleep
    name: Sleep Coach
    description: Helps people who sleep badly.
    domain_triggers: [sleep, slept, insomnia, tired]
  - id: fitness
    name: Fitness Coach
    description: Plans workouts and exercise.
    domain_triggers: [workout, tired, exercise]
"""
GUILD, GENERAL, OTHER_GUILD, DM = 10, 100, 20, 300
ALICE = User(1, "alice", "Alice")
BOB = User(2, "bob", "Bob")


class FakeLLM:
    """Answers model calls from a script of results; records the requests."""

    def __init__(self, *results: LLMResult) -> None:
        self.results = list(results)
        self.requests: list[LLMRequest] = []

    async def complete(
        self,
        request: LLMRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_sent: Callable[[], None] | None = None,
        on_end: Callable[[str], Awaitable[None] | None] | None = None,
    ) -> LLMResult:
        self.requests.append(request)
        if on_sent is not None:
            on_sent()
        result = self.results.pop(0) if self.results else ok("a fine answer")
        if on_text is not None and result.text:
            on_text(result.text)  # streamed: the whole answer in one delta
            if on_end is not None and result.ok:
                pending = on_end(result.text)
                if pending is not None:
                    await pending
        return result


class FakeRest:
    """Records posts and threads; `thread_error` makes thread creation fail."""

    def __init__(self, thread_error: Exception | None = None) -> None:
        self.thread_error = thread_error
        self.threads: list[tuple[int, int, str]] = []
        self.posts: list[tuple[int, str, int | None]] = []

    async def start_thread_from_message(
        self, channel_id: int, message_id: int, name: str
    ) -> dict[str, Any]:
        if self.thread_error is not None:
            raise self.thread_error
        self.threads.append((channel_id, message_id, name))
        return {
            "id": str(message_id),
            "type": 11,
            "guild_id": str(GUILD),
            "parent_id": str(channel_id),
            "name": name,
        }

    async def create_message(
        self,
        channel_id: int,
        content: str,
        *,
        reply_to: int | None = None,
        allowed_mentions: Any = None,
        nonce: str | None = None,
    ) -> dict[str, Any]:
        self.posts.append((channel_id, content, reply_to))
        return {"id": str(9000 + len(self.posts))}

    async def trigger_typing(
        self,
        channel_id: int,
        *,
        on_sent: Callable[[], None] | None = None,
        read_after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        return None

    async def create_dm(self, user_id: int) -> dict[str, Any]:
        return {"id": str(DM + user_id), "type": 1}

    def expect(self, count: int) -> None:
        pass


def ok(text: str) -> LLMResult:
    return LLMResult(text, "m", 10, 5, 0.00001, 3, "ok")


def failed(outcome: str = "error") -> LLMResult:
    return LLMResult("", "m", 0, 0, 0.0, 3, outcome, error="APIStatusError: boom", stack_trace="tb")  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "picortex.db")
    try:
        yield s
    finally:
        s.close()


def make_pipe(
    tmp_path: Path,
    store: Store,
    llm: FakeLLM | None = None,
    rest: FakeRest | None = None,
    *,
    default_mode: str = "channel",
) -> tuple[Pipeline, RecordingSink]:
    (tmp_path / "agents.yaml").write_text(AGENTS)
    base = load_settings({"PICORTEX_HOME": str(tmp_path)})
    base = attrs.evolve(base, response_policy=ResponsePolicySettings(default_mode=default_mode))
    loader = PersonaLoader(tmp_path)
    loader.load()
    sink = RecordingSink()
    actor = StoreActor(store)
    registry = ChannelRegistry()
    registry.add(Channel(GENERAL, ChannelType.GUILD_TEXT, GUILD, None, "general"))
    pipe = Pipeline(
        settings=SettingsSource(base, actor),
        store=actor,
        rest=cast(Any, rest or FakeRest()),
        cache=cast(Any, None),
        llm=cast(Any, llm or FakeLLM()),
        events=sink,
        bot=BotIdentity(999, "picortex"),
        registry=registry,
        triggers=TriggerBook(),
        home=tmp_path,
        personas=loader,
        spawn=lambda *args: None,
        fatal=lambda exc: None,
    )
    return pipe, sink


def message(
    mid: int, text: str, *, channel: int = GENERAL, guild: int | None = GUILD, author: User = ALICE
) -> Message:
    return Message(mid, channel, author, text, "2026-04-12T10:00:00+00:00", guild_id=guild)


def request_for(*msgs: Message) -> Request:
    first = msgs[0]
    return Request(
        parent_id=first.id,
        channel_id=first.channel_id,
        author_id=first.author.id,
        message_ids=tuple(m.id for m in msgs),
        texts=tuple(m.content for m in msgs),
    )


def remember(store: Store, msg: Message, at: float) -> None:
    store.add_memory_message(
        msg.id,
        msg.channel_id,
        msg.guild_id,
        msg.author.id,
        msg.author.display_name,
        msg.content,
        at,
    )


# -- recall ---------------------------------------------------------------------------------


async def test_observing_looks_for_edited_files_at_most_once_a_second_an_answer_always(
    tmp_path: Path, store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    pipe, _ = make_pipe(tmp_path, store)
    assert persona_answer.current_personas(pipe, observing=True) is not None  # looks
    (tmp_path / "agents.yaml").write_text(AGENTS.replace("insomnia", "insomnia, snoring"))
    seen = persona_answer.current_personas(pipe, observing=True)
    assert seen is not None and "snoring" not in seen.get("sleep").domain_triggers
    answering = persona_answer.current_personas(pipe)
    assert answering is not None and "snoring" in answering.get("sleep").domain_triggers
    (tmp_path / "agents.yaml").write_text(AGENTS)
    await trio.sleep(persona_answer.PERSONA_CHECK_SECONDS)
    later = persona_answer.current_personas(pipe, observing=True)
    assert later is not None and "snoring" not in later.get("sleep").domain_triggers


async def test_recall_dedupes_and_leaves_out_the_request_and_old_or_foreign_text(
    tmp_path: Path, store: Store
) -> None:
    pipe, _ = make_pipe(tmp_path, store)
    trust(pipe.store)
    now = time.time()
    earlier = message(1, "espresso at 9pm gave me insomnia", author=BOB)
    remember(store, earlier, now - 3600)
    persona_answer.observe(pipe, earlier, earlier.content)  # same text as an observation
    remember(store, message(2, "insomnia week two, still espresso", author=BOB), now - 8 * 86400)
    remember(store, message(3, "insomnia in another guild", channel=700, guild=OTHER_GUILD), now)
    trigger = message(5, "insomnia again, why?")
    follow = message(6, "the espresso maybe?")
    for m in (trigger, follow):
        remember(store, m, now)
    excerpts = await persona_answer.recall(pipe, request_for(trigger, follow), follow)
    assert excerpts == ['"Bob": "espresso at 9pm gave me insomnia"']


async def test_dm_recall_stays_in_that_dm(tmp_path: Path, store: Store) -> None:
    pipe, _ = make_pipe(tmp_path, store)
    trust(pipe.store)
    now = time.time()
    remember(
        store,
        message(1, "my insomnia is from night shifts", channel=301, guild=None, author=BOB),
        now,
    )
    remember(store, message(2, "insomnia since the move", channel=DM, guild=None), now)
    trigger = message(3, "insomnia again", channel=DM, guild=None)
    assert await persona_answer.recall(pipe, request_for(trigger), trigger) == [
        '"Alice": "insomnia since the move"'
    ]


def trust(store: StoreActor) -> None:
    """Bob and Alice on the trust list: recall only repeats trusted people."""
    store.set_tier(BOB.id, "user")
    store.set_tier(ALICE.id, "trusted")


async def test_recall_leaves_out_untrusted_authors_and_other_channels(
    tmp_path: Path, store: Store
) -> None:
    pipe, _ = make_pipe(tmp_path, store)
    pipe.store.set_tier(ALICE.id, "user")
    now = time.time()
    remember(store, message(1, "insomnia tip from a stranger", author=BOB), now)
    remember(store, message(2, "insomnia in the other channel", channel=GENERAL + 1), now)
    remember(store, message(3, "insomnia here", channel=GENERAL), now)
    trigger = message(5, "insomnia again?")
    assert await persona_answer.recall(pipe, request_for(trigger), trigger) == [
        '"Alice": "insomnia here"'
    ]
    # In a thread, its parent channel is the same conversation.
    pipe.registry.add(Channel(60, ChannelType.PUBLIC_THREAD, GUILD, GENERAL, "t"))
    inside = message(61, "insomnia again?", channel=60)
    assert await persona_answer.recall(pipe, request_for(inside), inside) == [
        '"Alice": "insomnia here"'
    ]


async def test_recall_drops_observations_of_an_author_removed_from_the_trust_list(
    tmp_path: Path, store: Store
) -> None:
    pipe, _ = make_pipe(tmp_path, store)
    trust(pipe.store)
    # Only observed (the message itself is not stored): the observation speaks for Bob.
    said = message(1, "melatonin cured my insomnia", author=BOB)
    persona_answer.observe(pipe, said, said.content)
    await pipe.store.flush()
    trigger = message(5, "insomnia again?")
    assert await persona_answer.recall(pipe, request_for(trigger), trigger) == [
        '"sleep observation": "melatonin cured my insomnia"'
    ]
    pipe.store.remove_trust(BOB.id)
    assert await persona_answer.recall(pipe, request_for(trigger), trigger) == []
    # An observation whose author is unknown (stored before authors were kept) is not quoted.
    store.add_observation("sleep", 2, GENERAL, GUILD, "insomnia", "insomnia by nobody", 1e12)
    assert await persona_answer.recall(pipe, request_for(trigger), trigger) == []


async def test_recall_without_salient_words_is_empty(tmp_path: Path, store: Store) -> None:
    pipe, _ = make_pipe(tmp_path, store)
    trigger = message(3, "is it?")
    assert await persona_answer.recall(pipe, request_for(trigger), trigger) == []


# -- placement ------------------------------------------------------------------------------


def test_placement_by_where_the_message_is(tmp_path: Path, store: Store) -> None:
    pipe, _ = make_pipe(tmp_path, store)
    top = message(50, "slept badly")
    assert persona_answer.placement(pipe, request_for(top), top) == persona_answer.Placement(
        "new thread", GENERAL
    )
    dm = message(51, "slept badly", channel=DM, guild=None)
    assert persona_answer.placement(pipe, request_for(dm), dm) == persona_answer.Placement(
        "dm reply", DM, 51
    )
    pipe.registry.add(Channel(60, ChannelType.PUBLIC_THREAD, GUILD, GENERAL, "t"))
    inside = message(61, "slept badly", channel=60)
    assert persona_answer.placement(pipe, request_for(inside), inside) == persona_answer.Placement(
        "existing thread", 60, 61
    )
    # A follow-up in the channel joins the thread the first answer went into.
    pipe.registry.add(
        Channel(50, ChannelType.PUBLIC_THREAD, GUILD, GENERAL, "Sleep Coach responding")
    )
    follow = message(52, "and tired")
    assert persona_answer.placement(
        pipe, request_for(top, follow), follow
    ) == persona_answer.Placement("existing thread", 50, None)


def test_response_policy_dm_sends_guild_answers_by_dm(tmp_path: Path, store: Store) -> None:
    pipe, _ = make_pipe(tmp_path, store, default_mode="dm")
    top = message(50, "slept badly")
    assert persona_answer.placement(pipe, request_for(top), top).how == "dm"


# -- answering ------------------------------------------------------------------------------


async def test_single_match_opens_a_thread_and_posts_there(tmp_path: Path, store: Store) -> None:
    llm, rest = FakeLLM(), FakeRest()
    pipe, sink = make_pipe(tmp_path, store, llm, rest)
    trigger = message(50, "I slept terribly last night")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, ["10:00 Bob: hi"]
    )
    assert [r.stage for r in llm.requests] == ["generate"]
    assert llm.requests[0].tier == "general"
    assert llm.requests[0].persona == "sleep"
    assert "10:00 Bob: hi" in llm.requests[0].messages[0].content
    assert rest.threads == [(GENERAL, 50, "Sleep Coach responding")]
    assert rest.posts == [(50, "a fine answer", None)]
    assert pipe.registry.is_thread(50)  # known at once, before THREAD_CREATE arrives
    done = sink.of("persona.responded")
    assert done[0]["thread_id"] == 50 and done[0]["posted"] == [9001]


async def test_an_answer_sees_a_persona_file_edited_since_the_last_observation(
    tmp_path: Path, store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    llm, rest = FakeLLM(), FakeRest()
    pipe, _ = make_pipe(tmp_path, store, llm, rest)
    chatter = message(49, "nice weather")
    assert persona_answer.observe(pipe, chatter, chatter.content) == []  # looks at the files
    (tmp_path / "agents.yaml").write_text(AGENTS.replace("insomnia", "insomnia, snoring"))
    trigger = message(50, "my snoring woke everyone")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert [r.persona for r in llm.requests] == ["sleep"]
    assert rest.threads == [(GENERAL, 50, "Sleep Coach responding")]


async def test_no_match_leaves_it_to_the_default_agent(tmp_path: Path, store: Store) -> None:
    llm = FakeLLM()
    pipe, sink = make_pipe(tmp_path, store, llm)
    trigger = message(50, "what is the capital of Peru")
    assert not await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert llm.requests == [] and sink.of("persona") == []


async def test_failed_tiebreak_falls_back_and_records_the_strongest(
    tmp_path: Path, store: Store
) -> None:
    llm = FakeLLM(failed())
    pipe, sink = make_pipe(tmp_path, store, llm)
    trigger = message(50, "so tired after my workout")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert [(r.stage, r.tier) for r in llm.requests] == [
        ("tiebreak", "triage"),
        ("generate", "general"),
    ]
    assert llm.requests[1].persona == "fitness"
    await pipe.store.flush()
    rows = store.invocation_errors()
    assert [(r.stage, r.persona) for r in rows] == [("tiebreak", "fitness")]
    assert sink.of("persona")[0]["tiebreak"] == "tiebreak error: strongest match"


async def test_tiebreak_picks_a_candidate_in_quotes(tmp_path: Path, store: Store) -> None:
    llm = FakeLLM(ok('"Sleep".'))
    pipe, sink = make_pipe(tmp_path, store, llm)
    trigger = message(50, "so tired after my workout")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert sink.of("persona")[0]["selected"] == "sleep"
    assert sink.of("persona")[0]["tiebreak"] == "model picked"


async def test_existing_thread_error_reuses_the_message_thread(
    tmp_path: Path, store: Store
) -> None:
    rest = FakeRest(
        DiscordHTTPError(400, 160004, "A thread has already been created for this message")
    )
    pipe, _ = make_pipe(tmp_path, store, rest=rest)
    trigger = message(50, "slept badly")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert rest.posts == [(50, "a fine answer", None)]
    await pipe.store.flush()
    assert store.invocation_errors() == []


async def test_server_error_on_the_thread_is_a_post_failure(tmp_path: Path, store: Store) -> None:
    rest = FakeRest(DiscordHTTPError(503, None, "unavailable"))
    pipe, sink = make_pipe(tmp_path, store, rest=rest)
    trigger = message(50, "slept badly")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert rest.posts == []
    await pipe.store.flush()
    assert [(r.stage, r.persona) for r in store.invocation_errors()] == [("post", "sleep")]
    assert sink.of("persona.responded") == []


@pytest.mark.parametrize(
    ("outcome", "why"), [("budget", "budget ceiling"), ("no_key", "ANTHROPIC_API_KEY")]
)
async def test_refused_answer_is_a_skip_not_an_error(
    tmp_path: Path, store: Store, outcome: str, why: str
) -> None:
    pipe, sink = make_pipe(tmp_path, store, FakeLLM(failed(outcome)))
    trigger = message(50, "slept badly")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    await pipe.store.flush()
    assert store.invocation_errors() == []
    skip = sink.of("decision")[0]
    assert skip["outcome"] == "skip" and why in skip["reason"]


async def test_persona_model_tier_is_used(tmp_path: Path, store: Store) -> None:
    llm = FakeLLM()
    pipe, _ = make_pipe(tmp_path, store, llm)
    (tmp_path / "agents.yaml").write_text(
        AGENTS.replace("Helps people who sleep badly.", "Deep.\n    model: complex")
    )
    trigger = message(50, "slept badly")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert llm.requests[0].tier == "complex"


async def test_observe_records_every_match(tmp_path: Path, store: Store) -> None:
    pipe, _ = make_pipe(tmp_path, store)
    msg = message(50, "so tired after my workout")
    matches = persona_answer.observe(pipe, msg, msg.content)
    assert {m.persona.id for m in matches} == {"sleep", "fitness"}
    await pipe.store.flush()  # observations are written in the store actor's next group
    hits = store.search_memory("tired", since=0.0, workspace=str(GUILD), limit=10)
    assert sorted((h.persona, h.trigger) for h in hits if h.kind == "observation") == [
        ("fitness", "workout"),
        ("sleep", "tired"),
    ]


async def test_response_policy_dm_posts_the_persona_answer_by_dm(
    tmp_path: Path, store: Store
) -> None:
    rest = FakeRest()
    pipe, sink = make_pipe(tmp_path, store, rest=rest, default_mode="dm")
    trigger = message(50, "I slept terribly")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert rest.threads == []
    assert rest.posts == [(DM + ALICE.id, "a fine answer", None)]
    assert sink.of("persona")[0]["thread"] == "dm"
    assert sink.of("persona.responded")[0]["thread_id"] is None


@pytest.mark.parametrize("stream", ["true", "false"])
async def test_a_persona_answer_leaves_through_its_requests_sink(
    tmp_path: Path, store: Store, stream: str
) -> None:
    rest, elsewhere = FakeRest(), FakeRest()
    pipe, _ = make_pipe(tmp_path, store, rest=rest)
    pipe.store.set_runtime_config("replies.stream", stream)
    pipe.settings.refresh(force=True)
    trigger = message(50, "I slept terribly")
    # The request's sink posts through a poster of its own: only it may carry the answer.
    sink = ChannelReply(
        Replies(pipe.settings, cast(Any, elsewhere), pipe.llm, pipe.events, fatal=pipe.fatal),
        trigger,
    )
    assert await persona_answer.maybe_answer(pipe, sink, request_for(trigger), trigger, [])
    assert rest.threads == [(GENERAL, 50, "Sleep Coach responding")]  # the placement
    assert rest.posts == []
    assert [text for _, text, _ in elsewhere.posts] == ["a fine answer"]
