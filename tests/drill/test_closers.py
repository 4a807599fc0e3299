"""The drill's clean-up stack: newest first, every closer runs, problems come back named."""
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
