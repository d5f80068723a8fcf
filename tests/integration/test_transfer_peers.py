"""GridFTP and XRootD through lab/transfer_peers.py on loopback: a small copy through
each, disk to disk, lands whole with its figures; a client that fails or hangs is
stopped; servers and their directories are gone after, also when a copy failed."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reservoir.lab.bench_copy import Source, write_source
from reservoir.lab.peer_copy import Leg, digest_files, timed_copy
from reservoir.lab.peers import PeerError, free_port
from reservoir.lab.transfer_peers import GridftpServer, Server, XrootdServer, nobody_dir

from .conftest import need_tool

pytestmark = pytest.mark.integration

SIZE = 32 << 20
TOOLS: dict[str, tuple[type[Server], tuple[str, ...]]] = {
    "gridftp": (GridftpServer, ("globus-gridftp-server", "globus-url-copy")),
    "xrdcp": (XrootdServer, ("xrootd", "xrdcp")),
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    return write_source(tmp_path_factory.mktemp("peers") / "source.img", SIZE, 0)


@pytest.fixture
def root() -> Iterator[Path]:
    """The servers' destination: owned by nobody (they run as nobody), in the system's
    temporary directory (pytest's own is closed to others)."""
    with nobody_dir() as path:
        yield path
    assert not path.exists()


def serve(tool: str, root: Path) -> Server:
    server_type, binaries = TOOLS[tool]
    for binary in binaries:
        need_tool(binary)
    return server_type(root)


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_copy_through_the_peer_lands_whole_with_its_figures(
    tool: str, source: Source, root: Path
) -> None:
    with serve(tool, root) as server:
        dest = root / "copy.img"
        copy = timed_copy([Leg(server, source.path, dest, 4)], source.digest, timeout=60)
        assert copy.matched and digest_files([dest]) == source.digest
        assert dest.stat().st_uid != 0  # written by the server, as nobody
    assert (copy.tool, copy.bytes, copy.streams, copy.streams_used) == (tool, SIZE, 4, 4)
    assert copy.seconds > 0 and copy.goodput_bps == pytest.approx(SIZE * 8 / copy.seconds)
    assert copy.client_cpu_s > 0 and copy.server_cpu_s > 0 and copy.cpu_s_per_gb > 0
    assert copy.progress and copy.progress[-1][1] == SIZE
    assert server.proc is not None and server.proc.poll() is not None
    assert server.state is not None and not server.state.exists()


def test_xrdcp_is_given_at_most_15_streams_and_the_copy_says_so(source: Source, root: Path) -> None:
    with serve("xrdcp", root) as server:
        copy = timed_copy([Leg(server, source.path, root / "c", 32)], source.digest, timeout=60)
    assert copy.matched and (copy.streams, copy.streams_used) == (32, 15)
    assert copy.note == "xrdcp: 32 streams asked, 15 used"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_destination_that_differs_from_the_source_is_not_matched(
    tool: str, source: Source, root: Path
) -> None:
    with serve(tool, root) as server:
        copy = timed_copy([Leg(server, source.path, root / "c", 2)], "0" * 32, timeout=60)
    assert not copy.matched


def test_xrdcp_without_its_server_fails_at_once_instead_of_retrying(
    source: Source, root: Path
) -> None:
    with serve("xrdcp", root) as server:
        elsewhere = dataclasses.replace(server, port=free_port())  # where nobody listens
        started = time.monotonic()
        with pytest.raises(PeerError, match="xrdcp exited"):
            timed_copy([Leg(elsewhere, source.path, root / "c", 2)], source.digest, timeout=60)
    assert time.monotonic() - started < 20


def test_a_server_that_died_is_reported_before_any_client_starts(
    source: Source, root: Path
) -> None:
    with serve("gridftp", root) as server:
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait()
        with pytest.raises(PeerError, match="globus-gridftp-server exited"):
            timed_copy([Leg(server, source.path, root / "c", 2)], source.digest, timeout=60)
    assert not (root / "c").exists()


@dataclass
class _Hanging(GridftpServer):
    """A real server whose client never finishes."""

    def client_argv(self, source: Path, dest: Path, streams: int) -> list[str]:
        return ["sleep", "600"]


def test_a_client_that_does_not_finish_in_time_is_stopped(source: Source, root: Path) -> None:
    need_tool("globus-gridftp-server")
    with _Hanging(root) as server, pytest.raises(PeerError, match="did not finish within 1 s"):
        timed_copy([Leg(server, source.path, root / "c", 1)], source.digest, timeout=1)
    assert server.proc is not None and server.proc.poll() is not None


@dataclass
class _Missing(GridftpServer):
    """A real server whose client is not installed."""

    def client_argv(self, source: Path, dest: Path, streams: int) -> list[str]:
        return ["reservoir-no-such-client"]


def test_a_client_that_is_not_installed_is_a_peer_error(source: Source, root: Path) -> None:
    need_tool("globus-gridftp-server")
    with _Missing(root) as server, pytest.raises(PeerError, match="is not installed"):
        timed_copy([Leg(server, source.path, root / "c", 1)], source.digest, timeout=10)
