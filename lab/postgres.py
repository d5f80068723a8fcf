"""A PostgreSQL server of our own, in a temporary folder, started and stopped by PID.

Debian's ``postgresql`` package gives the server binaries (``/usr/lib/postgresql/N/bin``);
:class:`PostgresCluster` runs ``initdb`` into a folder it creates, then ``postgres`` on
a free loopback port, as the unprivileged ``postgres`` user when started as root (the
server refuses to run as root). Nothing outside its folder is touched: no system
cluster, no ``pg_ctlcluster``. It is what the coordinator's tests run against beside
SQLite, and what a lab coordinator can use to try two coordinators on one database.

Authentication is ``trust`` for the loopback address only: the cluster lives as long as
a test session, in a folder only its owner may enter.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import psycopg

from reservoir.lab.peers import LOCALHOST, PeerError, free_port, stop_process, wait_port

__all__ = ["PostgresCluster", "server_bin"]

BIN_ROOT = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def server_bin() -> Path | None:
    """The newest installed server's ``bin`` folder, or None where none is installed."""
    found = sorted(
        (p for p in BIN_ROOT.glob("*/bin") if (p / "postgres").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    return found[-1] if found else None


class PostgresCluster:
    """``initdb`` + ``postgres`` in a temporary folder; :meth:`create_database` gives a
    fresh database and its SQLAlchemy URL (``postgresql+psycopg://``)."""

    def __init__(self, bin_dir: Path | None = None) -> None:
        found = bin_dir or server_bin()
        if found is None:
            raise PeerError(f"no PostgreSQL server under {BIN_ROOT} (Debian package postgresql)")
        self.bin = found
        self.port = 0
        self.folder: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def version(self) -> str:
        """The server's version, as ``postgres --version`` says it."""
        out = subprocess.run(
            [str(self.bin / "postgres"), "--version"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SERVER_USER}@{LOCALHOST}:{self.port}/{database}"

    def __enter__(self) -> PostgresCluster:
        self.folder = Path(tempfile.mkdtemp(prefix="reservoir-pg-"))
        try:
            self._start(self.folder)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self, folder: Path) -> None:
        data = folder / "data"
        data.mkdir(mode=0o700)
        self._own(folder)
        self._run(
            "initdb", "-D", str(data), "-U", SERVER_USER, "--auth=trust", "-E", "UTF8",
            "--no-sync", "--no-instructions",
        )  # fmt: skip
        self.port = free_port()
        options = {
            "listen_addresses": LOCALHOST,
            "port": str(self.port),
            "unix_socket_directories": str(folder),
            "fsync": "off",  # a test cluster: its data need not survive a crash
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
        }
        argv = [str(self.bin / "postgres"), "-D", str(data)]
        for key, value in options.items():
            argv += ["-c", f"{key}={value}"]
        log = (folder / "server.log").open("wb")
        self._proc = subprocess.Popen(
            self._as_server_user(argv), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        try:
            wait_port(LOCALHOST, self.port, timeout=30.0, proc=self._proc)
        except PeerError as exc:
            raise PeerError(f"{exc}; the server's log: {self.log_tail()}") from exc

    def create_database(self, name: str) -> str:
        """A new empty database ``name``; its URL."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a plain database name: {name!r}")
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drops ``name``, closing whatever connections are still open on it."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a plain database name: {name!r}")
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def connections(self, database: str) -> int:
        """How many connections ``database`` has now (other than ours)."""
        with psycopg.connect(
            host=LOCALHOST, port=self.port, user=SERVER_USER, dbname="postgres", autocommit=True
        ) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
            ).fetchone()
        return int(row[0]) if row is not None else 0

    def execute(self, sql: str) -> None:
        """One statement in autocommit on the ``postgres`` database."""
        with psycopg.connect(
            host=LOCALHOST, port=self.port, user=SERVER_USER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(sql.encode())

    def log_tail(self, lines: int = 20) -> str:
        if self.folder is None:
            return ""
        with contextlib.suppress(OSError):
            text = (self.folder / "server.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def _run(self, tool: str, *args: str) -> None:
        argv = self._as_server_user([str(self.bin / tool), *args])
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PeerError(f"{tool} failed ({done.returncode}): {done.stderr.strip()[-500:]}")

    @staticmethod
    def _as_server_user(argv: list[str]) -> list[str]:
        """``argv`` run as ``postgres`` when we are root (the server refuses root)."""
        if os.geteuid() != 0:
            return argv
        return ["setpriv", "--reuid", SERVER_USER, "--regid", SERVER_USER, "--init-groups", *argv]

    @staticmethod
    def _own(folder: Path) -> None:
        """``folder`` (0700) handed to ``postgres`` when we are root."""
        folder.chmod(0o700)
        if os.geteuid() == 0:
            user = pwd.getpwnam(SERVER_USER)
            for path in (folder, *folder.iterdir()):
                os.chown(path, user.pw_uid, user.pw_gid)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:  # SIGINT: the fast shutdown (SIGTERM waits for clients)
                self._proc.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(10.0)
            stop_process(self._proc, timeout=5.0)
            self._proc = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
