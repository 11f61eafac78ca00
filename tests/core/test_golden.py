"""Golden conversations: rule outcomes, exact rendered prompts, decisions for scripted answers.

Set PICORTEX_UPDATE_GOLDEN=1 to rewrite the prompt files after an intended change; under CI
(`CI` set) that mode fails instead, so a run there never rewrites what it checks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from picortex.core.attention import decide_attention, mode_for_chat
from picortex.core.discriminator import (
    ChatMeta,
    HistoryLine,
    decide_from_text,
    fail_decision,
    max_prompt_chars,
    prompt_chars,
    render_prompt,
    worst_case_cost_usd,
)
from picortex.types import Attachment, Message, User

GOLDEN = Path(__file__).parent / "golden"
PROMPTS = GOLDEN / "prompts"
TEMPLATE = Path(__file__).parents[2] / "picortex" / "templates" / "discriminator.md"


def update_mode(environ: Mapping[str, str]) -> bool:
    """Whether golden files are to be rewritten; fails the test when asked to under CI."""
    if environ.get("PICORTEX_UPDATE_GOLDEN") != "1":
        return False
    if environ.get("CI"):
        pytest.fail("PICORTEX_UPDATE_GOLDEN=1 rewrites golden files: never under CI")
    return True


BOT = User(900, "picortex", bot=True)
OWNER_ID = 1
USERS = {
    "alice": 1,
    "bob": 2,
    "carol": 3,
    "dave": 4,
    "mallory": 5,
    "Zoë": 6,
    "picortex": 900,
}
HAIKU_IN, HAIKU_OUT = 0.10, 0.50

SCRIPTED_TEXT = {
    "answer_true": '{"should_respond": true, "reason": "asks something the bot can answer"}',
    "answer_false": '{"should_respond": false, "reason": "chatter between people"}',
    "fenced": '```json\n{"should_respond": true, "reason": "a question for the room"}\n```',
    "invalid": "Sure! I think the bot should answer this one.",
}
SCRIPTED_FAILURE = {
    "timeout": "the discriminator gave no answer within 5 s",
    "http_500": "the discriminator call failed: HTTP 500",
}


@attrs.frozen
class Defaults:
    dm: str = "always"
    group: str = "mentions-only"


def _cases() -> list[dict[str, Any]]:
    data = yaml.safe_load((GOLDEN / "cases.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, list)
    return data


CASES = _cases()


def _text(entry: list[Any] | dict[str, Any]) -> str:
    if isinstance(entry, dict):
        return str(entry["text"]) * int(entry.get("repeat", 1))
    return str(entry[1]) * (int(entry[2]) if len(entry) > 2 else 1)


def _message(case: dict[str, Any]) -> Message:
    chat, msg = case["chat"], case["message"]
    author = msg["author"]
    return Message(
        id=10_000,
        channel_id=int(chat["id"]),
        author=User(USERS[author], author),
        content=_text(msg),
        timestamp="2026-04-12T10:00:00+00:00",
        guild_id=7000 if chat["kind"] != "dm" and not chat.get("group_dm") else None,
        mentions=(BOT,) if msg.get("mentions_bot") else (),
        attachments=tuple(
            Attachment(id=20_000 + i, filename=name)
            for i, name in enumerate(msg.get("attachments", ()))
        ),
    )


def _prompt(case: dict[str, Any]) -> str:
    chat = case["chat"]
    cap = case.get("max_chars", max_prompt_chars(HAIKU_IN, HAIKU_OUT))
    return render_prompt(
        TEMPLATE.read_text(encoding="utf-8"),
        history=[HistoryLine(entry[0], _text(entry)) for entry in case["history"]],
        message=(case["message"]["author"], _text(case["message"])),
        chat=ChatMeta(chat["id"], chat["kind"], chat["name"], "picortex"),
        max_chars=cap,
    )


def test_golden_set_is_big_and_varied() -> None:
    assert len(CASES) >= 30
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len(names)
    kinds = {c["chat"]["kind"] for c in CASES}
    assert kinds == {"dm", "group", "thread"}
    assert {c["expect"]["outcome"] for c in CASES} == {"respond", "skip", "discriminate", "record"}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_rule_outcome(case: dict[str, Any]) -> None:
    chat, expect = case["chat"], case["expect"]
    is_dm = chat["kind"] == "dm"
    mode = mode_for_chat(chat.get("mode"), chat.get("parent_mode"), is_dm, Defaults())
    assert mode == expect["mode"]
    decision = decide_attention(
        _message(case),
        bot_user_id=BOT.id,
        owner_id=OWNER_ID,
        mode=mode,
        is_dm=is_dm,
        replied_to_bot=bool(case["message"].get("reply_to_bot")),
    )
    assert (decision.outcome, decision.show_typing, decision.reason) == (
        expect["outcome"],
        expect["show_typing"],
        expect["reason"],
    )
    # Scripted answers are listed exactly for the cases that reach the discriminator.
    assert ("model" in case) == (decision.outcome == "discriminate")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_rendered_prompt_matches_golden_file(case: dict[str, Any]) -> None:
    rendered = _prompt(case)
    path = PROMPTS / f"{case['name']}.prompt.txt"
    if update_mode(os.environ):
        PROMPTS.mkdir(exist_ok=True)
        path.write_bytes(rendered.encode("utf-8"))
    assert path.exists(), f"{path.name} is missing: run with PICORTEX_UPDATE_GOLDEN=1"
    assert path.read_bytes().decode("utf-8") == rendered
    assert prompt_chars(rendered) <= case.get("max_chars", max_prompt_chars(HAIKU_IN, HAIKU_OUT))


@pytest.mark.parametrize("ci", ["true", "1"])
def test_the_update_mode_fails_under_ci(ci: str) -> None:
    with pytest.raises(pytest.fail.Exception, match="never under CI"):
        update_mode({"PICORTEX_UPDATE_GOLDEN": "1", "CI": ci})
    assert update_mode({"PICORTEX_UPDATE_GOLDEN": "1"}) is True
    assert update_mode({"CI": ci}) is False


def test_no_stale_golden_files() -> None:
    expected = {f"{c['name']}.prompt.txt" for c in CASES}
    assert {p.name for p in PROMPTS.glob("*.prompt.txt")} == expected


DISCRIMINATED = [c for c in CASES if "model" in c]


@pytest.mark.parametrize("case", DISCRIMINATED, ids=[c["name"] for c in DISCRIMINATED])
def test_decision_for_scripted_answers(case: dict[str, Any]) -> None:
    is_dm = case["chat"]["kind"] == "dm"
    expected = case["model"]
    assert set(expected) == set(SCRIPTED_TEXT) | set(SCRIPTED_FAILURE)
    for key, text in SCRIPTED_TEXT.items():
        decision = decide_from_text(text, is_dm=is_dm)
        assert decision.outcome == expected[key], key
    for key, reason in SCRIPTED_FAILURE.items():
        decision = fail_decision(is_dm, reason)
        assert decision.outcome == expected[key], key
        assert decision.reason.startswith(reason)


def test_largest_golden_prompt_costs_under_a_tenth_of_a_cent() -> None:
    largest = max((_prompt(c) for c in CASES), key=prompt_chars)
    cost = worst_case_cost_usd(largest, HAIKU_IN, HAIKU_OUT)
    assert cost < 0.001
    print(f"largest golden prompt: {prompt_chars(largest)} chars, ${cost:.6f}")
