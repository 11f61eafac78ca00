"""The pure rate-limit bookkeeping: buckets, the global limit, invalid requests."""

from __future__ import annotations

import math

from picortex.discord import ratelimit
from picortex.discord.ratelimit import (
    Bucket,
    Buckets,
    GlobalLimit,
    InvalidRequests,
    is_global_429,
    major_parameter,
    retry_after,
)


def headers(bucket: str, limit: int, remaining: int, reset_after: float) -> dict[str, str]:
    return {
        "x-ratelimit-bucket": bucket,
        "x-ratelimit-limit": str(limit),
        "x-ratelimit-remaining": str(remaining),
        "x-ratelimit-reset-after": str(reset_after),
    }


def test_an_unseen_bucket_lets_one_request_probe() -> None:
    bucket = Bucket()
    assert bucket.try_reserve(0.0)
    assert not bucket.try_reserve(0.0)


def test_a_bucket_refills_when_its_window_passes() -> None:
    bucket = Bucket()
    bucket.update(headers("b", 5, 0, 2.0), now=10.0)
    assert not bucket.try_reserve(11.9)
    assert bucket.try_reserve(12.0)
    assert bucket.remaining == 5


def test_answers_of_one_window_keep_the_lower_count() -> None:
    bucket = Bucket()
    bucket.update(headers("b", 5, 2, 1.0), now=0.0)
    bucket.update(headers("b", 5, 3, 1.1), now=0.0)  # an older answer, arriving late
    assert bucket.remaining == 2


def test_routes_learn_their_bucket_and_share_it_per_major_parameter() -> None:
    table = Buckets()
    probe = table.get("POST /channels/{id}/messages", "channels/1", 0.0)
    assert probe is not None
    assert probe.try_reserve(0.0)
    probe.outgoing -= 1
    moved = table.learn(
        "POST /channels/{id}/messages", "channels/1", probe, 200, headers("h", 5, 4, 5.0), 0.0
    )
    assert moved is not None and moved is not probe
    assert table.get("POST /channels/{id}/messages", "channels/1", 0.0) is moved
    assert table.get("POST /channels/{id}/messages", "channels/2", 0.0) is not moved
    assert len(table) == 2  # the placeholder was dropped


def test_a_route_without_rate_limit_headers_has_no_bucket() -> None:
    table = Buckets()
    probe = table.get("GET /gateway/bot", "", 0.0)
    assert table.learn("GET /gateway/bot", "", probe, 200, {}, 0.0) is None
    assert table.get("GET /gateway/bot", "", 0.0) is None


def test_the_global_limit_holds_a_slot_until_a_window_after_the_answer() -> None:
    limit = GlobalLimit(pace=0.0)  # one instant: the pace is another test's
    for _ in range(ratelimit.GLOBAL_BUDGET):
        assert limit.try_take(0.0)
    assert not limit.try_take(0.0)
    assert limit.next_free() == math.inf  # nothing answered yet: only an answer frees one
    assert limit.release(0.5) is True
    assert limit.next_free() == 0.5 + ratelimit.GLOBAL_WINDOW
    assert not limit.try_take(1.49)
    assert limit.try_take(1.5)


def test_a_global_429_blocks_every_slot_until_it_ends() -> None:
    limit = GlobalLimit()
    limit.block_until(3.0)
    assert not limit.try_take(2.9)
    assert limit.try_take(3.0)


def test_invalid_requests_warn_once_then_refuse_and_roll_off() -> None:
    counter = InvalidRequests()
    crossings = [counter.record(i * 0.1) for i in range(ratelimit.INVALID_WARN_AT)]
    assert crossings[-1] == ratelimit.INVALID_WARN_AT
    assert [c for c in crossings if c is not None] == [ratelimit.INVALID_WARN_AT]
    assert not counter.refused(100.0)
    assert counter.count(ratelimit.INVALID_WINDOW + 2000.0) == 0


def test_major_parameters_follow_discords_rules() -> None:
    assert major_parameter("/channels/5/messages") == "channels/5"
    assert major_parameter("/guilds/7/members") == "guilds/7"
    assert major_parameter("/webhooks/1/tok/messages") == "webhooks/1/tok"
    assert major_parameter("/users/@me") == ""


def test_retry_after_prefers_the_body_then_the_header_then_a_default() -> None:
    assert retry_after({"retry_after": 1.5}, {"retry-after": "9"}) == 1.5
    assert retry_after({}, {"retry-after": "9"}) == 9.0
    assert retry_after({"retry_after": True}, {}) == ratelimit.DEFAULT_RETRY_AFTER


def test_which_429s_are_global() -> None:
    assert is_global_429({"global": True}, {})
    assert is_global_429({}, {"x-ratelimit-scope": "global"})
    assert is_global_429({}, {})  # not Discord's JSON: a proxy limits all of us
    assert not is_global_429({"global": False, "message": "x"}, {"x-ratelimit-scope": "user"})
    assert not is_global_429({}, {"x-ratelimit-scope": "shared"})
