"""PICORTEX_FAULT_INJECT: parsing and fault points."""

from __future__ import annotations

import pytest

from picortex.errors import ConfigError, FaultInjected
from picortex.runtime.faults import FaultPoints


def test_parse_reads_comma_separated_actor_substring_pairs() -> None:
    faults = FaultPoints.parse("mailbox:boom, llm:explode now,cache:x:y,")
    assert faults.rules == (("mailbox", "boom"), ("llm", "explode now"), ("cache", "x:y"))
    assert faults


@pytest.mark.parametrize("spec", ["", "   ", ","])
def test_blank_means_no_faults(spec: str) -> None:
    faults = FaultPoints.parse(spec)
    assert faults.rules == ()
    assert not faults
    faults.check("llm", "anything")  # does not raise


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("mailbox", "ACTOR:SUBSTRING"),
        ("gateway:boom", "ACTOR:SUBSTRING"),
        ("llm:", "empty SUBSTRING"),
        ("cache:ok,store:bad", "'store:bad'"),
    ],
)
def test_bad_entries_are_one_config_error_sentence(spec: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        FaultPoints.parse(spec)
    message = str(info.value)
    assert message.startswith("PICORTEX_FAULT_INJECT entry ")
    assert why in message
    assert message.endswith(".") and "\n" not in message


def test_check_raises_only_for_the_named_actor_and_a_matching_content() -> None:
    faults = FaultPoints.parse("mailbox:boom,log:secret sauce")
    faults.check("mailbox", "all fine")
    faults.check("llm", "boom")
    with pytest.raises(FaultInjected, match="mailbox"):
        faults.check("mailbox", "say boom please")
    with pytest.raises(FaultInjected, match="secret sauce"):
        faults.check("log", '{"content":"the secret sauce"}')
