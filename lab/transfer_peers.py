"""GridFTP and XRootD, the transfer tools data managers would use instead of Reservoir
(design section 5), as real processes started and stopped by PID.

- :class:`GridftpServer`: ``globus-gridftp-server``, anonymous, mapped to ``nobody``
  (it refuses root), control and data channels on one address.
- :class:`XrootdServer`: ``xrootd -R nobody`` exporting one directory.
- :func:`gridftp_argv`, :func:`xrdcp_argv`: their clients' command lines (xrdcp takes
  at most 15 streams: more are clamped, and the copy says so).

Both servers run as ``nobody``, so they write into a directory ``nobody`` owns:
:func:`nobody_dir` makes one and removes it, with what was written there, after. A
server's configuration and logs live in a temporary directory of its own, removed when
it stops. With ``netns`` a server runs inside that network namespace (``ip netns exec``
execs the tool itself, so the PID is the server's). The timed copy through them is
:func:`reservoir.lab.peer_copy.timed_copy`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Literal

from reservoir.lab.netns import exec_argv
from reservoir.lab.peers import LOCALHOST, PeerError, free_port, stop_process

__all__ = [
    "TOOLS",
    "XRDCP_MAX_STREAMS",
    "GridftpServer",
    "Server",
    "Tool",
    "XrootdServer",
    "gridftp_argv",
    "in_netns",
    "nobody_dir",
    "nobody_parent",
    "xrdcp_argv",
]

Tool = Literal["gridftp", "xrdcp"]
TOOLS: tuple[Tool, ...] = ("gridftp", "xrdcp")
XRDCP_MAX_STREAMS = 15
GRIDFTP_BLOCK = 4 << 20  # -bs: the buffer size of design section 5
SETTLE_S = 5.0  # how long a server may take to reap the child that served a copy
USER = "nobody"


def in_netns(netns: str | None, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside ``netns`` (None: here)."""
    return exec_argv(netns, argv) if netns else list(argv)


def _nobody() -> tuple[int, int]:
    pw = pwd.getpwnam(USER)
    return pw.pw_uid, pw.pw_gid


