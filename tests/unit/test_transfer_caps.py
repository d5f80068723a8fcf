"""StreamCaps: wanted caps applied to the streams' current sockets (real TCP sockets on
loopback, a recording capper), again after a reconnect, lifted when no longer wanted."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from reservoir.agent.telemetry import sample
from reservoir.agent.transfer._caps import (
    JUMP_PACED_MIN,
    NO_PACING,
    RATE_BASED,
    StreamCaps,
    pacing_rate,
    set_pacing_rate,
)


class Recording:
    """A capper that records what it was asked; rate-based like the fallback if told so."""

    def __init__(self, mechanism: str = "bpf-sndcwnd-clamp") -> None:
        self.mechanism = mechanism
        self.calls: list[tuple[str, socket.socket, int | None]] = []

    def set(self, sock: socket.socket, segments: int) -> None:
        self.calls.append(("set", sock, segments))
        if self.mechanism == RATE_BASED:
            set_pacing_rate(sock, segments * 1000)

    def clear(self, sock: socket.socket) -> None:
        self.calls.append(("clear", sock, None))

    def refresh(self, sock: socket.socket) -> None:
        self.calls.append(("refresh", sock, None))

    def jumped(self, sock: socket.socket) -> int:
        return 0


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    server = socket.create_server(("127.0.0.1", 0))
    made: list[socket.socket] = []
    for _ in range(2):
        made.append(socket.create_connection(server.getsockname()))
        made.append(server.accept()[0])
    yield [made[0], made[2]]  # two client sockets: a stream before and after a reconnect
    for sock in [*made, server]:
        sock.close()


def test_caps_reach_the_current_socket_and_follow_a_reconnect(
    sockets: list[socket.socket],
) -> None:
    capper = Recording()
    caps = StreamCaps(capper)
    current = [sockets[0]]
    caps.attach(0, lambda: current[0])
    caps.want({0: 40}, {0: 5_000_000})
    caps.tick()
    assert capper.calls == [("set", sockets[0], 40)]
    assert pacing_rate(sockets[0]) == 5_000_000
    current[0] = sockets[1]  # the session reconnected
    caps.tick()
    assert capper.calls[-1] == ("set", sockets[1], 40)
    assert pacing_rate(sockets[1]) == 5_000_000
    assert caps.applied() == {0: (40, 5_000_000)}


def test_caps_no_longer_wanted_are_lifted(sockets: list[socket.socket]) -> None:
    capper = Recording()
    caps = StreamCaps(capper)
    caps.attach(3, lambda: sockets[0])
    caps.want({3: 25}, {3: 1_000_000})
    caps.tick()
    caps.want({}, {})
    caps.tick()
    assert capper.calls[-1] == ("clear", sockets[0], None)
    assert pacing_rate(sockets[0]) == NO_PACING
    assert caps.applied() == {3: (None, None)}


def test_rate_based_cap_and_pacing_rate_keep_the_lower(sockets: list[socket.socket]) -> None:
    capper = Recording(RATE_BASED)
    caps = StreamCaps(capper)
    caps.attach(0, lambda: sockets[0])
    caps.want({0: 40}, {0: 10_000})  # the cap's own rate is 40 000 B/s
    caps.tick()
    assert pacing_rate(sockets[0]) == 10_000
    caps.want({0: 5}, {0: 10_000})  # now the cap's rate (5 000 B/s) is the lower
    caps.tick()
    assert pacing_rate(sockets[0]) == 5_000


def test_a_stream_without_a_socket_is_skipped_until_it_has_one(
    sockets: list[socket.socket],
) -> None:
    capper = Recording()
    caps = StreamCaps(capper)
    current: list[socket.socket | None] = [None]
    caps.attach(1, lambda: current[0])
    caps.want({1: 12}, {})
    caps.tick()
    assert capper.calls == []
    current[0] = sockets[0]
    caps.tick()
    assert capper.calls == [("set", sockets[0], 12)]


def test_cwnd_caps_need_a_mechanism() -> None:
    caps = StreamCaps(None)
    assert caps.mechanism == "none"
    with pytest.raises(ValueError, match="no cwnd cap mechanism"):
        caps.want({0: 10}, {})
    caps.want({}, {0: 1000})  # pacing rates alone need no cap mechanism


class Refusing(Recording):
    """A capper the kernel refuses, as for an MPTCP socket."""

    def set(self, sock: socket.socket, segments: int) -> None:
        raise OSError(95, "Operation not supported")


def test_a_refused_cap_is_reported_and_logged_once(
    sockets: list[socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    caps = StreamCaps(Refusing())
    caps.attach(0, lambda: sockets[0])
    caps.want({0: 40}, {})
    for _ in range(5):
        caps.tick()
    assert caps.errors == {0: "[Errno 95] Operation not supported"}
    warnings = [r for r in caplog.records if "caps not applied" in r.getMessage()]
    assert len(warnings) == 1


def test_lift_leaves_the_sockets_of_an_ended_copy_uncapped(
    sockets: list[socket.socket],
) -> None:
    capper = Recording()
    caps = StreamCaps(capper)
    caps.attach(0, lambda: sockets[0])
    caps.attach(1, lambda: sockets[1])
    caps.want({0: 40}, {1: 5_000_000})
    caps.tick()
    caps.lift()
    assert ("clear", sockets[0], None) in capper.calls
    assert pacing_rate(sockets[1]) == NO_PACING
    assert caps.applied() == {}
    caps.tick()  # the streams are forgotten: nothing is applied again
    assert pacing_rate(sockets[1]) == NO_PACING


def test_a_jump_starts_pace_is_lifted_once_the_stream_has_run(
    sockets: list[socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return now[0]

    monkeypatch.setattr("reservoir.agent.transfer._caps.time", Clock)
    for sock in sockets:
        set_pacing_rate(sock, 7_000_000)  # as the jump connector leaves it
    caps = StreamCaps(Recording())
    caps.attach(0, lambda: sockets[0])
    caps.attach(1, lambda: sockets[1])
    caps.want({}, {1: 5_000_000})  # the coordinator paces stream 1 itself
    caps.tick()
    assert pacing_rate(sockets[0]) == 7_000_000  # the start's pace holds at first
    assert pacing_rate(sockets[1]) == 5_000_000
    now[0] += JUMP_PACED_MIN + 0.01  # loopback's round trips are far below the minimum
    caps.tick()
    assert pacing_rate(sockets[0]) == NO_PACING
    assert pacing_rate(sockets[1]) == 5_000_000  # the coordinator's rate is left alone


def test_lift_takes_a_jump_starts_pace_off_a_stream_still_under_it(
    sockets: list[socket.socket],
) -> None:
    set_pacing_rate(sockets[0], 7_000_000)
    caps = StreamCaps(Recording())
    caps.attach(0, lambda: sockets[0])
    caps.lift()  # the copy ended within its first round trips
    assert pacing_rate(sockets[0]) == NO_PACING


def test_a_stream_capped_through_the_bpf_clamp_is_paced_at_its_caps_rate_too(
    sockets: list[socket.socket],
) -> None:
    capper = Recording()  # the BPF clamp: it bounds the window only
    caps = StreamCaps(capper)
    caps.attach(0, lambda: sockets[0])
    caps.want({0: 5}, {})
    caps.tick()
    assert ("set", sockets[0], 5) in capper.calls
    info = sample(sockets[0])
    assert info.snd_mss and info.rtt
    assert pacing_rate(sockets[0]) == -(-5 * info.snd_mss * 1_000_000 // info.rtt)
    caps.want({0: 5}, {0: 1000})  # the coordinator's own rate is lower: it is kept
    caps.tick()
    assert pacing_rate(sockets[0]) == 1000
    caps.want({}, {})  # no cap, no rate: unpaced again
    caps.tick()
    assert pacing_rate(sockets[0]) == NO_PACING
