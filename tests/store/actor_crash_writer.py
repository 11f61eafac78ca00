"""Crash-test helper: queues writes through the store actor, printing ids once flushed.

Run as `python -m tests.store.actor_crash_writer DB_PATH`; the test SIGKILLs it at random.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from picortex.store import Store, StoreActor


async def main(path: str) -> None:
    store = Store.open(Path(path))
    newest = store.newest_seen(1)
    actor = StoreActor(store)
    print("ready", flush=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        next_id = (newest[0] if newest else 0) + 1
        while True:
            ids = range(next_id, next_id + 50)
            next_id += 50
            for i in ids:
                actor.mark_handled(i)
                actor.set_tier(i, "user")
            await actor.flush()
            # Printed only after the group committed: every id on stdout is durable.
            print(ids[-1], flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
