"""`--shards` / `[cluster] shards`: `2/8`, `0-3,8-11/16`, `auto/16`; every bad text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.shards import SHARD_COUNT_MAX, ShardSpec, parse_shards
from picortex.errors import ConfigError


def test_one_shard() -> None:
    assert parse_shards("2/8") == ShardSpec(ids=(2,), count=8)


def test_ranges_and_ids() -> None:
    spec = parse_shards(" 0-3, 8-11 /16")
    assert spec == ShardSpec(ids=(0, 1, 2, 3, 8, 9, 10, 11), count=16)
    assert str(spec) == "0-3,8-11/16"


def test_auto_takes_every_shard_capped_by_capacity() -> None:
    spec = parse_shards("auto/16")
    assert spec == ShardSpec(ids=(), count=16, auto=True)
    assert spec.held() == tuple(range(16))
    assert spec.held(3) == (0, 1, 2)
    assert parse_shards("0-3/8").held(2) == (0, 1)
    assert str(spec) == "auto/16"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "must look like IDS/COUNT"),
        ("3", "must look like IDS/COUNT"),
        ("/8", "must look like IDS/COUNT"),
        ("8/8", "shard 8 is out of range (ids go from 0 to 7)"),
        ("0-9/8", "shard 9 is out of range"),
        ("1/0", "the shard count must be from 1"),
        (f"0/{SHARD_COUNT_MAX + 1}", "the shard count must be from 1"),
        ("a/8", "a shard id must be a whole number, got 'a'"),
        ("1/x", "the shard count must be a whole number"),
        ("-1/8", "a shard id must be a whole number, got ''"),
        ("0,,1/8", "has an empty entry between commas"),
        ("3-1/8", "the range 3-1 runs backwards"),
        ("0-2,2/8", "names shard 2 twice"),
        ("1/2/3", "a shard id must be a whole number"),
    ],
)
def test_bad_text_is_one_sentence(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_shards(text)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


@st.composite
def _specs(draw: st.DrawFn) -> tuple[int, list[int]]:
    count = draw(st.integers(1, 64))
    ids = draw(st.sets(st.integers(0, count - 1), min_size=1))
    return count, sorted(ids)


@given(_specs(), st.randoms())
def test_written_ids_in_any_order_parse_back(spec: tuple[int, list[int]], rnd: object) -> None:
    count, ids = spec
    shuffled = list(ids)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    parsed = parse_shards(",".join(map(str, shuffled)) + f"/{count}")
    assert parsed.ids == tuple(ids)
    assert parsed.count == count
    # The compact form reads back to the same spec.
    assert parse_shards(str(parsed)) == parsed


@given(st.text(max_size=20))
def test_any_text_parses_or_says_why(text: str) -> None:
    try:
        spec = parse_shards(text)
    except ConfigError as exc:
        assert str(exc)
    else:
        assert all(0 <= i < spec.count for i in spec.ids)
        assert len(set(spec.ids)) == len(spec.ids)
