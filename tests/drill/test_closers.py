"""The drill's clean-up stack: newest first, every closer runs, problems come back named."""
import pytest

from sandbox.drill.closers import Closers


def test_closers_run_newest_first_and_each_once():
    ran, closers = [], Closers()
    for name in ("stack", "record", "traffic"):
        closers.push(name, lambda name=name: ran.append(name))
    assert closers.close_all() == [] and ran == ["traffic", "record", "stack"]
    assert len(closers) == 0 and closers.close_all() == [] and ran == ["traffic", "record", "stack"]


def test_a_failing_closer_does_not_stop_the_others_and_is_named():
    ran, closers = [], Closers()
    closers.push("stack", lambda: ran.append("stack"))
    closers.push("faults", lambda: ["revert: pause: not running"])
    closers.push("traffic", lambda: 1 / 0)
    assert closers.close_all() == ["traffic: ZeroDivisionError: division by zero", "revert: pause: not running"]
    assert ran == ["stack"]


def test_a_forced_stop_names_the_closer_it_stopped_in_and_every_one_left():
    from sandbox.drill.interrupts import TeardownForced

    closers, ran = Closers(), []
    closers.push("the stack", lambda: ran.append("stack"))
    closers.push("the record", lambda: ran.append("record"))
    closers.push("faults", lambda: (_ for _ in ()).throw(TeardownForced()))
    closers.push("traffic", lambda: ran.append("traffic"))
    with pytest.raises(TeardownForced) as e:
        closers.close_all()
    assert ran == ["traffic"] and e.value.left == ["faults", "the record", "the stack"] and len(closers) == 0


def test_during_a_clean_up_the_first_signal_is_noted_and_the_second_forces_it():
    import os
    import signal

    from sandbox.drill.interrupts import TeardownForced, deferred_signals

    notes, before = [], signal.getsignal(signal.SIGHUP)
    with pytest.raises(TeardownForced), deferred_signals(notes.append):
        os.kill(os.getpid(), signal.SIGHUP)
        assert len(notes) == 1 and notes[0].startswith("cleaning up first")
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGHUP) is before  # the handlers before it are back
