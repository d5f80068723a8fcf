"""What a client of HTTPS checks a server's certificate against: the CA certificates
of a PEM file an operator names, else the system's trust store."""

from __future__ import annotations

import ssl
from pathlib import Path

__all__ = ["trust"]


def trust(ca_file: Path | None) -> ssl.SSLContext | bool:
    """A context of ``ca_file``'s CA certificates (loaded once, for every client that
    shares it), or True for the system's store; ``OSError`` or ``ssl.SSLError`` for a
    file that cannot be read or holds no certificate."""
    if ca_file is None:
        return True
    return ssl.create_default_context(cafile=str(ca_file))
