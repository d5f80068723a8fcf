"""The write side of an initiator connection: bytes in order on a non-blocking socket.

Buffers go out with one ``sendmsg`` per run of them; a :class:`FileSpan` data
segment goes out with ``sendfile``, from the page cache to the socket without a
copy through process memory (the socket refers to the file's pages where the
device takes them, as loopback and veth do).  A PDU header is sent with MSG_MORE
when its data segment follows, so the two leave in the same packets.  What the
socket cannot take now waits, in order, for it to be writable again.

A span whose file was closed, or that ends before its length (the file shrank),
cannot be sent: the PDU header already promised its bytes, so the connection is
given up (``failed`` is told, with a :class:`SpanError`) and nothing is sent in
their place.
Where the kernel refuses sendfile on the socket, spans are read and sent as buffers.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections import deque
from collections.abc import Callable, Iterable

from reservoir.agent.iscsi.pdu import Buffer, FileSpan, Segment

IOV_MAX = 1024  # buffers one sendmsg takes (Linux UIO_MAXIOV)
_NO_SENDFILE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


class SocketWriter:
    """Writes :data:`Segment` s to ``sock`` in order; ``failed`` is told of the first
    error (after which nothing more is written)."""

    def __init__(self, sock: socket.socket, failed: Callable[[OSError], None]) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._failed = failed
        self._queue: deque[Segment] = deque()
        self._waiting: asyncio.AbstractEventLoop | None = None  # registered for POLLOUT
        self._closed = False
        self.sendfile = True  # False once the kernel refused it on this socket
        self.drained: Callable[[], None] | None = None  # called once the queue empties

    @property
    def pending(self) -> int:
        """Bytes queued and not yet taken by the socket."""
        return sum(len(part) for part in self._queue)

    def write(self, parts: Iterable[Segment]) -> None:
        if self._closed:
            return
        self._queue.extend(part for part in parts if len(part))
        if self._waiting is None:
            self._pump()

    def close(self) -> None:
        """Drops what is queued; writes nothing more."""
        self._closed = True
        self._queue.clear()
        self._unwait()

    def _pump(self) -> None:
        try:
            while self._queue and not self._closed:
                head = self._queue[0]
                sent = self._send_span(head) if isinstance(head, FileSpan) else self._send_run()
                if not sent:
                    self._wait()
                    return
        except OSError as exc:
            self.close()
            self._failed(exc)
            return
        self._unwait()
        if not self._queue and self.drained is not None:
            self.drained()

    def _send_run(self) -> bool:
        """The buffers at the head of the queue, in one sendmsg; False when the socket
        took less than all of them (it is full)."""
        run: list[Buffer] = []
        for part in self._queue:
            if isinstance(part, FileSpan) or len(run) == IOV_MAX:
                break
            run.append(part)
        more = len(run) < len(self._queue)  # a span (or more buffers) follows
        try:
            sent = self._sock.sendmsg(run, (), socket.MSG_MORE if more else 0)
        except BlockingIOError:
            return False
        whole = sum(len(part) for part in run)
        self._consume(sent)
        return sent == whole

    def _consume(self, sent: int) -> None:
        while sent:
            head = self._queue[0]
            assert not isinstance(head, FileSpan)
            if len(head) > sent:
                self._queue[0] = memoryview(head)[sent:]
                return
            sent -= len(head)
            self._queue.popleft()

    def _send_span(self, span: FileSpan) -> bool:
        """Some of the span at the head of the queue; False when the socket is full."""
        if not self.sendfile:
            self._queue[0] = span.read()
            return True
        try:
            sent = os.sendfile(self._fd, span.fileno(), span.offset, span.length)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_SENDFILE:
                raise
            self.sendfile = False
            return True
        if sent == 0:
            raise span.short()
        if sent == span.length:
            self._queue.popleft()
        else:
            self._queue[0] = span[sent:]
        return True

    def _wait(self) -> None:
        if self._waiting is None:
            loop = asyncio.get_running_loop()
            loop.add_writer(self._fd, self._pump)
            self._waiting = loop

    def _unwait(self) -> None:
        if self._waiting is not None:
            self._waiting.remove_writer(self._fd)
            self._waiting = None
