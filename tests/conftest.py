"""Suite-wide setup: Triton runs in its CPU interpreter when there is no GPU; Ctrl-C reaches the
processes the tests start.

The variable must be set before triton is imported anywhere.
"""
import os
import signal
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# A suite started in the background by a non-interactive shell (`make test &`, nohup) inherits SIGINT
# ignored (POSIX: without job control a background job ignores SIGINT and SIGQUIT), and every process it
# starts would too, so the Ctrl-C tests' drills never saw their Ctrl-C. They stand in for a terminal's
# foreground job, whose Ctrl-C is delivered: a Python handler here is reset to the default at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
