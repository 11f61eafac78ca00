"""Crash-test helper: writers that add rows in transactions forever, printing each committed id.

Run as `python -m tests.store.crash_writer`: for each line `DB_PATH FIFO_PATH` read on stdin it
forks a writer and prints the writer's pid; the writer prints "ready" once the store is open,
then each id as its transaction commits, into the FIFO. When the writer ends (the test
SIGKILLs it) the server prints its wait status. Forking from one process that imported the
store once makes each writer start at `Store.open`, without an interpreter start of its own.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import NoReturn, TextIO

from picortex.store import Store


def write_forever(path: str, out: TextIO) -> NoReturn:
    store = Store.open(Path(path))
    print("ready", file=out, flush=True)
    while True:
        now = time.time()
        with store.transaction():
            eid = store.add_invocation_error(
                "dm", "crash", str(now), "generate", "killed mid-write " * 20, "trace", now
            )
            store.add_memory_message(eid, 1, None, 2, "writer", f"crash row {eid} " * 10, now)
            store.add_observation("crash", eid, 1, None, "row", f"observed {eid}", now)
            store.mark_seen_many([(eid, now, None)])
            store.set_tier(eid, "user")
            store.set_runtime_config("crash.last_id", str(eid))
            store.add_spend("dm", "crash", 0.001, now)
        # Printed only after COMMIT returned: every id in the FIFO is committed.
        print(eid, file=out, flush=True)


def serve() -> None:
    for line in sys.stdin:
        db, fifo = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                with open(fifo, "w", encoding="utf-8") as out:
                    write_forever(db, out)
            finally:
                os._exit(1)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(status, flush=True)


if __name__ == "__main__":
    serve()
