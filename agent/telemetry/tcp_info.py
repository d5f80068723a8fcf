"""Parser for the kernel's ``struct tcp_info`` (``getsockopt(IPPROTO_TCP, TCP_INFO)``).

The layout is the one of ``include/uapi/linux/tcp.h`` (torvalds/linux), which only ever
grows at the end: a kernel copies ``min(len, sizeof(struct tcp_info))`` bytes, so an older
kernel returns a shorter buffer and a newer one a longer buffer. :func:`parse_tcp_info`
therefore reads every field whose bytes are present and leaves the others ``None``; bytes
past the last field known here are ignored. Byte offsets (x86_64, native byte order)::

      0 u8  state, ca_state, retransmits, probes, backoff, options
      6 u8  snd_wscale:4, rcv_wscale:4        7 u8 delivery_rate_app_limited:1, ...
      8 u32 rto, ato, snd_mss, rcv_mss         24 u32 unacked, sacked, lost, retrans, fackets
     44 u32 last_data_sent, last_ack_sent, last_data_recv, last_ack_recv
     60 u32 pmtu, rcv_ssthresh, rtt, rttvar, snd_ssthresh, snd_cwnd, advmss, reordering
     92 u32 rcv_rtt, rcv_space, total_retrans
    104 u64 pacing_rate, max_pacing_rate, bytes_acked, bytes_received   (Linux 4.1-4.2)
    136 u32 segs_out, segs_in, notsent_bytes, min_rtt, data_segs_in, data_segs_out
    160 u64 delivery_rate (4.9), busy_time, rwnd_limited, sndbuf_limited (4.10)
    192 u32 delivered, delivered_ce            200 u64 bytes_sent, bytes_retrans (4.19)
    216 u32 dsack_dups, reord_seen, rcv_ooopack, snd_wnd, rcv_wnd (5.4-6.2), rehash (6.3)
    240 u16 total_rto, total_rto_recoveries    244 u32 total_rto_time (6.7; size 248)

Units are the kernel's: times in microseconds (``rto``, ``rtt``, ``rttvar``, ``min_rtt``,
``busy_time``...) except ``last_*`` (milliseconds); ``snd_cwnd`` and ``snd_ssthresh`` in
segments; ``pacing_rate``, ``max_pacing_rate`` and ``delivery_rate`` in bytes per second.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, fields

__all__ = [
    "TCP_INFO_MAX_LEN",
    "TcpInfo",
    "known_field_names",
    "parse_tcp_info",
    "rtt_us",
    "sample",
]

#: Buffer length asked of getsockopt: larger than any ``struct tcp_info`` so far (280 in 6.18).
TCP_INFO_MAX_LEN = 512

# (name, struct format, byte offset) for every scalar field, in header order.
_FIELDS: tuple[tuple[str, str, int], ...] = (
    ("state", "B", 0),
    ("ca_state", "B", 1),
    ("retransmits", "B", 2),
    ("probes", "B", 3),
    ("backoff", "B", 4),
    ("options", "B", 5),
    ("rto", "I", 8),
    ("ato", "I", 12),
    ("snd_mss", "I", 16),
    ("rcv_mss", "I", 20),
    ("unacked", "I", 24),
    ("sacked", "I", 28),
    ("lost", "I", 32),
    ("retrans", "I", 36),
    ("fackets", "I", 40),
    ("last_data_sent", "I", 44),
    ("last_ack_sent", "I", 48),
    ("last_data_recv", "I", 52),
    ("last_ack_recv", "I", 56),
    ("pmtu", "I", 60),
    ("rcv_ssthresh", "I", 64),
    ("rtt", "I", 68),
    ("rttvar", "I", 72),
    ("snd_ssthresh", "I", 76),
    ("snd_cwnd", "I", 80),
    ("advmss", "I", 84),
    ("reordering", "I", 88),
    ("rcv_rtt", "I", 92),
    ("rcv_space", "I", 96),
    ("total_retrans", "I", 100),
    ("pacing_rate", "Q", 104),
    ("max_pacing_rate", "Q", 112),
    ("bytes_acked", "Q", 120),
    ("bytes_received", "Q", 128),
    ("segs_out", "I", 136),
    ("segs_in", "I", 140),
    ("notsent_bytes", "I", 144),
    ("min_rtt", "I", 148),
    ("data_segs_in", "I", 152),
    ("data_segs_out", "I", 156),
    ("delivery_rate", "Q", 160),
    ("busy_time", "Q", 168),
    ("rwnd_limited", "Q", 176),
    ("sndbuf_limited", "Q", 184),
    ("delivered", "I", 192),
    ("delivered_ce", "I", 196),
    ("bytes_sent", "Q", 200),
    ("bytes_retrans", "Q", 208),
    ("dsack_dups", "I", 216),
    ("reord_seen", "I", 220),
    ("rcv_ooopack", "I", 224),
    ("snd_wnd", "I", 228),
    ("rcv_wnd", "I", 232),
    ("rehash", "I", 236),
    ("total_rto", "H", 240),
    ("total_rto_recoveries", "H", 242),
    ("total_rto_time", "I", 244),
)

_WSCALE_OFFSET = 6  # u8 tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4 (low nibble first on x86)


@dataclass(frozen=True, slots=True)
class TcpInfo:
    """One ``struct tcp_info`` snapshot; a field is ``None`` when the buffer was too short."""

    length: int
    state: int | None = None
    ca_state: int | None = None
    retransmits: int | None = None
    probes: int | None = None
    backoff: int | None = None
    options: int | None = None
    snd_wscale: int | None = None
    rcv_wscale: int | None = None
    rto: int | None = None
    ato: int | None = None
    snd_mss: int | None = None
    rcv_mss: int | None = None
    unacked: int | None = None
    sacked: int | None = None
    lost: int | None = None
    retrans: int | None = None
    fackets: int | None = None
    last_data_sent: int | None = None
    last_ack_sent: int | None = None
    last_data_recv: int | None = None
    last_ack_recv: int | None = None
    pmtu: int | None = None
    rcv_ssthresh: int | None = None
    rtt: int | None = None
    rttvar: int | None = None
    snd_ssthresh: int | None = None
    snd_cwnd: int | None = None
    advmss: int | None = None
    reordering: int | None = None
    rcv_rtt: int | None = None
    rcv_space: int | None = None
    total_retrans: int | None = None
    pacing_rate: int | None = None
    max_pacing_rate: int | None = None
    bytes_acked: int | None = None
    bytes_received: int | None = None
    segs_out: int | None = None
    segs_in: int | None = None
    notsent_bytes: int | None = None
    min_rtt: int | None = None
    data_segs_in: int | None = None
    data_segs_out: int | None = None
    delivery_rate: int | None = None
    busy_time: int | None = None
    rwnd_limited: int | None = None
    sndbuf_limited: int | None = None
    delivered: int | None = None
    delivered_ce: int | None = None
    bytes_sent: int | None = None
    bytes_retrans: int | None = None
    dsack_dups: int | None = None
    reord_seen: int | None = None
    rcv_ooopack: int | None = None
    snd_wnd: int | None = None
    rcv_wnd: int | None = None
    rehash: int | None = None
    total_rto: int | None = None
    total_rto_recoveries: int | None = None
    total_rto_time: int | None = None

    @property
    def snd_cwnd_bytes(self) -> int | None:
        """Congestion window in bytes (``snd_cwnd`` segments x ``snd_mss``), as iperf3 reports."""
        if self.snd_cwnd is None or self.snd_mss is None:
            return None
        return self.snd_cwnd * self.snd_mss

    @property
    def in_flight_bytes(self) -> int | None:
        """Bytes sent and neither acknowledged nor marked lost: the kernel's
        ``tcp_packets_in_flight`` (unacked - sacked - lost + retrans) x ``snd_mss``."""
        unacked, sacked, lost, retrans = self.unacked, self.sacked, self.lost, self.retrans
        if unacked is None or sacked is None or lost is None or retrans is None:
            return None
        if self.snd_mss is None:
            return None
        return max(unacked - sacked - lost + retrans, 0) * self.snd_mss


_UNPACKERS = tuple(
    (name, struct.Struct("=" + fmt), offset, offset + struct.calcsize("=" + fmt))
    for name, fmt, offset in _FIELDS
)
_RTT = struct.Struct("=I")
_RTT_OFFSET = 68


def _field_values(raw: bytes) -> dict[str, int]:
    values: dict[str, int] = {}
    for name, unpacker, offset, end in _UNPACKERS:
        if end > len(raw):
            break  # fields are in offset order: nothing later can be present
        (values[name],) = unpacker.unpack_from(raw, offset)
    if len(raw) > _WSCALE_OFFSET:
        values["snd_wscale"] = raw[_WSCALE_OFFSET] & 0x0F
        values["rcv_wscale"] = raw[_WSCALE_OFFSET] >> 4
    return values


def parse_tcp_info(raw: bytes) -> TcpInfo:
    """Parse the bytes ``getsockopt(IPPROTO_TCP, TCP_INFO, n)`` returned (any length)."""
    return TcpInfo(length=len(raw), **_field_values(bytes(raw)))


def sample(sock: socket.socket) -> TcpInfo:
    """Read and parse TCP_INFO of a TCP socket; raises :class:`OSError` if it is closed."""
    return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_MAX_LEN))


def rtt_us(sock: socket.socket) -> int:
    """The socket's smoothed RTT (microseconds) alone: what a path monitor reads at
    10 Hz per stream, without parsing the rest; raises :class:`OSError` if closed."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _RTT_OFFSET + _RTT.size)
    return _RTT.unpack_from(raw, _RTT_OFFSET)[0] if len(raw) >= _RTT_OFFSET + 4 else 0


def known_field_names() -> tuple[str, ...]:
    """Names of the :class:`TcpInfo` fields read from the buffer (everything but ``length``)."""
    return tuple(f.name for f in fields(TcpInfo) if f.name != "length")
