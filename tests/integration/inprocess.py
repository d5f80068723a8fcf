"""Our target served in a thread of the test process, on its own event loop (uvloop,
as ``reservoir target serve`` runs it), for tests that need server options the
command line does not carry or need to look at the server's state."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from reservoir.agent.target.config import Lun, Target, TargetConfig
from reservoir.agent.target.server import TargetServer
from reservoir.lab.peers import LOCALHOST, free_port

T = TypeVar("T")


@dataclass
class InProcessTarget:
    server: TargetServer
    loop: asyncio.AbstractEventLoop
    host: str
    port: int

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` run on the server's loop (to read its state safely)."""

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)


def one_lun_config(iqn: str, lun: Path, host: str = LOCALHOST) -> TargetConfig:
    """One portal on a free port of ``host`` (a real port: SendTargets reports it), open
    to every initiator."""
    target = Target(iqn, luns=[Lun(0, str(lun))], open=True)
    return TargetConfig(portals=[(host, free_port(host))], targets=[target])


@contextmanager
def serving(config: TargetConfig, **options: Any) -> Iterator[InProcessTarget]:
    """A started :class:`TargetServer` (``options`` passed to it) for the block."""
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="target", daemon=True)
    thread.start()
    server = TargetServer(config, nop_interval=0, **options)
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        yield InProcessTarget(server, loop, *config.portals[0])
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(grace=0), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
