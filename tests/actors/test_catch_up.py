"""Catch-up's pure parts: message times from snowflakes."""

from __future__ import annotations

from picortex.actors import catch_up as catch_up_mod


def test_snowflake_time_round_trip() -> None:
    at = 1_750_000_000.25
    assert catch_up_mod.snowflake_seconds(catch_up_mod.snowflake_at(at)) == at
