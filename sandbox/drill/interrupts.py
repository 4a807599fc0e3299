"""How a command ends on a signal, and how its clean-up survives more of them.

    Ctrl-C, SIGTERM, SIGHUP   end a command the same way (a terminal closing or an SSH session
                              dropping sends SIGHUP): the drill raises DrillInterrupted, every other
                              command KeyboardInterrupt, and each cleans up as on Ctrl-C
    during the clean-up       the next signal is noted and the clean-up goes on; the one after
                              stops it at once (TeardownForced), and the drill says what it left
"""
from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class DrillInterrupted(BaseException):
    """SIGTERM or SIGHUP (Ctrl-C arrives as KeyboardInterrupt): end the drill and clean up.

    A BaseException, as KeyboardInterrupt is, so a layer that wraps whatever goes wrong in its own error
    (`except Exception`, as a fault's inject does) lets it through: a SIGTERM mid-injection ended a churn
    drill as "failed" with "InjectionFailed: deploy: DrillInterrupted: signal 15" where Ctrl-C at the same
    moment ends it "interrupted"."""


class TeardownForced(BaseException):
    """A signal during a clean-up already asked to go on: stop cleaning up now. `left` names what was not."""

    def __init__(self, left: list[str] | None = None):
        super().__init__(", ".join(left or []))
        self.left = list(left or [])


def raise_interrupted(signum, frame):
    raise DrillInterrupted(f"signal {signum}")


def _as_ctrl_c(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def end_on_signals() -> None:
    """SIGTERM and SIGHUP end this process as Ctrl-C does, so its clean-up (`finally`, context managers)
    runs: by default both kill it on the spot, leaving what it started."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _as_ctrl_c)


@contextlib.contextmanager
def deferred_signals(note: Callable[[str], None] = lambda text: None):
    """Clean-up runs to the end: the first signal during it is noted, the second forces it to stop."""
    received = []

    def handler(signum, frame):
        received.append(signum)
        if len(received) == 1:
            note("cleaning up first: reverting what was injected and stopping what was started "
                 "(signal again to stop at once, leaving the rest to `sandbox down`)")
            return
        raise TeardownForced()

    old = {s: signal.signal(s, handler) for s in ENDING_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
