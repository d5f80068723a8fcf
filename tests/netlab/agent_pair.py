"""Two real agents in lab hosts ``src`` and ``dst`` joined by link ``l1``: the source
agent copies a file of random bytes into the destination agent's builtin target (one
LUN). Tests of what an agent does to a copy's connections talk to the source agent's
API from inside the source host."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from reservoir.lab.coord_site import AgentProc, inside, site_credentials
from reservoir.lab.network import Lab

Json = dict[str, Any]


class AgentPair:
    """The two agents (not started: :func:`running`), their source file and LUN;
    ``port`` is the source agent's, the destination's the next."""

    def __init__(
        self, lab: Lab, work: Path, size: int, *, addrs: tuple[str, str], iqn: str, port: int
    ) -> None:
        self.lab, self.size, self.iqn = lab, size, iqn
        src, self.dst_addr = addrs
        creds = site_credentials(work)
        source, self.lun = work / "source.img", work / "lun.img"
        source.write_bytes(os.urandom(size))
        with open(self.lun, "wb") as f:
            f.truncate(size)
        self.src = AgentProc(lab, "src", "l1", src, port, work, creds, source)
        self.dst = AgentProc(lab, "dst", "l1", self.dst_addr, port + 1, work, creds, self.lun, iqn)
        self.headers = {"Authorization": f"Bearer {self.src.token}"}

    @property
    def dest_url(self) -> str:
        return f"iscsi://{self.dst_addr}:3260/{self.iqn}/0"

    def api(self, method: str, path: str, **kw: Any) -> Any:
        """The source agent's API; a status of 300 or more fails the test."""
        with inside(self.lab.ns("src")):
            r = httpx.request(
                method, f"{self.src.url}/api/v1{path}", headers=self.headers, timeout=10, **kw
            )
        assert r.status_code < 300, r.text
        return r.json() if r.content else {}

    def start_copy(self, body: Json) -> str:
        """POSTs a copy of the source file into the LUN (``body`` adds to it); its id."""
        full = {"source": str(self.src.data), "dest": self.dest_url, **body}
        return str(self.api("POST", "/copies", json=full)["id"])

    def wait(self, copy_id: str, timeout: float = 60) -> Json:
        """The copy once it is neither queued nor running."""
        deadline = time.monotonic() + timeout
        while True:
            copy: Json = self.api("GET", f"/copies/{copy_id}")
            if copy["state"] not in ("queued", "running"):
                return copy
            assert time.monotonic() < deadline, f"copy still {copy['state']}"
            time.sleep(0.2)

    def stream_records(self, copy_id: str) -> list[Json]:
        """The copy's per-stream telemetry records, in order."""
        records = self.api("GET", f"/copies/{copy_id}/telemetry", params={"limit": 10_000})
        return [r for r in records if r["type"] == "stream"]


Pair = TypeVar("Pair", bound=AgentPair)


@contextmanager
def running(pair: Pair) -> Iterator[Pair]:
    """Both agents up (started where the health checks reach both), stopped after."""
    try:
        with inside(pair.lab.ns("src")):
            pair.dst.start()
            pair.src.start()
        yield pair
    finally:
        pair.src.stop()
        pair.dst.stop()
