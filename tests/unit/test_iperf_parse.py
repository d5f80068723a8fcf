"""Parsing iperf3 -J output (real outputs of iperf3 3.12 captured on loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reservoir.agent.control.iperf import IperfError, listening, parse_result

FIXTURES = Path(__file__).parent.parent / "fixtures"


def load(name: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads((FIXTURES / name).read_text())
    return doc


def test_parse_gives_the_receivers_aggregate_and_every_streams_intervals() -> None:
    result = parse_result(load("iperf3-client-2streams-loopback.json"))
    assert result.streams == 2
    assert result.bits_per_second == pytest.approx(20_647_708_988.31, rel=1e-3)
    assert result.sent_bits_per_second == pytest.approx(20_648_483_156.63, rel=1e-6)
    assert result.retransmits == 5
    assert sum(r or 0 for r in result.stream_retransmits) == 5
    assert [len(s) for s in result.stream_bits_per_second] == [2, 2]
    assert all(b > 1e9 for s in result.stream_bits_per_second for b in s)
    assert result.cpu_utilization_percent["host_total"] == pytest.approx(98.97, abs=0.01)
    assert result.congestion == "bbr"


def test_parse_of_a_failed_run_raises_iperf3s_error() -> None:
    with pytest.raises(IperfError, match="unable to connect to server: Connection refused"):
        parse_result(load("iperf3-client-refused.json"))


def test_parse_without_an_end_summary_raises() -> None:
    with pytest.raises(IperfError, match="no result"):
        parse_result({"start": {}, "intervals": [], "end": {}})


def test_listening_reads_the_listen_state_of_proc_net_tcp(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "   0: 0100007F:3E81 00000000:0000 0A 00000000:00000000\n"
        "   1: 0100007F:3E82 0100007F:9C40 01 00000000:00000000\n"
    )
    assert listening(0x3E81, (table,))
    assert not listening(0x3E82, (table,))  # established, not listening
    assert not listening(5201, (table, tmp_path / "missing"))
