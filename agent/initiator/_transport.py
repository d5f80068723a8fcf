"""The byte pipe under a session: TCP with PDU framing, swappable for tests.

:class:`PduTransport` is the seam (like libiscsi's ``queue_pdu``): a session only
calls ``send``, ``drop``, ``close`` and ``set_digests`` on it and is fed through a
:class:`PduSink`.  :class:`TcpTransport` is the real one: an asyncio
BufferedProtocol that frames PDUs with the target's :class:`Receiver` (a large
Data-In segment is read by the kernel into a buffer of its own) and writes
everything queued during one loop iteration at once, through its own
:class:`SocketWriter` (sendmsg, and sendfile for data segments that are
:class:`FileSpan` s of a source file), not the event loop's transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from reservoir.agent.initiator._writer import SocketWriter
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.receiver import Receiver


class PduSink(Protocol):
    """Who receives what a transport reads."""

    def pdu_received(self, pdu: P.Pdu) -> None: ...

    def transport_lost(self, exc: Exception | None) -> None: ...


class PduTransport(Protocol):
    """What a session needs from a connection."""

    def send(self, pdu: P.Pdu) -> None: ...

    def set_digests(self, header: bool, data: bool) -> None: ...

    def drop(self) -> None: ...

    def close(self) -> None: ...

    def tcp_info(self) -> bytes: ...


log = logging.getLogger(__name__)

Connector = Callable[[str, int, str | None, PduSink], Awaitable[PduTransport]]

TCP_INFO_LEN = 256


class TcpTransport(asyncio.BufferedProtocol):
    """One TCP connection carrying iSCSI PDUs.

    ``outgoing_filter`` is a test seam: when set, a PDU for which it returns
    False is not sent (to lose Data-Out on purpose, say).
    """

    def __init__(self, sink: PduSink) -> None:
        self.sink = sink
        self.rx = Receiver()
        self.header_digest = False
        self.data_digest = False
        self.transport: asyncio.Transport | None = None
        self.outgoing_filter: Callable[[P.Pdu], bool] | None = None
        self._out: list[P.Segment] = []
        self._lost = False
        self._sock: socket.socket | None = None  # a duplicate descriptor, see socket()
        self._writer: SocketWriter | None = None
        self._cause: OSError | None = None  # why the writer gave the connection up

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.rx.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.rx.received(nbytes)
        try:
            while not self._lost and (frame := self.rx.next()) is not None:
                self.sink.pdu_received(P.decode(*frame))
        except P.PduError:
            self.drop()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._writer is not None:
            self._writer.close()  # before its descriptor closes
        if self._sock is not None:
            self._sock.close()  # the duplicate only: the transport closes its own
            self._sock = None
        if not self._lost:
            self._lost = True
            self.sink.transport_lost(self._cause or exc)

    def send(self, pdu: P.Pdu) -> None:
        if self._lost or (self.outgoing_filter is not None and not self.outgoing_filter(pdu)):
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        if pdu.span is not None and self.data_digest:
            pdu = dataclasses.replace(pdu, data=pdu.span.read(), span=None)
        self._out += P.encode_parts(
            pdu, header_digest=self.header_digest, data_digest=self.data_digest
        )

    @property
    def sends_spans(self) -> bool:
        """Whether a :class:`FileSpan` data segment goes out from its file, with no
        copy (no data digest to compute over its bytes)."""
        return not self.data_digest

    def _flush(self) -> None:
        """Everything sent during this loop iteration in one write (one syscall)."""
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self._writer_now().write(out)

    def _writer_now(self) -> SocketWriter:
        if self._writer is None:
            sock = self.socket()
            assert sock is not None, "a connection that is not closing has its socket"
            self._writer = SocketWriter(sock, self._write_failed)
        return self._writer

    def _write_failed(self, exc: OSError) -> None:
        """The connection cannot carry what was queued: broken, as a network failure
        would break it; the session hears why from transport_lost (a
        :class:`P.SpanError` fails the commands whose data is gone, see Session)."""
        if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
            log.warning("connection to the target given up: %s", exc)
        self._cause = exc
        self.drop()

    def set_digests(self, header: bool, data: bool) -> None:
        self.header_digest = self.rx.header_digest = header
        self.data_digest = self.rx.data_digest = data

    def drop(self) -> None:
        """Break the connection at once (RST), as a network failure would; what was
        queued is not sent."""
        if self._writer is not None:
            self._writer.close()
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Flush what is queued and close once the socket took it all."""
        self._flush()
        if self.transport is None:
            return
        writer = self._writer
        if writer is not None and writer.pending:
            writer.drained = self.transport.close
        else:
            self.transport.close()

    def socket(self) -> socket.socket | None:
        """The connection's socket as a plain :class:`socket.socket` on a duplicate
        descriptor (closed with the connection), the same object for the whole
        connection: for TCP_INFO and socket options such as caps, never to read or
        write.  The event loop's own wrapper (asyncio's TransportSocket, uvloop's
        PseudoSocket) cannot be weakly referenced or kept as a key."""
        if self._sock is None and self.transport is not None and not self._lost:
            raw = self.transport.get_extra_info("socket")
            if raw is not None:
                fd = os.dup(raw.fileno())
                # family, type and protocol asked of the kernel: the wrapper may say
                # protocol 0 for an MPTCP socket
                self._sock = socket.socket(fileno=fd)
        return self._sock

    def tcp_info(self) -> bytes:
        """Raw ``TCP_INFO`` of the socket (Linux ``struct tcp_info``), unparsed."""
        sock = self.socket()
        if sock is None:
            return b""
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)


