"""HTTP/1.1 requests written by hand on a socket, for what httpx will not do: declare a
body and send only part of it, or none, and read the answer while the rest is owed."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["Answer", "LogLines", "captured_logs", "long_string_body", "send_partly"]


def long_string_body(key: str, pieces: int = 32, size: int = 64 * 1024) -> Iterator[bytes]:
    """A JSON object of one long string under ``key``, in pieces (a chunked body of 2 MiB
    by default)."""
    yield b'{"' + key.encode() + b'": "'
    for _ in range(pieces):
        yield b"x" * size
    yield b'"}'


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def send_partly(
    host: str,
    port: int,
    request_line: str,
    headers: dict[str, str],
    sent: bytes = b"",
    *,
    timeout: float = 5.0,
) -> Answer:
    """Sends the request line, ``headers`` and ``sent`` (however much of the body the
    headers declare), then reads the answer; raises ``TimeoutError`` when none comes
    within ``timeout`` seconds (a server waiting for the rest of the body)."""
    head = request_line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(head.encode() + sent)
        return _read_answer(sock)


def _read_answer(sock: socket.socket) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return Answer(int(status_line.split()[1]), headers, body[:length])


class LogLines(logging.Handler):
    """Every record formatted (with its traceback), from the root and uvicorn loggers."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@contextmanager
def captured_logs() -> Iterator[LogLines]:
    """What the servers in this process log during the block (uvicorn's loggers do not
    propagate to the root, so each gets the handler)."""
    handler = LogLines()
    loggers = [logging.getLogger(name) for name in ("", "uvicorn")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
