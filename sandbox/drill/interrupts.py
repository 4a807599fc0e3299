"""How a drill ends on a signal: SIGTERM raises like Ctrl-C; the clean-up itself is not interrupted."""
from __future__ import annotations

import contextlib
import signal


class DrillInterrupted(Exception):
    """SIGTERM (Ctrl-C arrives as KeyboardInterrupt): end the drill and clean up."""


def raise_interrupted(signum, frame):
    raise DrillInterrupted(f"signal {signum}")


@contextlib.contextmanager
def deferred_signals():
    """Clean-up runs to the end: a second Ctrl-C or SIGTERM during it waits until it is done."""
    received = []
    old = {s: signal.signal(s, lambda n, f: received.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
