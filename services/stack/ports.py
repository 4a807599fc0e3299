"""Is a port free, and if not, who holds it: checked before `sandbox up` starts anything. Also the free ports
a container node's Ray takes (`free_ports`, `free_block`).

A Prometheus left behind by a killed replay kept 127.0.0.1:9090; the next `up` started its
own, did not notice it could not bind, and waited 180 s on the old one for replicas it
would never see. Now `up` tries every port it is about to serve on first and fails at
once, naming the port and the process listening on it (found from /proc: the socket's
inode in /proc/net/tcp, then the process whose descriptors include it).
"""
from __future__ import annotations

import errno
import socket
from pathlib import Path

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


class PortTaken(RuntimeError):
    """A port the stack must serve on is in use."""


def free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to a server
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports nothing listens on now, chosen by the OS (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_block(size: int, start: int = 20000, end: int = 30000, host: str = "127.0.0.1") -> int:
    """The first port of `size` consecutive ports nobody holds on `host` (a Ray worker's range)."""
    for low in range(start, end, size):
        if all(free(host, p) for p in range(low, low + size)):
            return low
    raise PortTaken(f"no {size} free consecutive ports between {start} and {end}")


def _listening() -> list[tuple[int, str]]:
    """(port, socket inode) of every TCP socket listening on this machine (IPv4 and IPv6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN:
                out.append((int(fields[1].rsplit(":", 1)[1], 16), fields[9]))
    return out


def listening_ports() -> set[int]:
    return {port for port, _ in _listening()}


def _listening_inodes(port: int) -> set[str]:
    return {inode for p, inode in _listening() if p == port}


def holder(port: int) -> str | None:
    """'pid N (command line)' of a process listening on the port, None when none can be seen."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue  # gone, or another user's
        for fd in fds:
            try:
                if str(fd.readlink()) in wanted:
                    cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                    return f"pid {proc.name} ({cmd[:160]})"
            except OSError:
                continue
    return "a process this user cannot see"


def check_free(host: str, ports: dict[str, int]) -> None:
    """Raises PortTaken naming every port of `ports` (what it is for -> number) that is in use."""
    taken = [f"{what} port {host}:{port} is in use by {holder(port) or 'another process'}"
             for what, port in ports.items() if not free(host, port)]
    if taken:
        raise PortTaken("; ".join(taken) + " (stop it, or choose other ports with SANDBOX_<NAME>_PORT)")
