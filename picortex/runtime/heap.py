"""The heap of a long-lived bot process: what the garbage collector walks, and when.

A full collection (generation 2) walks every container object the process holds, on
whichever thread triggered it, holding the GIL throughout: the event loop stands still for
its whole length. Start-up leaves about a quarter of a million such objects behind (modules,
functions, classes, the SDKs' models) that live as long as the process, and walking them took
about 100 ms per full collection under load, enough by itself to delay a heartbeat by more
than 100 ms in the middle of a burst. Frozen once the process has started, they are never
walked again; full collections then cost what the running bot holds (caches, sessions).
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect once, then move every surviving object out of the collector's reach.

    Call once, after the imports and the wiring of a `picortex run` process and before its
    event loop gets busy (never in a test process: it would keep the tests' garbage cycles).
    Objects frozen here are still freed by reference counting; only cycles among them that
    die later would be kept, and start-up objects live as long as the process anyway.
    Returns how many objects were frozen.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
