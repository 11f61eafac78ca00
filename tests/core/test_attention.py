"""Attention gating: the rule order, the five modes and thread inheritance."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.attention import (
    FALLBACK_MODE,
    MODES,
    AttentionDecision,
    as_mode,
    decide_attention,
    mode_for_chat,
)
from picortex.types import Attachment, Message, MessageReference, User

BOT_ID = 900
OWNER_ID = 1
BOT = User(BOT_ID, "picortex", bot=True)


@attrs.frozen
class Defaults:
    dm: str = "always"
    group: str = "mentions-only"


def msg(
    content: str = "hello there",
    *,
    author: int = 2,
    guild: int | None = 7000,
    mentions: tuple[User, ...] = (),
    attachments: int = 0,
    reply_author: User | None = None,
) -> Message:
    return Message(
        id=1,
        channel_id=10,
        author=User(author, f"user{author}"),
        content=content,
        timestamp="2026-04-12T10:00:00+00:00",
        guild_id=guild,
        mentions=mentions,
        attachments=tuple(Attachment(id=i, filename=f"f{i}.png") for i in range(attachments)),
        message_reference=MessageReference(5) if reply_author else None,
        referenced_author=reply_author,
    )


def decide(
    message: Message, mode: str, *, is_dm: bool = False, replied: bool = False
) -> AttentionDecision:
    return decide_attention(
        message,
        bot_user_id=BOT_ID,
        owner_id=OWNER_ID,
        mode=mode,
        is_dm=is_dm,
        replied_to_bot=replied,
    )


def test_modes_are_the_five_of_the_spec() -> None:
    assert MODES == ("always", "mentions-only", "discriminate", "discriminate-quiet", "silent")
    assert all(as_mode(m) == m for m in MODES)
    assert as_mode("Always") is None
    assert as_mode("silent") == "silent"
    assert as_mode("loud") is None


@pytest.mark.parametrize(
    ("mode", "outcome", "typing"),
    [
        ("always", "respond", True),
        ("mentions-only", "skip", False),
        ("discriminate", "discriminate", True),
        ("discriminate-quiet", "discriminate", False),
        ("silent", "record", False),
    ],
)
@pytest.mark.parametrize("is_dm", [False, True])
def test_plain_message_by_mode(mode: str, outcome: str, typing: bool, is_dm: bool) -> None:
    # A user's DM is gated like a group (the owner's DM aside, below).
    message = msg(guild=None) if is_dm else msg()
    decision = decide(message, mode, is_dm=is_dm)
    assert (decision.outcome, decision.show_typing) == (outcome, typing)
    assert mode in decision.reason


@pytest.mark.parametrize("mode", [m for m in MODES if m != "silent"])
def test_mention_and_reply_answer_in_every_mode_but_silent(mode: str) -> None:
    assert decide(msg(mentions=(BOT,)), mode).outcome == "respond"
    assert decide(msg(), mode, replied=True).outcome == "respond"
    assert decide(msg(reply_author=BOT), mode).outcome == "respond"


def test_reply_rule_comes_before_mention_rule() -> None:
    decision = decide(msg(mentions=(BOT,)), "mentions-only", replied=True)
    assert decision.reason == "reply to a message from the bot"


def test_raw_mention_in_text_counts() -> None:
    assert decide(msg(f"<@{BOT_ID}> hi"), "mentions-only").outcome == "respond"
    assert decide(msg(f"<@!{BOT_ID}> hi"), "mentions-only").outcome == "respond"
    assert decide(msg("<@9001> hi"), "mentions-only").outcome == "skip"


def test_reply_to_another_user_is_not_a_reply_to_the_bot() -> None:
    assert decide(msg(reply_author=User(3, "carol")), "mentions-only").outcome == "skip"


def test_silent_records_mentions_and_replies() -> None:
    assert decide(msg(mentions=(BOT,)), "silent").outcome == "record"
    assert decide(msg(), "silent", replied=True).outcome == "record"
    assert "mention" in decide(msg(mentions=(BOT,)), "silent").reason


@pytest.mark.parametrize("mode", MODES)
def test_owner_dm_answers_in_every_mode(mode: str) -> None:
    decision = decide(msg(author=OWNER_ID, guild=None), mode, is_dm=True)
    assert decision.outcome == "respond"
    assert "owner" in decision.reason


def test_owner_in_group_or_group_dm_gets_no_special_rule() -> None:
    assert decide(msg(author=OWNER_ID), "mentions-only").outcome == "skip"
    assert decide(msg(author=OWNER_ID, guild=None), "mentions-only").outcome == "skip"
    assert decide(msg(author=OWNER_ID, guild=None), "silent").outcome == "record"


def test_no_owner_configured() -> None:
    decision = decide_attention(
        msg(author=1, guild=None),
        bot_user_id=BOT_ID,
        owner_id=None,
        mode="mentions-only",
        is_dm=True,
        replied_to_bot=False,
    )
    assert decision.outcome == "skip"


@pytest.mark.parametrize("mode", MODES)
def test_attachment_only_answers_only_in_always(mode: str) -> None:
    decision = decide(msg("", attachments=2), mode)
    expected = {"always": "respond", "silent": "record"}.get(mode, "skip")
    assert decision.outcome == expected
    if mode not in ("always", "silent"):
        assert "attachments only" in decision.reason


def test_attachment_with_mention_is_a_mention() -> None:
    decision = decide(msg(f"<@{BOT_ID}>", mentions=(BOT,), attachments=1), "discriminate")
    assert decision.outcome == "respond"


@pytest.mark.parametrize(
    ("message", "mode", "is_dm", "replied", "outcome", "reason"),
    [
        (
            msg(mentions=(BOT,)),
            "discriminate",
            False,
            False,
            "respond",
            "the message mentions the bot",
        ),
        (
            msg(mentions=(BOT,)),
            "silent",
            False,
            False,
            "record",
            "silent mode: a mention of the bot is recorded, never answered",
        ),
        (
            msg(reply_author=BOT),
            "mentions-only",
            False,
            True,
            "respond",
            "reply to a message from the bot",
        ),
        (
            msg(author=OWNER_ID, guild=None),
            "silent",
            True,
            False,
            "respond",
            "direct message from the owner: answered in every mode",
        ),
        (msg(guild=None), "silent", True, False, "record", "silent mode: recorded, never answered"),
        (
            msg(author=OWNER_ID, mentions=(BOT,)),
            "silent",
            False,
            False,
            "record",
            "silent mode: a mention of the bot is recorded, never answered",
        ),
        (
            msg("", attachments=1),
            "always",
            False,
            False,
            "respond",
            "message with attachments only: always mode answers",
        ),
        (
            msg("", attachments=1),
            "mentions-only",
            False,
            False,
            "skip",
            "message with attachments only: only always mode answers, this chat is mentions-only",
        ),
        (
            msg("", attachments=1),
            "discriminate",
            False,
            False,
            "skip",
            "message with attachments only: only always mode answers, this chat is discriminate",
        ),
    ],
)
def test_each_hard_rule_gives_its_outcome_and_reason(
    message: Message, mode: str, is_dm: bool, replied: bool, outcome: str, reason: str
) -> None:
    # The words the `decision` event carries for each rule, which the owner reads in the log.
    decision = decide(message, mode, is_dm=is_dm, replied=replied)
    assert (decision.outcome, decision.reason) == (outcome, reason)


def test_unknown_mode_falls_back_and_says_so() -> None:
    decision = decide(msg(), "loud")
    assert decision.outcome == "skip"
    assert "unknown attention mode 'loud'" in decision.reason
    assert decide(msg(mentions=(BOT,)), "loud").outcome == "respond"


def test_mode_for_chat_inheritance() -> None:
    d = Defaults()
    assert mode_for_chat(None, None, True, d) == "always"
    assert mode_for_chat(None, None, False, d) == "mentions-only"
    assert mode_for_chat(None, "silent", False, d) == "silent"
    assert mode_for_chat("always", "silent", False, d) == "always"
    assert mode_for_chat("bogus", "discriminate", False, d) == "discriminate"
    assert mode_for_chat(None, None, False, Defaults(group="nope")) == FALLBACK_MODE


@given(
    content=st.text(max_size=40),
    mode=st.sampled_from((*MODES, "junk")),
    mentioned=st.booleans(),
    replied=st.booleans(),
    author=st.sampled_from((OWNER_ID, 2)),
    is_dm=st.booleans(),
    attachments=st.integers(0, 2),
)
def test_every_decision_has_a_reason_and_silent_only_answers_the_owner(
    content: str,
    mode: str,
    mentioned: bool,
    replied: bool,
    author: int,
    is_dm: bool,
    attachments: int,
) -> None:
    message = msg(
        content,
        author=author,
        guild=None if is_dm else 7000,
        mentions=(BOT,) if mentioned else (),
        attachments=attachments,
    )
    decision = decide(message, mode, is_dm=is_dm, replied=replied)
    assert decision.reason
    if decision.outcome in ("skip", "record"):
        assert not decision.show_typing
    if mode == "silent":
        owner_dm = is_dm and author == OWNER_ID
        assert (decision.outcome == "respond") == owner_dm
    if decision.outcome == "discriminate":
        assert mode in ("discriminate", "discriminate-quiet")
        assert decision.show_typing == (mode == "discriminate")
