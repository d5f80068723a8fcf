"""Telemetry of the agent: per-stream TCP_INFO samples as line-delimited JSON records.

``tcp_info`` parses the kernel's ``struct tcp_info``; ``sampler`` polls registered streams
at >= 2 Hz; ``records`` builds iperf3-named records and writes them one JSON object a line.
"""

from .records import JsonLinesWriter, Record, make_record
from .sampler import DEFAULT_INTERVAL, Sink, Source, StreamSampler
from .tcp_info import TCP_INFO_MAX_LEN, TcpInfo, known_field_names, parse_tcp_info, sample

__all__ = [
    "DEFAULT_INTERVAL",
    "TCP_INFO_MAX_LEN",
    "JsonLinesWriter",
    "Record",
    "Sink",
    "Source",
    "StreamSampler",
    "TcpInfo",
    "known_field_names",
    "make_record",
    "parse_tcp_info",
    "sample",
]
