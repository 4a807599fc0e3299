"""`sandbox up` next to a process that holds one of its ports fails at once, naming the port and the holder."""
import os
import socket
import subprocess
import sys
import time

import pytest

from services.stack import ports


@pytest.fixture
def held_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def test_a_listening_port_is_not_free_and_its_holder_is_this_process(held_port):
    assert not ports.free("127.0.0.1", held_port)
    assert ports.holder(held_port).startswith(f"pid {os.getpid()} (")


def test_a_port_nobody_holds_is_free_and_has_no_holder():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    assert ports.free("127.0.0.1", port) and ports.holder(port) is None


def test_check_free_names_every_taken_port_and_its_holder(held_port):
    with pytest.raises(ports.PortTaken) as e:
        ports.check_free("127.0.0.1", {"Prometheus": held_port})
    assert str(e.value).startswith(f"Prometheus port 127.0.0.1:{held_port} is in use by pid {os.getpid()} (")


def test_sandbox_up_with_its_prometheus_port_taken_fails_within_10_s_naming_the_holder(held_port, tmp_path):
    env = dict(os.environ, SANDBOX_HOME=str(tmp_path / "home"), SANDBOX_PROMETHEUS_PORT=str(held_port),
               SANDBOX_API_PORT="8019", SANDBOX_RAY_PORT="6399", SANDBOX_DASHBOARD_PORT="8285",
               SANDBOX_METRICS_EXPORT_PORT="8099", SANDBOX_TRAFFIC_PORT="9419")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "sandbox.cli", "up"], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert time.monotonic() - t0 < 10
    assert out.returncode == 1
    assert f"Prometheus port 127.0.0.1:{held_port} is in use by pid {os.getpid()}" in out.stderr
    assert not (tmp_path / "home" / "state.json").exists()  # nothing was started, nothing to stop