async def tcp_connect(
    host: str, port: int, local_address: str | None, sink: PduSink
) -> TcpTransport:
    """Connect to ``host:port`` (from ``local_address`` if given) with TCP_NODELAY."""
    loop = asyncio.get_running_loop()
    local = (local_address, 0) if local_address else None
    _, protocol = await loop.create_connection(
        lambda: TcpTransport(sink), host, port, local_addr=local
    )
    sock = protocol.socket()
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return protocol


IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)


async def mptcp_connect(
    host: str, port: int, local_address: str | None, sink: PduSink
) -> TcpTransport:
    """Like :func:`tcp_connect` over an MPTCP socket (``IPPROTO_MPTCP``, Linux >= 5.6).

    The kernel adds subflows on other links when the path manager is set up on both
    ends (``ip mptcp limits set subflow 2 add_addr_accepted 2`` here and on the target,
    plus ``ip mptcp endpoint add ADDR dev DEV signal`` for every extra target address).
    Raises OSError with a clear message when the kernel refuses MPTCP sockets.
    """
    loop = asyncio.get_running_loop()
    # resolved with protocol 0: getaddrinfo does not know IPPROTO_MPTCP
    family, _, _, _, address = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
    try:
        sock = socket.socket(family, socket.SOCK_STREAM, IPPROTO_MPTCP)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"the kernel refuses MPTCP sockets ({exc.strerror}): it needs CONFIG_MPTCP "
            "and sysctl net.mptcp.enabled=1",
        ) from exc
    local = (local_address, 0) if local_address else None
    return await connect_socket(sock, address, sink, local=local)


async def connect_socket(
    sock: socket.socket,
    address: tuple[Any, ...],
    sink: PduSink,
    *,
    local: tuple[str, int] | None = None,
    prepare: Callable[[socket.socket], None] | None = None,
) -> TcpTransport:
    """The steps of a connection made on a socket of one's own: bound to ``local`` if
    given, handed to ``prepare`` (options to set before the handshake), connected
    without blocking (:func:`_connect`), TCP_NODELAY where the protocol has it, made a
    transport; the socket is closed on any failure."""
    loop = asyncio.get_running_loop()
    try:
        sock.setblocking(False)
        if local is not None:
            sock.bind(local)
        if prepare is not None:
            prepare(sock)
        await _connect(loop, sock, address)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _, protocol = await loop.create_connection(lambda: TcpTransport(sink), sock=sock)
    except BaseException:
        sock.close()
        raise
    return protocol


async def _connect(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, address: tuple[Any, ...]
) -> None:
    """Non-blocking connect; ``loop.sock_connect`` would re-resolve the address with
    the socket's protocol, which getaddrinfo rejects for IPPROTO_MPTCP."""
    err = sock.connect_ex(address)
    if err == errno.EINPROGRESS:
        ready: asyncio.Future[None] = loop.create_future()

        def writable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_writer(sock.fileno(), writable)
        try:
            await ready
        finally:
            loop.remove_writer(sock.fileno())
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, f"connect to {address[0]}:{address[1]}: {os.strerror(err)}")


def with_congestion(connect: Connector, algorithm: str) -> Connector:
    """``connect``, then the connection switched to congestion control ``algorithm``
    (``TCP_CONGESTION``; Linux takes it on an established connection). OSError when the
    kernel refuses: an unknown algorithm (ENOENT), or one a process without
    CAP_NET_ADMIN may not pick (EPERM)."""
    name = algorithm.encode()

    async def connect_with(
        host: str, port: int, local_address: str | None, sink: PduSink
    ) -> PduTransport:
        transport = await connect(host, port, local_address, sink)
        sock = transport.socket() if isinstance(transport, TcpTransport) else None
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name)
            except OSError as exc:
                transport.close()
                raise OSError(exc.errno, f"congestion control {algorithm}: {exc.strerror}") from exc
        return transport

    return connect_with


class Relay:
    """A sink that forwards to another, switched after login (mailbox, then session)."""

    def __init__(self, to: PduSink) -> None:
        self.to = to

    def pdu_received(self, pdu: P.Pdu) -> None:
        self.to.pdu_received(pdu)

    def transport_lost(self, exc: Exception | None) -> None:
        self.to.transport_lost(exc)


class Mailbox:
    """A sink that queues PDUs for a request/response exchange (login, discovery)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[P.Pdu | None] = asyncio.Queue()

    def pdu_received(self, pdu: P.Pdu) -> None:
        self._queue.put_nowait(pdu)

    def transport_lost(self, exc: Exception | None) -> None:
        self._queue.put_nowait(None)

    async def recv(self, timeout: float) -> P.Pdu:
        """The next PDU; raises ConnectionError when the connection closed."""
        pdu = await asyncio.wait_for(self._queue.get(), timeout)
        if pdu is None:
            raise ConnectionError("target closed the connection")
        return pdu
