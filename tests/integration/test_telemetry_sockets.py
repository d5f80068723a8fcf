"""TCP_INFO sampling on a real loopback TCP connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reservoir.agent.telemetry import JsonLinesWriter, StreamSampler, TcpInfo, sample
from reservoir.agent.telemetry.mptcp_info import IPPROTO_MPTCP, is_mptcp, subflow_infos
from reservoir.agent.telemetry.sampler import snapshot

pytestmark = pytest.mark.integration

MIB = 1 << 20


def _drain(conn: socket.socket) -> None:
    with conn:
        while conn.recv(1 << 16):
            pass


@pytest.fixture
def tcp_pair() -> Iterator[socket.socket]:
    """A connected loopback client socket whose peer reads everything in a thread."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
    reader = threading.Thread(target=_drain, args=(conn,), daemon=True)
    reader.start()
    try:
        yield client
    finally:
        client.close()
        reader.join(timeout=5)


def test_bytes_acked_grows_after_sending_one_mib(tcp_pair: socket.socket) -> None:
    before = sample(tcp_pair)
    tcp_pair.sendall(b"\0" * MIB)
    tcp_pair.shutdown(socket.SHUT_WR)  # FIN is acked only after all data: wait for it
    tcp_pair.recv(1)  # peer closes after draining; returns b"" at EOF
    after = sample(tcp_pair)
    assert before.bytes_acked is not None and after.bytes_acked is not None
    assert after.bytes_acked - before.bytes_acked >= MIB
    assert after.rtt is not None and after.rtt > 0
    assert after.snd_cwnd is not None and after.snd_cwnd > 0


def test_live_socket_exposes_modern_fields(tcp_pair: socket.socket) -> None:
    info = sample(tcp_pair)
    assert info.length >= 248
    assert info.state == 1  # TCP_ESTABLISHED
    assert info.snd_mss is not None and info.snd_mss > 0
    assert info.snd_wnd is not None


def test_closed_socket_raises_oserror() -> None:
    sock = socket.socket()
    sock.close()
    with pytest.raises(OSError):
        sample(sock)


async def _sample_while_sending(sock: socket.socket, out: Path) -> None:
    sampler = StreamSampler(0.05)
    sampler.register("s0", "lo", lambda: sock)
    with JsonLinesWriter(out) as writer:
        sampler.start(writer.write)
        for _ in range(6):
            await asyncio.to_thread(sock.sendall, b"\0" * MIB)
            await asyncio.sleep(0.05)
        await sampler.stop()


def test_sampler_reports_real_stream_throughput(tcp_pair: socket.socket, tmp_path: Path) -> None:
    out = tmp_path / "telemetry.jsonl"
    asyncio.run(_sample_while_sending(tcp_pair, out))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) >= 2
    assert sum(r["bytes"] for r in records) > MIB
    assert all(r["snd_cwnd"] > 0 and r["rtt"] > 0 for r in records)
    assert max(r["bits_per_second"] for r in records) > 0


def test_a_stream_whose_peer_stops_reading_is_receive_window_limited() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        with socket.create_connection(server.getsockname()) as client:
            conn, _ = server.accept()
            with conn:  # never read: the peer's window closes
                client.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    while True:
                        client.send(b"\0" * (1 << 16))
                sampler = StreamSampler(0.05)
                sampler.register("s0", "lo", lambda: client)
                sampler.sample_once()
                time.sleep(0.3)
                (record,) = sampler.sample_once()
    interval_us, rwnd = float(record["seconds"] or 0) * 1e6, record["rwnd_limited_us"]
    assert isinstance(rwnd, int) and rwnd >= 0.9 * interval_us
    busy = record["busy_us"]
    assert isinstance(busy, int) and busy >= rwnd  # busy time counts the stalls too
    notsent = record["notsent_bytes"]
    assert isinstance(notsent, int) and notsent > 0
    assert record["in_flight_bytes"] == 0  # nothing can be sent into a closed window


@pytest.fixture
def mptcp_pair() -> socket.socket:
    """A connected loopback MPTCP client (one subflow) whose peer reads everything."""
    try:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    except OSError as exc:
        pytest.skip(f"this kernel has no MPTCP sockets: {exc}")
    with server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
        client.connect(server.getsockname())
        conn, _ = server.accept()

    def drain() -> None:
        with conn:
            while conn.recv(1 << 16):
                pass

    threading.Thread(target=drain, daemon=True).start()
    return client


def acked(info: TcpInfo) -> int:
    assert info.bytes_acked is not None, "this kernel does not count bytes_acked"
    return info.bytes_acked


def acknowledged(sock: socket.socket, sent: int) -> None:
    """Waits (10 s at most) until the peer acknowledged the ``sent`` bytes (once: an MPTCP
    subflow may carry some again). ``sendall`` returns once they are queued, most of them
    not yet acknowledged."""
    deadline = time.monotonic() + 10
    while (count := acked(sample(sock))) <= sent:  # the SYN counts 1
        assert time.monotonic() < deadline, f"{count - 1} of {sent} bytes acknowledged"
        time.sleep(0.001)


def read_between(count: Callable[[], TcpInfo], read: Callable[[], TcpInfo]) -> None:
    """``read()``'s ``bytes_acked`` lies between ``count()``'s read just before and just
    after it: a count that only grows, while acknowledgements may still arrive (an MPTCP
    subflow carries again what the connection's retransmission timer sends). The bound
    is what was acknowledged between the two reads of ``count``, microseconds apart once
    everything sent was acknowledged: another socket's count, or one subflow counted
    twice, is outside it."""
    before = acked(count())
    got = acked(read())
    after = acked(count())
    assert before <= got <= after


def test_a_real_mptcp_connection_lists_its_subflow(mptcp_pair: socket.socket) -> None:
    with mptcp_pair as client:
        client.sendall(b"\0" * (4 << 20))
        acknowledged(client, 4 << 20)
        (only,) = subflow_infos(client)
        assert acked(only) > 4 << 20
        read_between(lambda: sample(client), lambda: snapshot(client))  # one subflow
    with pytest.raises(OSError):
        subflow_infos(client)  # closed


def test_an_mptcp_socket_is_known_by_the_kernels_word_not_the_objects(
    mptcp_pair: socket.socket,
) -> None:
    with mptcp_pair as client:
        # as the initiator's transport makes it: a duplicate descriptor, protocol 0
        dup = socket.socket(client.family, client.type, 0, fileno=os.dup(client.fileno()))
        with dup:
            assert dup.proto == 0 and is_mptcp(dup)
            client.sendall(b"\0" * (1 << 20))
            acknowledged(client, 1 << 20)
            read_between(lambda: subflow_infos(client)[0], lambda: snapshot(dup))
