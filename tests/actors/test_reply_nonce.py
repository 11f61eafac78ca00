"""The enforced nonces of a trigger's posts: stable across a second handling, distinct
between an answer, a command's reply and a poll's result, within Discord's 25 characters."""

from __future__ import annotations

from picortex.actors.replies import reply_nonce

BIGGEST_SNOWFLAKE = 2**64 - 1


def test_the_same_post_handled_again_gets_the_same_nonce() -> None:
    assert reply_nonce(1577341165349502977, "c", 0) == reply_nonce(1577341165349502977, "c", 0)


def test_a_triggers_posts_never_share_a_nonce() -> None:
    trigger = 1577341165349502977
    nonces = {reply_nonce(trigger, part, index)["nonce"] for part in "acr" for index in range(3)}
    assert len(nonces) == 9
    assert reply_nonce(trigger + 1, "a", 0) != reply_nonce(trigger, "a", 0)


def test_nonces_fit_discords_limit() -> None:
    assert len(reply_nonce(BIGGEST_SNOWFLAKE, "r", 9)["nonce"]) <= 25


def test_no_trigger_no_nonce() -> None:
    assert reply_nonce(None, "a", 0) == {}
