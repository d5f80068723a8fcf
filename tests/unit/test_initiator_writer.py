"""SocketWriter: buffers and file spans in order on a real non-blocking socket."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.agent.initiator._writer import SocketWriter
from reservoir.agent.iscsi.pdu import FileSpan, Segment, SpanError

CONTENT = bytes(range(256)) * 4096  # 1 MiB, every offset distinguishable


class OpenFile:
    """A SpanSource: an open descriptor, -1 once closed."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        os.close(self.fd)
        self.fd = -1


@pytest.fixture
def source(tmp_path: Path) -> Iterator[OpenFile]:
    path = tmp_path / "source.img"
    path.write_bytes(CONTENT)
    opened = OpenFile(path)
    yield opened
    if opened.fd >= 0:
        opened.close()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on loopback with small buffers (partial sends happen)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        near = socket.create_connection(server.getsockname())
        far, _ = server.accept()
    near.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    near.setblocking(False)
    far.setblocking(False)
    yield near, far
    near.close()
    far.close()


async def drain(sock: socket.socket, want: int, pace: float = 0.0) -> bytes:
    """Reads ``want`` bytes from ``sock`` (sleeping ``pace`` s between reads)."""
    loop = asyncio.get_running_loop()
    got = bytearray()
    while len(got) < want:
        chunk = await loop.sock_recv(sock, 65536)
        if not chunk:
            break
        got += chunk
        if pace:
            await asyncio.sleep(pace)
    return bytes(got)


def test_buffers_and_spans_arrive_in_order_through_partial_sends(
    pair: tuple[socket.socket, socket.socket], source: OpenFile
) -> None:
    near, far = pair
    failures: list[OSError] = []
    parts: list[Segment] = [b"head-1", FileSpan(source, 1000, 300_000), b"head-2"]
    parts += [memoryview(b"xyz")]
    parts += [FileSpan(source, 0, 5), FileSpan(source, 500_000, 400_000), b"end"]
    expected = b"".join(
        CONTENT[p.offset : p.offset + p.length] if isinstance(p, FileSpan) else bytes(p)
        for p in parts
    )

    async def run() -> bytes:
        writer = SocketWriter(near, failures.append)
        writer.write(parts)
        assert writer.pending > 0  # the socket could not take 700 kB at once
        return await drain(far, len(expected), pace=0.001)

    assert asyncio.run(run()) == expected
    assert failures == []


def test_a_peer_that_stops_reading_holds_the_rest_until_it_reads_again(
    pair: tuple[socket.socket, socket.socket], source: OpenFile
) -> None:
    near, far = pair
    failures: list[OSError] = []
    drained: list[bool] = []

    async def run() -> tuple[int, int, bytes]:
        writer = SocketWriter(near, failures.append)
        writer.drained = lambda: drained.append(True)
        writer.write([b"H" * 48, FileSpan(source, 0, len(CONTENT))])
        await asyncio.sleep(0.1)  # nobody reads: the socket stays full
        stalled = writer.pending
        await asyncio.sleep(0.1)
        still = writer.pending
        data = await drain(far, 48 + len(CONTENT))
        await asyncio.sleep(0)
        return stalled, still, data

    stalled, still, data = asyncio.run(run())
    assert 0 < stalled < len(CONTENT) and still == stalled
    assert data == b"H" * 48 + CONTENT
    assert drained == [True] and failures == []


def test_a_span_of_a_closed_file_fails_the_connection_and_sends_none_of_it(
    pair: tuple[socket.socket, socket.socket], source: OpenFile
) -> None:
    near, far = pair
    failures: list[OSError] = []
    source.close()

    async def run() -> bytes:
        writer = SocketWriter(near, failures.append)
        writer.write([b"header", FileSpan(source, 0, 4096), b"after"])
        writer.write([b"more"])  # after a failure nothing more is written
        await asyncio.sleep(0.05)
        near.shutdown(socket.SHUT_WR)
        return await drain(far, 1 << 20)

    assert asyncio.run(run()) == b"header"
    assert [f.errno for f in failures] == [errno.EBADF]


def test_a_span_past_the_end_of_its_file_fails_after_the_bytes_that_exist(
    pair: tuple[socket.socket, socket.socket], source: OpenFile
) -> None:
    near, far = pair
    failures: list[OSError] = []

    async def run() -> bytes:
        writer = SocketWriter(near, failures.append)
        writer.write([FileSpan(source, len(CONTENT) - 100, 200), b"next"])
        await asyncio.sleep(0.05)
        near.shutdown(socket.SHUT_WR)
        return await drain(far, 1 << 20)

    assert asyncio.run(run()) == CONTENT[-100:]
    assert len(failures) == 1 and failures[0].errno == errno.EIO
    assert isinstance(failures[0], SpanError) and "the file ends before byte" in str(failures[0])


def test_where_the_kernel_refuses_sendfile_spans_are_read_and_sent(
    pair: tuple[socket.socket, socket.socket],
    source: OpenFile,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    near, far = pair
    failures: list[OSError] = []

    def refused(*args: int) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "sendfile", refused)

    async def run() -> tuple[bytes, bool]:
        writer = SocketWriter(near, failures.append)
        writer.write([b"a", FileSpan(source, 10, 100_000), b"b"])
        return await drain(far, 100_002), writer.sendfile

    data, sendfile = asyncio.run(run())
    assert data == b"a" + CONTENT[10:100_010] + b"b"
    assert sendfile is False and failures == []


def test_close_drops_what_is_queued(
    pair: tuple[socket.socket, socket.socket], source: OpenFile
) -> None:
    near, far = pair
    failures: list[OSError] = []

    async def run() -> tuple[int, int]:
        writer = SocketWriter(near, failures.append)
        writer.write([FileSpan(source, 0, len(CONTENT))])
        await asyncio.sleep(0.05)
        writer.close()
        after = writer.pending
        writer.write([b"ignored"])
        near.shutdown(socket.SHUT_WR)
        return after, len(await drain(far, 2 << 20))

    after, received = asyncio.run(run())
    assert after == 0 and 0 < received < len(CONTENT)
    assert failures == []
