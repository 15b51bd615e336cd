"""What tests that start servers ask of the machine's network."""

from __future__ import annotations

import socket


def port_free(port: int) -> bool:
    """Whether nothing listens on ``port`` of the loopback (a server the test starts may take it)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
