"""Free TCP ports for the servers the tests start, safe against the races a shared machine has.

A port found by binding port 0 comes from the kernel's ephemeral range, which is also where every
outgoing connection's source port and every port Ray or a server picks for itself come from: in the
moment between "found free" and the server's ``bind``, another process may take it (an api-server
that then cannot listen leaves ``airflow standalone`` running without it).  So the ports here come
from below that range and above Ray's worker ports (10002-19999), where nothing takes a port
unasked, and each one is claimed for the life of the test process by a lock file, so two test
workers never hand out the same one.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile

#: Above Ray's default worker port range (10002-19999), below Linux's ephemeral range (32768-).
PORT_RANGE = (20000, 32700)
_CLAIMS_DIR = os.path.join(tempfile.gettempdir(), "dj-test-port-claims")
_held_claims: list[int] = []  # open descriptors: a claim lasts as long as this process


def _claim(port: int) -> int | None:
    """A descriptor holding an exclusive lock on ``port``'s claim file, or None when another process holds it."""
    os.makedirs(_CLAIMS_DIR, mode=0o1777, exist_ok=True)
    fd = os.open(os.path.join(_CLAIMS_DIR, str(port)), os.O_CREAT | os.O_RDONLY, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on, claimed by this process (no other test worker gets it)."""
    for _ in range(500):
        port = random.randrange(*PORT_RANGE)
        fd = _claim(port)
        if fd is None:
            continue
        if _bindable(port):
            _held_claims.append(fd)
            return port
        os.close(fd)  # someone outside the tests listens there: leave it
    raise RuntimeError(f"no free port in {PORT_RANGE} after 500 tries")
