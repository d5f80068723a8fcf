"""The target's receive low-water mark on real TCP sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from reservoir.agent.target.connection import RCVLOWAT_MAX, low_water_mark


@pytest.fixture
def accepted() -> Iterator[socket.socket]:
    """The target's end of a fresh loopback connection."""
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        socket.create_connection(server.getsockname()),
    ):
        conn, _ = server.accept()
        with conn:
            yield conn


@pytest.mark.parametrize("missing", [20 << 10, 300 << 10, 1 << 20])
def test_the_mark_never_grows_the_receive_buffer(accepted: socket.socket, missing: int) -> None:
    # a mark the buffer cannot hold makes Linux grow the buffer and clamp the window
    before = accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    mark = low_water_mark(accepted, missing)
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, mark)
    assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == before
    assert mark == 1 or mark <= before // 4


def test_a_large_buffer_takes_the_whole_mark(accepted: socket.socket) -> None:
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    assert low_water_mark(accepted, 1 << 20) == RCVLOWAT_MAX
    assert low_water_mark(accepted, 100 << 10) == 100 << 10
    assert low_water_mark(accepted, 1000) == 1  # small rests are awaited the usual way