def _unreachable(path: Path) -> Path | None:
    """The first ancestor of ``path`` that others may not enter, if any."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def nobody_parent(near: Path, temp: Path | None = None) -> Path:
    """Where a directory for ``nobody`` near ``near`` can go: ``near`` itself if nobody
    may enter it, else ``temp`` (default: the system's temporary directory) when it is
    on the same file system (so a copy into it is still a copy onto the same disk);
    else PeerError."""
    near = near.resolve()
    blocked = _unreachable(near / "x")
    if blocked is None:
        return near
    temp = temp or Path(tempfile.gettempdir())
    if os.stat(temp).st_dev == os.stat(near).st_dev:
        return temp
    raise PeerError(
        f"{near}: the peers' servers run as {USER}, who may not enter {blocked}"
        f" (mode {os.stat(blocked).st_mode & 0o777:o}), and {temp} is on another file"
        " system; use a folder others may enter"
    )


@contextmanager
def nobody_dir(parent: Path | None = None, prefix: str = "peer-") -> Iterator[Path]:
    """A fresh directory owned by ``nobody`` in ``parent`` (default: the system's
    temporary directory), removed with its contents after, also on failure."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent)).resolve()
    try:
        blocked = _unreachable(path)
        if blocked is not None:
            raise PeerError(
                f"{path}: the peers' servers run as {USER}, who may not enter {blocked}"
                f" (mode {os.stat(blocked).st_mode & 0o777:o}); use a folder others may enter"
            )
        os.chown(path, *_nobody())
        os.chmod(path, 0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _cpu_with_children(pid: int) -> float:
    """utime + stime of a process and of its children it has reaped (/proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _listening(netns: str | None, port: int) -> bool:
    argv = in_netns(netns, ["ss", "-Hltn", f"sport = :{port}"])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    return bool(done.stdout.strip())


@dataclass
class Server:
    """A peer's server: started by ``with``, listening on ``host:port`` (a free port of
    ``host`` when 0; give one with ``netns``), writing into ``root``."""

    root: Path
    host: str = LOCALHOST
    port: int = 0
    netns: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    state: Path | None = None
    """The server's own temporary directory: configuration, logs, admin files."""
    _cpu0: float = field(default=0.0, repr=False)

    tool: ClassVar[Tool]
    binary: ClassVar[str]
    package: ClassVar[str]
    START_TIMEOUT_S: ClassVar[float] = 15.0

    def argv(self) -> list[str]:
        raise NotImplementedError

    def launch_argv(self) -> list[str]:
        """What starts the server: :meth:`argv`, in its namespace if it has one."""
        return in_netns(self.netns, self.argv())

    def client_argv(self, source: Path, dest: Path, streams: int) -> list[str]:
        """The client's command line copying ``source`` to ``dest`` (in ``root``)."""
        raise NotImplementedError

    def client_streams(self, streams: int) -> int:
        """The streams the client is given when asked for ``streams``."""
        return streams

    def __enter__(self) -> Server:
        if shutil.which(self.binary) is None:
            raise PeerError(f"{self.binary} is not installed (Debian package {self.package})")
        if not self.port:
            if self.netns:
                raise PeerError(f"{self.tool}: give a port for a server in {self.netns}")
            self.port = free_port(self.host)
        self.state = Path(tempfile.mkdtemp(prefix=f"{self.tool}-server-"))
        os.chown(self.state, *_nobody())
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        assert self.state is not None
        argv = self.launch_argv()
        with open(self.state / "server.log", "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, cwd=self.state)
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while not _listening(self.netns, self.port):
            if self.proc.poll() is not None:
                raise PeerError(
                    f"{self.binary} exited ({self.proc.returncode}) before listening on"
                    f" {self.host}:{self.port}: {self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise PeerError(
                    f"{self.binary}: nothing listening on {self.host}:{self.port} after"
                    f" {self.START_TIMEOUT_S:g} s: {self.log_tail()}"
                )
            time.sleep(0.05)

    def log_tail(self, n: int = 600) -> str:
        """The end of the server's output (and of its own log file, if it keeps one)."""
        if self.state is None:
            return ""
        logs = [self.state / "server.log", *sorted(self.state.rglob("*.log"))]
        text = ""
        for path in dict.fromkeys(logs):
            with suppress(OSError):
                text += path.read_text(errors="replace")
        return text.strip()[-n:] or "(no output)"

    def cpu_seconds(self) -> float:
        """The server's user + system seconds so far, with the children it reaped
        (globus-gridftp-server forks one per client)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise PeerError(f"{self.binary} exited ({self.proc.returncode}): {self.log_tail()}")
        return _cpu_with_children(self.proc.pid)

    def settle(self) -> None:
        """Until the children that served a copy are gone (and their time counted)."""
        assert self.proc is not None
        deadline = time.monotonic() + SETTLE_S
        while _children(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None:
            left = _children(self.proc.pid)
            stop_process(self.proc)
            for pid in left:  # a child still serving a client: ours to stop
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.state is not None:
            shutil.rmtree(self.state, ignore_errors=True)


class GridftpServer(Server):
    """``globus-gridftp-server -aa -anonymous-user nobody``: anonymous FTP, control and
    data channels on ``host`` only, writes restricted to ``root``, no configuration
    file read from /etc."""

    tool: ClassVar[Tool] = "gridftp"
    binary: ClassVar[str] = "globus-gridftp-server"
    package: ClassVar[str] = "globus-gridftp-server-progs"

    def argv(self) -> list[str]:
        assert self.state is not None
        conf = self.state / "gridftp.conf"
        conf.write_text("")
        return [
            self.binary, "-c", str(conf), "-aa", "-anonymous-user", USER,
            "-p", str(self.port), "-control-interface", self.host,
            "-data-interface", self.host, "-restrict-paths", str(self.root),
        ]  # fmt: skip

    def launch_argv(self) -> list[str]:
        """In a namespace, with a hosts file that names ``host``: the server looks its
        listening address up by name and gives up when that fails, and a lab's
        namespace has no DNS server to ask. The file is bind-mounted in the private
        mount namespace ``ip netns exec`` gives the server: nothing changes outside."""
        if not self.netns:
            return super().launch_argv()
        assert self.state is not None
        hosts = self.state / "hosts"
        name = "gridftp-" + self.host.replace(".", "-").replace(":", "-")
        hosts.write_text(f"{Path('/etc/hosts').read_text()}\n{self.host} {name}\n")
        script = 'mount --bind "$0" /etc/hosts && exec "$@"'
        return in_netns(self.netns, ["sh", "-c", script, str(hosts), *self.argv()])

    def client_argv(self, source: Path, dest: Path, streams: int) -> list[str]:
        return gridftp_argv(source, self.host, self.port, dest, streams)


@dataclass
class XrootdServer(Server):
    """``xrootd -R nobody`` exporting ``root`` on ``port`` of every address of its
    namespace (it has no directive to listen on one); with ``allow`` only that client
    host may connect, and on a loopback ``host`` only this host."""

    tool: ClassVar[Tool] = "xrdcp"
    binary: ClassVar[str] = "xrootd"
    package: ClassVar[str] = "xrootd-server"
    allow: str | None = None

    def argv(self) -> list[str]:
        assert self.state is not None
        lines = [
            f"all.export {self.root}",
            f"xrd.port {self.port}",
            f"all.adminpath {self.state}",
            f"all.pidpath {self.state}",
        ]
        allow = self.allow or (self.host if self.host.startswith("127.") else None)
        if allow:
            lines.append(f"xrd.allow host {allow}")
        conf = self.state / "xrootd.cfg"
        conf.write_text("\n".join(lines) + "\n")
        name = f"peer{self.port}"
        return [  # -s: its pid file, and the manifest beside it (else in /tmp)
            self.binary, "-R", USER, "-c", str(conf), "-n", name,
            "-l", str(self.state / "xrootd.log"), "-s", str(self.state / "xrootd.pid"),
        ]  # fmt: skip

    def client_argv(self, source: Path, dest: Path, streams: int) -> list[str]:
        return xrdcp_argv(source, self.host, self.port, dest, streams)

    def client_streams(self, streams: int) -> int:
        return xrdcp_streams(streams)


def gridftp_argv(source: Path, host: str, port: int, dest: Path, streams: int) -> list[str]:
    """``globus-url-copy -p N -bs 4194304 -fast file:///SRC ftp://HOST:PORT/DST``."""
    return [
        "globus-url-copy", "-p", str(streams), "-bs", str(GRIDFTP_BLOCK), "-fast",
        f"file://{source.resolve()}", f"ftp://{host}:{port}{dest}",
    ]  # fmt: skip


def xrdcp_streams(streams: int) -> int:
    """The streams xrdcp is given: at most :data:`XRDCP_MAX_STREAMS`."""
    return min(streams, XRDCP_MAX_STREAMS)


def xrdcp_argv(source: Path, host: str, port: int, dest: Path, streams: int) -> list[str]:
    """``xrdcp -N -f --streams N SRC root://HOST:PORT//DST`` with N clamped to 15."""
    return [
        "xrdcp", "-N", "-f", "--streams", str(xrdcp_streams(streams)),
        str(source.resolve()), f"root://{host}:{port}/{dest}",
    ]  # fmt: skip
