"""The jump connector on loopback: a connection from an address with a rate is bound,
announced with its rate, paced at it and connected; others are made as usual."""

from __future__ import annotations

import asyncio
import socket

import pytest

from reservoir.agent.initiator import ANY_LOCAL, TcpTransport, jump_connector
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.transfer._caps import NO_PACING, pacing_rate


class Starter:
    """Records announcements; ``fail`` makes the next one raise, as a full map would."""

    def __init__(self, fail: OSError | None = None) -> None:
        self.started: list[tuple[int, tuple[str, int], int]] = []
        self.withdrawn: list[bytes] = []
        self.fail = fail

    def jump_start(self, sock: socket.socket, remote: tuple[str, int], rate: int) -> bytes:
        if self.fail is not None:
            raise self.fail
        port = int(sock.getsockname()[1])
        assert port != 0, "announced before the socket had its local port"
        self.started.append((port, remote, rate))
        return port.to_bytes(2, "big")

    def withdraw_start(self, key: bytes) -> None:
        self.withdrawn.append(key)


class Sink:
    def pdu_received(self, pdu: P.Pdu) -> None:
        pass

    def transport_lost(self, exc: Exception | None) -> None:
        pass


async def connect_to_listener(
    starter: Starter, rates: dict[str, int], local: str | None
) -> tuple[TcpTransport, int]:
    def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # the test looks at the initiator's socket only

    server = await asyncio.start_server(accepted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        transport = await jump_connector(starter, rates)("127.0.0.1", port, local, Sink())
    finally:
        server.close()
        await server.wait_closed()
    assert isinstance(transport, TcpTransport)
    return transport, port


def test_a_connection_from_an_address_with_a_rate_is_announced_and_paced() -> None:
    async def main() -> None:
        starter = Starter()
        transport, port = await connect_to_listener(starter, {"127.0.0.1": 7_000_000}, "127.0.0.1")
        sock = transport.socket()
        assert sock is not None
        local_port = sock.getsockname()[1]
        assert starter.started == [(local_port, ("127.0.0.1", port), 7_000_000)]
        assert starter.withdrawn == [local_port.to_bytes(2, "big")]  # never left behind
        assert pacing_rate(sock) == 7_000_000
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        transport.close()

    asyncio.run(main())


def test_connections_without_a_rate_for_their_address_are_made_as_usual() -> None:
    async def main() -> None:
        starter = Starter()
        for rates, local in (({"10.9.9.9": 1000}, "127.0.0.1"), ({"127.0.0.1": 1000}, None)):
            transport, _ = await connect_to_listener(starter, rates, local)
            sock = transport.socket()
            assert sock is not None and pacing_rate(sock) == NO_PACING
            transport.close()
        assert starter.started == []
        transport, _ = await connect_to_listener(starter, {ANY_LOCAL: 1000}, None)
        assert len(starter.started) == 1  # the rate of connections without an address
        transport.close()

    asyncio.run(main())


def test_a_refused_announcement_or_connection_leaves_no_socket_open() -> None:
    async def main() -> None:
        with pytest.raises(OSError, match="map full"):
            await connect_to_listener(Starter(OSError(28, "map full")), {ANY_LOCAL: 1000}, None)
        starter = Starter()
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            port = unused.getsockname()[1]  # nothing listens there
        with pytest.raises(OSError):
            await jump_connector(starter, {ANY_LOCAL: 1000})("127.0.0.1", port, None, Sink())
        assert len(starter.started) == 1 and len(starter.withdrawn) == 1

    asyncio.run(main())
