"""A Docker engine for the container tests: the one at DOCKER_HOST if it answers, else one of our own.

Our own is `dockerd --bridge=none --iptables=false` (host networking only: traffic stays on loopback)
with its data and exec roots in a temporary directory; it is stopped and its directories removed at
the end of the session. The tests skip, saying why, only when dockerd is not installed or cannot
start (it needs root). Whatever the tests start or import (containers, the node image) is removed at
the end; tests/containers/test_container_leftovers.py checks that nothing is left.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.stack.container_node import IMAGE, EngineUnavailable, docker_engine, sandbox_containers

DEFAULT_NETWORKS = {"bridge", "host", "none"}


@dataclass
class Engine:
    client: object
    host: str  # DOCKER_HOST
    ours: bool  # started by this session
    image_before: bool  # the node image existed before the session
    networks_before: set[str] = field(default_factory=set)

    def leftovers(self) -> dict:
        """What the tests left: sandbox containers, the node image they imported, networks they made."""
        images = {t for img in self.client.images.list() for t in img.tags}
        return {"containers": [c.name for c in sandbox_containers(self.client)],
                "images": [IMAGE] if IMAGE in images and not self.image_before else [],
                "networks": sorted({n.name for n in self.client.networks.list()}
                                   - DEFAULT_NETWORKS - self.networks_before)}

    def clean(self) -> None:
        for c in sandbox_containers(self.client):
            c.remove(force=True)
        if not self.image_before:
            from services.stack.container_node import remove_image

            remove_image(self.client)


def _start_dockerd(root: Path) -> subprocess.Popen:
    sock = root / "docker.sock"
    cmd = ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false", f"--data-root={root / 'data'}",
           f"--exec-root={root / 'exec'}", "-H", f"unix://{sock}", f"--pidfile={root / 'dockerd.pid'}"]
    log = open(root / "dockerd.log", "ab")  # noqa: SIM115 - the daemon keeps it until it stops
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="session")
def engine():
    try:
        client = docker_engine()
        ours, proc, root = False, None, None
    except EngineUnavailable as reason:
        if shutil.which("dockerd") is None:
            pytest.skip(f"no Docker engine ({reason}) and dockerd is not installed (scripts/setup.sh installs it)")
        if os.geteuid() != 0:
            pytest.skip(f"no Docker engine ({reason}) and dockerd needs root to start one")
        root = Path(tempfile.mkdtemp(prefix="sbx-dockerd-"))
        proc = _start_dockerd(root)
        os.environ["DOCKER_HOST"] = f"unix://{root / 'docker.sock'}"
        deadline = time.monotonic() + 60
        while True:
            try:
                client = docker_engine()
                break
            except EngineUnavailable:
                if proc.poll() is not None or time.monotonic() > deadline:
                    _stop(proc)
                    log = (root / "dockerd.log").read_text(errors="replace")[-600:]
                    shutil.rmtree(root, ignore_errors=True)
                    pytest.skip(f"dockerd could not start: {log}")
                time.sleep(0.5)
        ours = True
    images = {t for img in client.images.list() for t in img.tags}
    handle = Engine(client, os.environ.get("DOCKER_HOST", ""), ours, IMAGE in images,
                    {n.name for n in client.networks.list()} - DEFAULT_NETWORKS)
    try:
        yield handle
    finally:
        handle.clean()
        client.close()
        if ours:
            _stop(proc)
            os.environ.pop("DOCKER_HOST", None)
            subprocess.run(["umount", "-R", str(root / "exec")], capture_output=True, check=False)
            shutil.rmtree(root, ignore_errors=True)
