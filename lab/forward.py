"""A TCP forwarder from a loopback port on the host into a lab network namespace.

    python -m reservoir.lab.forward --ns NS --to ADDR:PORT [--listen 127.0.0.1:8470]

The coordinator of the lab listens on a lab address inside namespace ``NS``, which the
host cannot reach. The forwarder listens on a loopback address of the host (only
loopback: the lab is not published on the host's networks) and, for every accepted
connection, opens a socket *inside* ``NS`` (a socket keeps the namespace it was created
in: :func:`socket_in` creates it while the thread is switched there) and connects it to
``ADDR:PORT``; then it copies bytes both ways. An end-of-file from one side is passed
on as a half-close (``shutdown(SHUT_WR)``) and the other direction goes on; an error on
either side closes both. Every write waits for the peer to drain (``drain``), so at
most one read chunk plus the transport's write buffer is held per direction.

:class:`Forwarder` is the asyncio core (any socket factory: tests use plain sockets on
127.0.0.1); :class:`ForwardThread` runs it in a thread of its own, for programs that are
not asyncio (:mod:`reservoir.lab.demo`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import socket
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from reservoir.lab.coord_site import inside
from reservoir.lab.errors import LabError

__all__ = [
    "ForwardError",
    "ForwardThread",
    "Forwarder",
    "listen_socket",
    "parse_addr",
    "plain_socket",
    "socket_in",
]

CHUNK = 64 * 1024  # one read per direction at a time
CONNECT_TIMEOUT = 10.0
NewSocket = Callable[[], socket.socket]


class ForwardError(LabError):
    """The forwarder cannot listen (address not loopback, port taken) or start."""


def parse_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv4 or ``[IPv6]``) into a pair; ValueError if malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected ADDRESS:PORT, e.g. 127.0.0.1:8470")
    host = host.removeprefix("[").removesuffix("]")
    ipaddress.ip_address(host)  # ValueError names the bad address
    return host, int(port)


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on a loopback ``host``; ForwardError if the address is not
    loopback or the port is taken."""
    addr = ipaddress.ip_address(host)
    if not addr.is_loopback:
        raise ForwardError(f"{host}: the forwarder listens on loopback addresses only")
    sock = socket.socket(socket.AF_INET6 if addr.version == 6 else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ForwardError(
                f"{host}:{port} is already in use on this host (another demo or program"
                " listening there?); stop it or choose another port with --listen"
            ) from e
        raise ForwardError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    sock.setblocking(False)
    return sock


def plain_socket(family: socket.AddressFamily = socket.AF_INET) -> socket.socket:
    """A TCP socket in this thread's namespace."""
    return socket.socket(family, socket.SOCK_STREAM)


def socket_in(ns: str, family: socket.AddressFamily = socket.AF_INET) -> NewSocket:
    """A factory of TCP sockets created inside network namespace ``ns``."""

    def new() -> socket.socket:
        with inside(ns):
            return socket.socket(family, socket.SOCK_STREAM)

    return new


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copies until end-of-file, then half-closes the writer."""
    while chunk := await reader.read(CHUNK):
        writer.write(chunk)
        await writer.drain()
    if writer.can_write_eof() and not writer.is_closing():
        writer.write_eof()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


class Forwarder:
    """Accepts on ``listener`` and forwards every connection to ``target``, through
    sockets made by ``new_socket`` (unconnected; the forwarder connects them)."""

    def __init__(
        self,
        listener: socket.socket,
        target: tuple[str, int],
        new_socket: NewSocket = plain_socket,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.listener = listener
        self.target = target
        self.new_socket = new_socket
        self.connect_timeout = connect_timeout
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.writers: set[asyncio.StreamWriter] = set()  # both ends of every connection
        self.refused = 0  # connections the target did not accept

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accepted, sock=self.listener)

    async def close(self) -> None:
        """Stops accepting and closes every forwarded connection."""
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in list(self.writers):  # any a cancellation cut off before its close
            await _close(writer)
        self.writers.clear()
        if self.server is not None:
            await self.server.wait_closed()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.writers.add(writer)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass  # close(): end normally (the stream server reports a cancelled task)
        finally:
            writer.close()  # also when cancelled before the target answered
            self.writers.discard(writer)
            self.tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            far_reader, far_writer = await self._connect()
        except (OSError, TimeoutError):
            self.refused += 1
            await _close(writer)
            return
        await self._splice(reader, writer, far_reader, far_writer)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = self.new_socket()
        try:
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(loop.sock_connect(sock, self.target), self.connect_timeout)
            far_reader, far_writer = await asyncio.open_connection(sock=sock)
        except BaseException:
            sock.close()
            raise
        self.writers.add(far_writer)
        return far_reader, far_writer

    async def _splice(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        far_reader: asyncio.StreamReader,
        far_writer: asyncio.StreamWriter,
    ) -> None:
        """Both directions until both ended; the first error closes both."""
        pumps = [
            asyncio.create_task(_pump(reader, far_writer)),
            asyncio.create_task(_pump(far_reader, writer)),
        ]
        try:
            done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in done:
                task.exception()  # retrieved: a reset peer is an ordinary end
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            await _close(far_writer)
            self.writers.discard(far_writer)
            await _close(writer)


class ForwardThread:
    """A :class:`Forwarder` on an event loop in a daemon thread: ``with`` starts it
    (ForwardError if it cannot) and stops it, closing every connection."""

    def __init__(
        self, listener: socket.socket, target: tuple[str, int], new_socket: NewSocket
    ) -> None:
        self.forwarder = Forwarder(listener, target, new_socket)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="forward", daemon=True)
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.forwarder.start())
        except BaseException as e:  # handed to the starting thread
            self.error = e
            self.ready.set()
            self.loop.close()
            return
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.forwarder.close())
        self.loop.close()

    def __enter__(self) -> ForwardThread:
        self.thread.start()
        self.ready.wait()
        if self.error is not None:
            self.thread.join()
            raise ForwardError(f"the forwarder did not start: {self.error}") from self.error
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
        self.forwarder.listener.close()


async def _serve_forever(forwarder: Forwarder) -> None:
    await forwarder.start()
    try:
        await asyncio.Event().wait()
    finally:
        await forwarder.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ns", required=True, help="the network namespace of the target")
    parser.add_argument("--to", required=True, type=parse_addr, help="ADDRESS:PORT in NS")
    parser.add_argument("--listen", type=parse_addr, default=("127.0.0.1", 8470))
    args = parser.parse_args(argv)
    try:
        listener = listen_socket(*args.listen)
    except ForwardError as e:
        print(f"forward: {e}", file=sys.stderr)
        return 1
    family = socket.AF_INET6 if ":" in args.to[0] else socket.AF_INET
    forwarder = Forwarder(listener, args.to, socket_in(args.ns, family))
    print(f"forwarding {args.listen[0]}:{forwarder.port} -> {args.to[0]}:{args.to[1]} in {args.ns}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(forwarder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
