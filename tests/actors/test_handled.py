"""The handled ledger: a message is handled once its decision is final, never at arrival."""

from __future__ import annotations

from pathlib import Path

import trio

from picortex.actors.handled import HandledLedger
from picortex.store import Store, StoreActor
from picortex.store.seen import ANY_GUILD


class FakeStore:
    """The store actor's calls, in memory."""

    def __init__(self) -> None:
        self.marked: dict[int, float | None] = {}
        self.guilds: dict[int, int | None] = {}
        self.activity: list[tuple[int, int | None, int, float]] = []

    def seen(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool | None:
        return message_id in self.marked

    def mark_handled(
        self, message_id: int, at: float | None = None, guild_id: int | None = None
    ) -> None:
        self.marked[message_id] = at
        self.guilds[message_id] = guild_id

    def note_channel_activity(
        self, channel_id: int, guild_id: int | None, last_handled_id: int, at: float
    ) -> None:
        self.activity.append((channel_id, guild_id, last_handled_id, at))


def test_a_message_in_hand_is_a_replay_until_final_and_after() -> None:
    store = FakeStore()
    ledger = HandledLedger(store, clock=lambda: 1000.0)
    assert ledger.take(11, seq=5)
    assert not ledger.take(11, seq=9)  # Discord sent it twice while we were at it
    assert 11 not in store.marked  # not final yet: a kill now means it is handled again
    ledger.finish([11], channel_id=7, guild_id=3)
    assert store.marked == {11: 1000.0}
    assert store.guilds == {11: 3}  # a takeover of the guild's shard loads its marks
    assert not ledger.take(11, seq=12)
    assert store.activity == [(7, 3, 11, 1000.0)]  # the channel's activity, for catch-up


async def test_marks_and_activity_reach_the_database(tmp_path: Path) -> None:
    actor = StoreActor(Store.open(tmp_path / "picortex.db"))
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        ledger = HandledLedger(actor, clock=lambda: 1000.0)
        assert ledger.take(21, seq=1)
        ledger.finish([21], channel_id=7, guild_id=3)
        guild_on_shard_1 = 5 << 22
        assert ledger.take(22, seq=2)
        ledger.finish([22], channel_id=8, guild_id=guild_on_shard_1)
        await actor.flush()
        assert await actor.read(lambda db: db.is_seen(21))
        # Each mark is of its guild's shard.
        assert await actor.read(lambda db: db.newest_seen(10, [(0, 2)])) == [21]
        assert await actor.read(lambda db: db.newest_seen(10, [(1, 2)])) == [22]
        assert sorted(await actor.read(lambda db: db.active_channels(0.0, 10))) == [
            (7, 3, 21),
            (8, guild_on_shard_1, 22),
        ]
        nursery.cancel_scope.cancel()
    actor.close()


def test_a_released_message_may_come_again() -> None:
    ledger = HandledLedger(FakeStore())
    assert ledger.take(20, seq=1)
    ledger.release([20])  # never queued (a full mailbox)
    assert ledger.take(20, seq=2)


def test_safe_seq_stops_before_the_oldest_message_in_hand() -> None:
    ledger = HandledLedger(FakeStore())
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


def test_each_shard_keeps_its_own_safe_seq() -> None:
    """Two shards in one process: seqs come as `seq * 2 + shard`; each shard's RESUME point
    only looks at its own messages, and one shard's new session leaves the other's alone."""
    ledger = HandledLedger(FakeStore())
    ledger.shard_count = 2
    ledger.routed(5 * 2 + 0)  # shard 0 at seq 5
    ledger.take(40, seq=9 * 2 + 1)  # shard 1: seq 9 in hand
    ledger.routed(9 * 2 + 1)
    ledger.routed(30 * 2 + 1)  # shard 1 routed on to 30
    assert ledger.safe_seq(0) == 5
    assert ledger.safe_seq(1) == 8  # a RESUME of shard 1 from 8 replays message 40
    ledger.take(41, seq=6 * 2 + 0)
    assert ledger.safe_seq(0) == 5
    # Shard 0 identifies afresh (its READY is seq 1): shard 1's messages keep their seqs.
    assert ledger.new_session(1 * 2 + 0) == 0  # the shard whose channels catch up
    assert ledger.safe_seq(0) is None
    assert ledger.safe_seq(1) == 8
    ledger.finish([40], channel_id=1, guild_id=None)
    assert ledger.safe_seq(1) == 30
