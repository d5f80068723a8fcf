"""Cwnd caps: the pacing-rate formula, the BPF map key layout, the map through bpf(2)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from collections.abc import Iterator

import pytest

from reservoir.agent.telemetry import sample
from reservoir.pacing import MECHANISM_BPF, MECHANISM_PACING, CapError, CwndCaps, _stale
from reservoir.pacing._bpf import (
    CGROUP_PREFIX,
    ClampProgram,
    _mounts,
    key_of,
    map_delete,
    map_lookup,
    map_update,
    pack_key,
)
from reservoir.pacing._build import build
from reservoir.pacing._socket import UNLIMITED, pacing_rate


def pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on loopback (client, server side)."""
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen()
        client = socket.create_connection(ls.getsockname())
        server, _ = ls.accept()
    return client, server


# ------------------------------------------------------------ formula


def test_pacing_rate_is_cap_times_mss_over_srtt() -> None:
    assert pacing_rate(20, 1448, 10_000) == 2_896_000  # 20 x 1448 B per 10 ms


def test_pacing_rate_rounds_up() -> None:
    assert pacing_rate(1, 1, 3) == 333_334


@pytest.mark.parametrize("args", [(0, 1448, 100), (20, 0, 100), (20, 1448, 0)])
def test_pacing_rate_refuses_non_positive_inputs(args: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        pacing_rate(*args)


# ------------------------------------------------------------ keys


def test_key_packs_ipv4_ports_host_order_addresses_network_order() -> None:
    key = pack_key(socket.AF_INET, "10.0.0.1", 40000, "192.168.1.2", 3260)
    expected = (
        bytes([2, 0, 0, 0])  # family AF_INET, u32 little endian
        + bytes([0x40, 0x9C, 0, 0])  # 40000 = 0x9c40
        + bytes([0xBC, 0x0C, 0, 0])  # 3260 = 0x0cbc
        + bytes([10, 0, 0, 1]) + bytes(12)
        + bytes([192, 168, 1, 2]) + bytes(12)
    )  # fmt: skip
    assert key == expected
    assert len(key) == 44


def test_key_packs_ipv6_and_drops_the_scope() -> None:
    key = pack_key(socket.AF_INET6, "fe80::1%eth0", 1, "2001:db8::2", 65535)
    expected = (
        bytes([10, 0, 0, 0])
        + bytes([1, 0, 0, 0])
        + bytes([0xFF, 0xFF, 0, 0])
        + bytes([0xFE, 0x80]) + bytes(13) + bytes([1])
        + bytes([0x20, 0x01, 0x0D, 0xB8]) + bytes(11) + bytes([2])
    )  # fmt: skip
    assert key == expected


def test_key_refuses_other_families() -> None:
    with pytest.raises(ValueError):
        pack_key(socket.AF_UNIX, "a", 1, "b", 2)


def test_key_of_connected_socket_is_its_own_tuple() -> None:
    client, server = pair()
    with client, server:
        port, peer = client.getsockname()[1], client.getpeername()[1]
        assert key_of(client) == pack_key(socket.AF_INET, "127.0.0.1", port, "127.0.0.1", peer)


# ------------------------------------------------------------ fallback


def test_fallback_paces_socket_at_cap_times_mss_over_srtt() -> None:
    client, server = pair()
    with client, server, CwndCaps.open(use_bpf=False) as caps:
        assert caps.mechanism == MECHANISM_PACING
        assert caps.why_not_bpf is not None
        info = sample(client)  # idle: srtt and MSS do not move between the two samples
        caps.set(client, 20)
        assert info.snd_mss is not None and info.rtt is not None
        assert sample(client).max_pacing_rate == pacing_rate(20, info.snd_mss, info.rtt)
        caps.clear(client)
        assert sample(client).max_pacing_rate == UNLIMITED


def test_set_refuses_a_cap_below_one_segment() -> None:
    client, server = pair()
    with client, server, CwndCaps.open(use_bpf=False) as caps, pytest.raises(ValueError):
        caps.set(client, 0)


def test_closed_caps_refuse_to_set() -> None:
    client, server = pair()
    caps = CwndCaps.open(use_bpf=False)
    caps.close()
    with client, server, pytest.raises(CapError):
        caps.set(client, 10)


# ------------------------------------------------------------ real map


@pytest.fixture(scope="module")
def program() -> Iterator[ClampProgram]:
    try:
        prog = ClampProgram.open(build())
    except Exception as e:
        pytest.skip(f"BPF sock_ops program cannot be loaded here: {e}")
    cgroup, pins = prog.cgroup, prog.pin_dir
    try:
        yield prog
    finally:
        prog.close()
    assert not cgroup.exists()
    assert not (pins / "prog").exists()


def test_map_update_lookup_delete_through_ctypes(program: ClampProgram) -> None:
    key = pack_key(socket.AF_INET6, "2001:db8::1", 1234, "2001:db8::2", 3260)
    map_update(program.caps_fd, key, struct.pack("=I", 42))
    assert map_lookup(program.caps_fd, key, 4) == struct.pack("=I", 42)
    assert map_delete(program.caps_fd, key)
    assert map_lookup(program.caps_fd, key, 4) is None
    assert not map_delete(program.caps_fd, key)


def test_program_covers_sockets_created_after_open_only(program: ClampProgram) -> None:
    client, server = pair()
    with client, server:
        assert program.covers(client)
        assert program.applied(client) == 0


def applied_after_traffic(
    program: ClampProgram, client: socket.socket, server: socket.socket, want: int
) -> int | None:
    """Exchange data (so ACKs run the RTT callback) until ``want`` is applied, or 1 s."""
    deadline = time.monotonic() + 1.0
    while (got := program.applied(client)) != want and time.monotonic() < deadline:
        client.sendall(b"x" * 10_000)
        server.recv(1 << 20)
        time.sleep(0.001)
    return got


def test_bpf_cap_is_applied_on_the_next_acks(program: ClampProgram) -> None:
    client, server = pair()
    with client, server:
        program.set(client, 7)
        assert applied_after_traffic(program, client, server, 7) == 7
        program.clear(client)
        assert applied_after_traffic(program, client, server, 0) == 0


def test_cwnd_caps_refuses_a_socket_the_program_does_not_see() -> None:
    client, server = pair()  # created before the program is attached
    with client, server, CwndCaps.open() as caps:
        if caps.mechanism != MECHANISM_BPF:
            pytest.skip(f"BPF not available: {caps.why_not_bpf}")
        with pytest.raises(CapError):
            caps.set(client, 10)


def test_leftovers_of_a_killed_owner_are_removed_and_a_live_ones_kept() -> None:
    roots = [point for _, point, fstype in _mounts() if fstype == "cgroup2"]
    if os.geteuid() != 0 or not roots:
        pytest.skip("needs root and a cgroup v2 mount")
    gone = subprocess.Popen(["true"])
    gone.wait()  # its PID no longer runs
    dead = roots[0] / f"{CGROUP_PREFIX}{gone.pid}-abc123"
    alive = roots[0] / f"{CGROUP_PREFIX}{os.getpid()}-def456"
    try:
        dead.mkdir()
        alive.mkdir()
        removed = _stale.cleanup_stale()
        assert str(dead) in removed and not dead.exists()
        assert alive.exists() and str(alive) not in removed
    finally:
        for path in (dead, alive):
            if path.exists():
                path.rmdir()


# ------------------------------------------------------------ jump start


def announced_pair(
    program: ClampProgram, rate: int | None, withdraw: bool = False
) -> tuple[socket.socket, socket.socket]:
    """A loopback pair whose client was bound, announced at ``rate`` (unless None),
    then connected."""
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen()
        client = socket.socket()
        client.bind(("127.0.0.1", 0))
        if rate is not None:
            key = program.start(client, ls.getsockname(), rate)
            if withdraw:
                program.unstart(key)
        client.connect(ls.getsockname())
        server, _ = ls.accept()
    return client, server


def test_an_announced_connection_starts_with_the_window_of_its_rate(
    program: ClampProgram,
) -> None:
    rate = 10**12  # bytes/s: on loopback's 10-100 us round trips, hundreds of 64 KiB segments
    client, server = announced_pair(program, rate)
    with client, server:
        info = sample(client)
        assert info.rtt is not None and info.snd_mss and info.snd_cwnd is not None
        wanted = min(65535, rate * info.rtt // 1_000_000 // info.snd_mss)
        assert wanted > 10
        assert info.snd_cwnd == wanted
        assert program.jumped(client) == wanted


def test_a_connection_not_announced_or_withdrawn_starts_at_the_kernels_window(
    program: ClampProgram,
) -> None:
    for withdraw in (False, True):
        client, server = announced_pair(program, None if not withdraw else 10**12, withdraw)
        with client, server:
            assert sample(client).snd_cwnd == 10
            assert program.jumped(client) == 0


def test_an_announcement_is_consumed_by_its_connection(program: ClampProgram) -> None:
    client, server = announced_pair(program, 10**12)
    with client, server:
        port = client.getsockname()[1]
        key = pack_key(socket.AF_INET, "0.0.0.0", port, *server.getsockname())
        assert map_lookup(program.starts_fd, key, 8) is None


def test_a_port_with_an_open_window_offers_it_from_the_first_segment(
    program: ClampProgram,
) -> None:
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen()
        port = ls.getsockname()[1]
        program.open_window(port, 100)  # segments: 6.5 MB of loopback's
        try:
            opened = socket.create_connection(ls.getsockname())
            opened_server, _ = ls.accept()
        finally:
            program.open_window(port, 0)
        plain = socket.create_connection(ls.getsockname())
        plain_server, _ = ls.accept()
    with opened, opened_server, plain, plain_server:
        for server, client in ((opened_server, opened), (plain_server, plain)):
            server.sendall(b"w")  # a segment after the SYN-ACK: the window, scaled
            client.recv(1)
        offered, kernels = sample(opened).snd_wnd, sample(plain).snd_wnd
        mss = sample(opened_server).advmss
        assert offered is not None and kernels is not None and mss
        assert kernels < 1 << 20  # the kernel's first window: about 64 KiB
        assert offered >= 100 * mss * 0.9
