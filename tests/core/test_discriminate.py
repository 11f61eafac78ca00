"""One classification's request, as the channel and the owner's test runs build it."""

from __future__ import annotations

from pathlib import Path

from picortex.config import Price, Settings
from picortex.core import discriminator as disc
from picortex.core.attention import AttentionDecision
from picortex.core.discriminate import Classifier, trial_request
from picortex.core.llm import LLMRequest
from picortex.types import Message, User

CHEAP = Classifier("m", input_usd=1.0, output_usd=5.0, timeout_seconds=4.0, history=2)
TEMPLATE = "{{history}}\n---\n{{message}}"


def _messages(guild: int | None) -> list[Message]:
    return [
        Message(
            id=n,
            channel_id=10,
            author=User(n, f"user{n}"),
            content=f"line {n}",
            timestamp="2026-04-12T10:00:00+00:00",
            guild_id=guild,
        )
        for n in range(1, 5)
    ]


def test_a_trial_shows_the_messages_before_the_one_classified() -> None:
    request = trial_request(
        CHEAP,
        TEMPLATE,
        _messages(7000),
        2,
        chat_id=10,
        chat_name="general",
        trusted=lambda user_id: user_id != 2,
    )
    assert isinstance(request, LLMRequest)
    prompt = request.messages[0].content
    assert isinstance(prompt, str)
    assert prompt == (
        f'"user1": "line 1"\n{disc.UNTRUSTED_MARK} "user2": "line 2"\n---\n"user3": "line 3"'
    )
    assert (request.stage, request.model, request.workspace) == ("discriminate", "m", "7000")
    assert (request.timeout, request.user_id, request.signal_id) == (4.0, 3, "3")


def test_a_trial_in_a_dm_is_paid_by_the_dm_workspace() -> None:
    request = trial_request(
        CHEAP, TEMPLATE, _messages(None), 0, chat_id=10, chat_name="dm", trusted=lambda _: True
    )
    assert isinstance(request, LLMRequest)
    assert request.workspace == "dm"


def test_a_model_too_dear_for_one_classification_gives_the_failed_decision() -> None:
    dear = Classifier("big", input_usd=1e6, output_usd=1e6, timeout_seconds=4.0, history=2)
    for guild, outcome in ((None, "respond"), (7000, "skip")):
        decision = trial_request(
            dear, TEMPLATE, _messages(guild), 1, chat_id=10, chat_name="c", trusted=lambda _: True
        )
        assert isinstance(decision, AttentionDecision)
        assert decision.outcome == outcome
        assert "prompt too large" in decision.reason


def test_the_classifier_is_the_chats_own_model_at_its_price(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path, prices={"own": Price(2.0, 8.0), "claude-haiku-5-5": Price(1.0, 5.0)}
    )
    own = settings.classifier(" own ")
    assert (own.model, own.input_usd, own.output_usd) == ("own", 2.0, 8.0)
    for blank in (None, "", "  "):
        assert settings.classifier(blank).model == settings.discriminator.model
    assert settings.classifier().history == settings.discriminator.history
