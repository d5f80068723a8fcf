"""``HOST:PORT`` of a listening socket: one rule for the agent's and the coordinator's
settings (in reservoir.common, below both, so the coordinator does not import the agent)."""

from __future__ import annotations

__all__ = ["parse_listen"]


def parse_listen(text: str) -> tuple[str, int]:
    """``("host", port)`` of ``HOST:PORT`` (``[v6]:PORT`` too); ValueError otherwise."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
