"""TCP_INFO of an MPTCP connection: every subflow's, summed into one snapshot.

``getsockopt(TCP_INFO)`` on an MPTCP socket answers for its first subflow only, so a
connection whose first link is cut reads as stalled while its other subflows carry
everything. ``getsockopt(SOL_MPTCP, MPTCP_TCPINFO)`` (``include/uapi/linux/mptcp.h``,
Linux 5.16) gives one ``struct tcp_info`` per subflow after a ``struct
mptcp_subflow_data`` header the caller fills in: its own size, zeros the kernel
overwrites (``num_subflows``, ``size_kernel``), and the size of one array element it
wants. Python's ``socket.getsockopt`` hands the kernel an uninitialised buffer, so the
call goes through libc with a buffer prepared here.

:func:`combine` makes one :class:`TcpInfo` of the subflows: counters and windows summed
(bytes, segments, retransmissions, cwnd, packets in flight, rates), the kernel's busy
and limited times the largest of the subflows' (the connection is busy while any
subflow is), the RTTs the smallest of those measured, the rest the first subflow's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

from .tcp_info import TCP_INFO_MAX_LEN, TcpInfo, parse_tcp_info

__all__ = ["IPPROTO_MPTCP", "combine", "is_mptcp", "subflow_infos"]

IPPROTO_MPTCP = 262
SOL_MPTCP = 284
MPTCP_TCPINFO = 2
_HEADER = struct.Struct("=IIII")  # size_subflow_data, num_subflows, size_kernel, size_user
MAX_SUBFLOWS = 8  # the kernel's own limit on subflows per connection

_SUMMED = frozenset(
    {
        "unacked",
        "sacked",
        "lost",
        "retrans",
        "snd_cwnd",
        "total_retrans",
        "pacing_rate",
        "bytes_acked",
        "bytes_received",
        "segs_out",
        "segs_in",
        "notsent_bytes",
        "data_segs_in",
        "data_segs_out",
        "delivery_rate",
        "delivered",
        "delivered_ce",
        "bytes_sent",
        "bytes_retrans",
        "total_rto",
        "total_rto_recoveries",
    }
)
_LARGEST = frozenset({"busy_time", "rwnd_limited", "sndbuf_limited"})
_SMALLEST_MEASURED = frozenset({"rtt", "rttvar", "min_rtt"})

_libc: Any = None


def _getsockopt() -> Any:
    global _libc  # noqa: PLW0603 - loaded once, on first use
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return _libc.getsockopt


def is_mptcp(sock: socket.socket) -> bool:
    """Asks the kernel (SO_PROTOCOL): a socket object made from a descriptor of the
    event loop's may carry protocol 0 whatever the socket is."""
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL) == IPPROTO_MPTCP
    except OSError:
        return False


def subflow_infos(sock: socket.socket, max_subflows: int = MAX_SUBFLOWS) -> list[TcpInfo]:
    """Every subflow's TCP_INFO (at most ``max_subflows``); raises :class:`OSError`
    when the kernel refuses (a closed socket, a kernel without MPTCP_TCPINFO)."""
    each = TCP_INFO_MAX_LEN
    buf = ctypes.create_string_buffer(_HEADER.size + each * max_subflows)
    _HEADER.pack_into(buf, 0, _HEADER.size, 0, 0, each)
    length = ctypes.c_uint32(len(buf))
    if _getsockopt()(sock.fileno(), SOL_MPTCP, MPTCP_TCPINFO, buf, ctypes.byref(length)) != 0:
        code = ctypes.get_errno() or errno.EINVAL
        raise OSError(code, f"{os.strerror(code)} (originated from getsockopt MPTCP_TCPINFO)")
    _, count, size_kernel, size_user = _HEADER.unpack_from(buf, 0)
    size = min(size_kernel, size_user)
    raw = buf.raw
    return [
        parse_tcp_info(raw[_HEADER.size + i * size_user : _HEADER.size + i * size_user + size])
        for i in range(min(count, max_subflows))
    ]


def combine(infos: Sequence[TcpInfo]) -> TcpInfo:
    """One snapshot of the connection from its subflows' (see the module)."""
    if not infos:
        return TcpInfo(length=0)
    first = infos[0]
    merged: dict[str, int] = {}
    for f in fields(TcpInfo):
        values = [v for v in (getattr(i, f.name) for i in infos) if v is not None]
        if f.name == "length" or not values:
            continue
        if f.name in _SUMMED:
            merged[f.name] = sum(values)
        elif f.name in _LARGEST:
            merged[f.name] = max(values)
        elif f.name in _SMALLEST_MEASURED:
            measured = [v for v in values if v > 0]
            merged[f.name] = min(measured or values)
    return replace(first, **merged)
