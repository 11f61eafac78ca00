"""The handled ledger: a message is handled once its decision is final, never at arrival."""

from __future__ import annotations

from pathlib import Path

from picortex.actors.handled import HandledLedger
from picortex.store import Store


def test_a_message_in_hand_is_a_replay_until_final_and_after(tmp_path: Path) -> None:
    with Store.open(tmp_path / "picortex.db") as store:
        ledger = HandledLedger(store, clock=lambda: 1000.0)
        assert ledger.take(11, seq=5)
        assert not ledger.take(11, seq=9)  # Discord sent it twice while we were at it
        assert not store.is_seen(11)  # not final yet: a kill now means it is handled again
        ledger.finish([11], channel_id=7, guild_id=3)
        assert store.is_seen(11)
        assert not ledger.take(11, seq=12)
        assert store.active_channels(since=0.0, limit=10) == [(7, 3, 11)]
    # Another process on the same database: still handled.
    with Store.open(tmp_path / "picortex.db") as store:
        assert not HandledLedger(store).take(11, seq=1)
        assert HandledLedger(store).take(12, seq=1)


def test_a_released_message_may_come_again(tmp_path: Path) -> None:
    with Store.open(tmp_path / "picortex.db") as store:
        ledger = HandledLedger(store)
        assert ledger.take(20, seq=1)
        ledger.release([20])  # never queued (a full mailbox)
        assert ledger.take(20, seq=2)


def test_safe_seq_stops_before_the_oldest_message_in_hand(tmp_path: Path) -> None:
    with Store.open(tmp_path / "picortex.db") as store:
        ledger = HandledLedger(store)
        assert ledger.safe_seq() is None
        ledger.routed(3)
        assert ledger.safe_seq() == 3
        ledger.take(30, seq=4)
        ledger.routed(4)
        ledger.take(31, seq=5)
        ledger.routed(7)
        assert ledger.safe_seq() == 3  # a RESUME from 3 replays both
        ledger.finish([30], channel_id=1, guild_id=None)
        assert ledger.safe_seq() == 4
        ledger.finish([31], channel_id=1, guild_id=None)
        assert ledger.safe_seq() == 7
        # A new session: seqs start again; what is still in hand is caught up instead.
        ledger.take(32, seq=8)
        ledger.new_session()
        assert ledger.safe_seq() is None
        ledger.routed(2)
        assert ledger.safe_seq() == 2
        assert ledger.in_hand == 1
