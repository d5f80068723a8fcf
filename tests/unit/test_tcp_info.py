"""TCP_INFO parser on fake kernel data: byte buffers laid out like include/uapi/linux/tcp.h."""

from __future__ import annotations

import socket
import struct

import pytest

from reservoir.agent.telemetry import TcpInfo, known_field_names, parse_tcp_info, tcp_info


def group(fmt: str, *names: str) -> list[tuple[str, str]]:
    return [(name, fmt) for name in names]


# struct tcp_info of Linux 6.7-6.17 (248 bytes), written out independently of the parser.
LAYOUT: list[tuple[str, str]] = [
    *group("B", "state", "ca_state", "retransmits", "probes", "backoff", "options"),
    *group("B", "wscale", "app_limited"),
    *group("I", "rto", "ato", "snd_mss", "rcv_mss"),
    *group("I", "unacked", "sacked", "lost", "retrans", "fackets"),
    *group("I", "last_data_sent", "last_ack_sent", "last_data_recv", "last_ack_recv"),
    *group("I", "pmtu", "rcv_ssthresh", "rtt", "rttvar", "snd_ssthresh", "snd_cwnd"),
    *group("I", "advmss", "reordering", "rcv_rtt", "rcv_space", "total_retrans"),
    *group("Q", "pacing_rate", "max_pacing_rate", "bytes_acked", "bytes_received"),
    *group("I", "segs_out", "segs_in", "notsent_bytes", "min_rtt"),
    *group("I", "data_segs_in", "data_segs_out"),
    *group("Q", "delivery_rate", "busy_time", "rwnd_limited", "sndbuf_limited"),
    *group("I", "delivered", "delivered_ce"),
    *group("Q", "bytes_sent", "bytes_retrans"),
    *group("I", "dsack_dups", "reord_seen", "rcv_ooopack", "snd_wnd", "rcv_wnd", "rehash"),
    *group("H", "total_rto", "total_rto_recoveries"),
    *group("I", "total_rto_time"),
]
FORMAT = "=" + "".join(fmt for _, fmt in LAYOUT)


def fake_values() -> dict[str, int]:
    """Distinct values per field, large enough to catch width mistakes on the u64 ones."""
    values = {name: (i + 1) << (33 if fmt == "Q" else 0) for i, (name, fmt) in enumerate(LAYOUT)}
    for name, fmt in LAYOUT:
        if fmt in "BH":
            values[name] %= 1 << (8 if fmt == "B" else 16)
    values["wscale"] = 0x7A  # rcv_wscale 7, snd_wscale 10
    return values


def fake_tcp_info(values: dict[str, int]) -> bytes:
    return struct.pack(FORMAT, *(values[name] for name, _ in LAYOUT))


def test_fixture_matches_kernel_size_of_struct_tcp_info() -> None:
    assert struct.calcsize(FORMAT) == 248


def test_parse_full_buffer_reads_every_field() -> None:
    values = fake_values()
    info = parse_tcp_info(fake_tcp_info(values))
    for name, _ in LAYOUT:
        if name not in ("wscale", "app_limited"):
            assert getattr(info, name) == values[name], name
    assert info.length == 248


def test_parse_splits_window_scale_nibbles() -> None:
    info = parse_tcp_info(fake_tcp_info(fake_values()))
    assert (info.snd_wscale, info.rcv_wscale) == (10, 7)


def test_parse_reads_u64_counters_beyond_4_gib() -> None:
    values = fake_values()
    values["bytes_acked"] = 5 << 40
    assert parse_tcp_info(fake_tcp_info(values)).bytes_acked == 5 << 40


def test_parse_older_kernel_buffer_leaves_newer_fields_none() -> None:
    """A 104-byte struct (Linux 3.x: ends at tcpi_total_retrans) has no pacing or bytes."""
    values = fake_values()
    info = parse_tcp_info(fake_tcp_info(values)[:104])
    assert info.total_retrans == values["total_retrans"]
    assert info.rtt == values["rtt"]
    assert info.pacing_rate is None
    assert info.bytes_acked is None
    assert info.snd_wnd is None


def test_parse_truncated_mid_field_drops_that_field() -> None:
    values = fake_values()
    info = parse_tcp_info(fake_tcp_info(values)[:124])  # bytes_acked is 120..127
    assert info.max_pacing_rate == values["max_pacing_rate"]
    assert info.bytes_acked is None
    assert info.bytes_received is None


def test_parse_newer_kernel_buffer_ignores_trailing_fields() -> None:
    values = fake_values()
    raw = fake_tcp_info(values) + bytes(range(32))  # 6.18 adds AccECN counters (280 bytes)
    info = parse_tcp_info(raw)
    assert info.length == 280
    assert info.total_rto_time == values["total_rto_time"]
    assert info.snd_wnd == values["snd_wnd"]


def test_parse_empty_buffer_has_no_fields() -> None:
    info = parse_tcp_info(b"")
    assert info.length == 0
    assert all(getattr(info, name) is None for name in known_field_names())


def test_snd_cwnd_bytes_is_segments_times_mss() -> None:
    values = fake_values()
    values["snd_cwnd"], values["snd_mss"] = 10, 1448
    assert parse_tcp_info(fake_tcp_info(values)).snd_cwnd_bytes == 14480
    assert parse_tcp_info(b"\x01" * 8).snd_cwnd_bytes is None


def test_tcp_info_is_frozen() -> None:
    info = parse_tcp_info(fake_tcp_info(fake_values()))
    with pytest.raises(AttributeError):
        info.rtt = 1  # type: ignore[misc]
    assert isinstance(info, TcpInfo)


def test_the_rtt_alone_is_the_parsed_rtt_of_a_live_socket() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        with client, peer:
            client.sendall(b"x" * 4096)
            peer.recv(4096)
            rtt = tcp_info.rtt_us(client)
            assert rtt > 0 and rtt == tcp_info.sample(client).rtt
