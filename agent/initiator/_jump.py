"""Connections that start at their paced rate (a *jump start*, design 3.3).

A new TCP connection slow-starts from 10 segments: on a 200 ms path its window
doubles each round trip, and a stream whose share of a 1 Gbit/s path is 60 Mbit/s
needs about 7 round trips (1.4 s) to carry it. Where the pacing plan gives the
stream's share of its NIC, the connection can start with the window that carries
that share for one round trip: the socket is bound to its local port, announced to
the pacing component's BPF program with its rate (``Starter.jump_start``), then
connected; when the handshake has measured the round trip, the program sets the
initial window (TCP_BPF_IW) to rate x srtt / mss segments, before any data.

The socket is paced at that rate (SO_MAX_PACING_RATE), so the first window leaves
over a round trip, not as a burst; the copy's stream caps lift that pacing once the
stream runs (:class:`reservoir.agent.transfer.StreamCaps`). The receiver must offer
a window as large from the start (the builtin target does, see ``open_window`` of
the pacing component), or the sender stays held to the receiver's growth.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Mapping
from typing import Protocol

from reservoir.agent.initiator._transport import (
    Connector,
    PduSink,
    TcpTransport,
    connect_socket,
    tcp_connect,
)

SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)
ANY_LOCAL = ""
"""The key of ``rates`` for connections made without a local address."""


class Starter(Protocol):
    """What announces a connection's rate to the kernel (reservoir.pacing.CwndCaps)."""

    def jump_start(self, sock: socket.socket, remote: tuple[str, int], rate: int) -> bytes: ...

    def withdraw_start(self, key: bytes) -> None: ...


def jump_connector(starter: Starter, rates: Mapping[str, int]) -> Connector:
    """TCP connections (TCP_NODELAY) jump-started at ``rates[local address]`` bytes per
    second (``rates[ANY_LOCAL]`` for those made without a local address); a
    connection from an address without a rate is made as :func:`tcp_connect` makes it."""

    async def connect(
        host: str, port: int, local_address: str | None, sink: PduSink
    ) -> TcpTransport:
        rate = rates.get(local_address or ANY_LOCAL)
        if rate is None:
            return await tcp_connect(host, port, local_address, sink)
        return await _jump_connect(starter, rate, (host, port), local_address, sink)

    return connect


async def _jump_connect(
    starter: Starter, rate: int, to: tuple[str, int], local_address: str | None, sink: PduSink
) -> TcpTransport:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(*to, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    family, _, _, _, address = infos[0]
    keys: list[bytes] = []

    def announce(sock: socket.socket) -> None:  # bound: the kernel knows its local port
        keys.append(starter.jump_start(sock, (str(address[0]), int(address[1])), rate))
        sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=Q", rate))

    wildcard = "::" if family == socket.AF_INET6 else "0.0.0.0"
    local = (local_address or wildcard, 0)
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
        return await connect_socket(sock, address, sink, local=local, prepare=announce)
    finally:
        for key in keys:  # consumed at the handshake; here only if it never came
            with contextlib.suppress(OSError):
                starter.withdraw_start(key)
