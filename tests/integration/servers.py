"""A uvicorn server (the agent's API, the coordinator) run in a thread of its own for a
test, as httpx's own tests do: started, waited for, stopped with ``should_exit``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


def start(server: uvicorn.Server, name: str) -> threading.Thread:
    """Runs ``server`` in a new thread and waits until it serves (10 s at most)."""
    thread = threading.Thread(target=server.run, name=name)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.01)
    return thread


def stop(server: uvicorn.Server, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(timeout=30)
    assert not thread.is_alive(), f"{thread.name} did not stop"


@contextmanager
def running(server: uvicorn.Server, name: str) -> Iterator[None]:
    """``server`` serving for the duration of the block."""
    thread = start(server, name)
    try:
        yield
    finally:
        stop(server, thread)
