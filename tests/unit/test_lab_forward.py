"""The lab's TCP forwarder, on loopback: a real echo server on an ephemeral port of
127.0.0.1 as the target, plain sockets instead of sockets inside a namespace."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from reservoir.lab.forward import (
    Forwarder,
    ForwardError,
    ForwardThread,
    listen_socket,
    parse_addr,
    plain_socket,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
LOCAL = "127.0.0.1"


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:  # closed also when asyncio.run cancels the handler at the end of a test
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def count_then_reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads to end-of-file, then answers with the byte count and closes."""
    try:
        data = await reader.read()
        writer.write(f"got {len(data)}".encode())
        await writer.drain()
    finally:
        writer.close()


@asynccontextmanager
async def forwarding(handler: Handler) -> AsyncIterator[Forwarder]:
    """A target server running ``handler`` and a forwarder to it, both on 127.0.0.1."""
    server = await asyncio.start_server(handler, LOCAL, 0)
    target = server.sockets[0].getsockname()[:2]
    forwarder = Forwarder(listen_socket(LOCAL, 0), target, plain_socket)
    await forwarder.start()
    try:
        yield forwarder
    finally:
        await forwarder.close()
        server.close()
        await server.wait_closed()


async def client(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(LOCAL, port)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        port: int = s.getsockname()[1]
    return port


def test_forwards_bytes_both_ways() -> None:
    payload = os.urandom(3 * 1024 * 1024)  # more than any buffer on the way

    async def run() -> bytes:
        async with forwarding(echo) as fwd:
            reader, writer = await client(fwd.port)
            writer.write(payload)
            received = await reader.readexactly(len(payload))
            writer.close()
            await writer.wait_closed()
            return received

    assert asyncio.run(run()) == payload


def test_half_close_reaches_the_target_and_its_answer_comes_back() -> None:
    async def run() -> tuple[bytes, bytes]:
        async with forwarding(count_then_reply) as fwd:
            reader, writer = await client(fwd.port)
            writer.write(b"x" * 100_000)
            writer.write_eof()
            answer = await asyncio.wait_for(reader.read(), 10)
            after = await reader.read()
            writer.close()
            await writer.wait_closed()
            return answer, after

    answer, after = asyncio.run(run())
    assert answer == b"got 100000"
    assert after == b""


def test_target_refusing_closes_the_client_cleanly() -> None:
    async def run() -> tuple[bytes, int]:
        forwarder = Forwarder(listen_socket(LOCAL, 0), (LOCAL, unused_port()), plain_socket)
        await forwarder.start()
        try:
            reader, writer = await client(forwarder.port)
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            await writer.wait_closed()
            return data, forwarder.refused
        finally:
            await forwarder.close()

    assert asyncio.run(run()) == (b"", 1)


def test_close_ends_open_connections_without_errors() -> None:
    errors: list[dict[str, object]] = []

    async def run() -> bytes:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        async with forwarding(echo) as fwd:
            reader, writer = await client(fwd.port)
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            await fwd.close()
            try:
                data = await asyncio.wait_for(reader.read(), 10)
            except ConnectionResetError:
                data = b""
            writer.close()
            return data

    assert asyncio.run(run()) == b""
    assert errors == []


def test_listen_port_taken_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind((LOCAL, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ForwardError, match=f"{LOCAL}:{port} is already in use"):
            listen_socket(LOCAL, port)


def test_listen_refuses_addresses_other_than_loopback() -> None:
    with pytest.raises(ForwardError, match="loopback addresses only"):
        listen_socket("0.0.0.0", 0)


def test_thread_forwards_for_blocking_callers() -> None:
    with socket.create_server((LOCAL, 0)) as target:
        addr = target.getsockname()[:2]
        fwd = ForwardThread(listen_socket(LOCAL, 0), addr, plain_socket)
        with fwd, socket.create_connection((LOCAL, fwd.forwarder.port), timeout=10) as c:
            far, _ = target.accept()
            with far:
                c.sendall(b"hello")
                assert far.recv(5) == b"hello"
                far.sendall(b"world")
                assert c.recv(5) == b"world"


def test_parse_addr() -> None:
    assert parse_addr("127.0.0.1:8470") == ("127.0.0.1", 8470)
    assert parse_addr("[::1]:80") == ("::1", 80)
    with pytest.raises(ValueError):
        parse_addr("localhost")
