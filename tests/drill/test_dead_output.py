"""A command whose reader went away (a closed pipe: `tee` ended by the same Ctrl-C) goes on, silently."""
import io
import os
import subprocess
import sys

from rich.console import Console

from services.stack.progress import Steps


class DeadFile(io.TextIOBase):
    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self):
        return False


def test_steps_on_a_dead_output_go_silent_and_every_step_still_runs():
    steps, done = Steps(Console(file=DeadFile())), []
    with steps.step("reverting the injected changes"):
        done.append("revert")
    steps.note("a note nobody reads")
    with steps.bar("calibrating", 10) as advance:
        advance(5, "half")
        done.append("calibrate")
    assert done == ["revert", "calibrate"] and steps.console is None
    assert set(steps.timings) == {"reverting the injected changes", "calibrating"}


def test_the_commands_console_survives_a_closed_pipe_where_richs_default_would_exit():
    # a child process prints through sandbox.commands.common's console after its reader has gone
    code = ("import os, sys, time\n"
            "from sandbox.commands.common import console\n"
            "sys.stdin.read()\n"  # wait until the parent has closed its end of our stdout
            "for i in range(200): console.print('x' * 100)\n"
            "open(os.environ['DONE'], 'w').write('went on')\n")
    done = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"dead-output-{os.getpid()}")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, DONE=done))
    proc.stdout.close()
    proc.stdin.close()
    proc.wait(timeout=60)
    err = proc.stderr.read()
    try:
        assert open(done).read() == "went on", err.decode()[-2000:]
    finally:
        if os.path.exists(done):
            os.unlink(done)
