"""Crash-test helper: writes rows in transactions forever, printing each id once committed.

Run as `python -m tests.store.crash_writer DB_PATH`; the test SIGKILLs it at random moments.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from picortex.store import Store


def main(path: str) -> None:
    store = Store.open(Path(path))
    print("ready", flush=True)
    while True:
        now = time.time()
        with store.transaction():
            eid = store.add_invocation_error(
                "dm", "crash", str(now), "generate", "killed mid-write " * 20, "trace", now
            )
            store.add_memory_message(eid, 1, None, 2, "writer", f"crash row {eid} " * 10, now)
            store.add_observation("crash", eid, 1, None, "row", f"observed {eid}", now)
            store.mark_seen(eid, now)
            store.set_tier(eid, "user")
            store.set_runtime_config("crash.last_id", str(eid))
            store.add_spend("dm", "crash", 0.001, now)
        # Printed only after COMMIT returned: every id on stdout is committed.
        print(eid, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
