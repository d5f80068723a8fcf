"""Stands for the agents' ``GET /volumes`` in the coordinator's unit tests: what each
agent (by control URL) reports, set by the test before it registers the agent."""

from __future__ import annotations

import hashlib
from typing import Any

from reservoir.server.app.agent_client import AgentRef, AgentRefusedError, AgentUnreachableError

__all__ = ["FakeVolumes", "device_id", "reported"]

Json = dict[str, Any]


def device_id(seed: str) -> str:
    """A device id (``naa.`` + 32 hex digits) standing for the device ``seed`` names."""
    return "naa.6" + hashlib.sha256(seed.encode()).hexdigest()[:31]


def reported(host: str, volume: Json) -> Json:
    """What the agent on ``host`` reports for a volume of a registration body: itself,
    as large as declared; a LUN's device is its target and number."""
    if volume.get("path") is not None:
        return {
            "path": volume["path"],
            "kind": "source",
            "size_bytes": volume["size_bytes"],
            "device_id": device_id(f"{host}:{volume['path']}"),
            "read_only": False,
            "iqn": None,
            "lun": None,
        }
    return {
        "path": f"/luns/{volume['iqn']}/{volume['lun']}.img",
        "kind": "lun",
        "size_bytes": volume["size_bytes"],
        "device_id": device_id(f"{host}:{volume['iqn']}/{volume['lun']}"),
        "read_only": False,
        "iqn": volume["iqn"],
        "lun": volume["lun"],
    }


class FakeVolumes:
    """Agents' volumes by control URL; an unknown URL does not answer."""

    def __init__(self) -> None:
        self.by_url: dict[str, list[Json]] = {}
        self.refusing: set[str] = set()  # control URLs of agents that refuse the token
        self.asked: list[str] = []  # control URLs, in order
        self.infos: dict[str, Json] = {}  # GET /info by control URL (default: no NICs)

    def has(self, body: Json, extra: list[Json] | None = None, *, refuses: bool = False) -> Json:
        """The agent of registration ``body`` (on a host of its own name) reports its
        volumes, and ``extra`` (or, ``refuses``, turns the coordinator's token down);
        returns ``body``."""
        url = str(body["control_url"]).rstrip("/")
        volumes = [reported(body["name"], v) for v in body.get("volumes", [])]
        self.by_url[url] = volumes + (extra or [])
        if refuses:
            self.refusing.add(url)
        return body

    async def volumes(self, agent: AgentRef) -> list[Json]:
        url = agent.control_url.rstrip("/")
        self.asked.append(url)
        if url not in self.by_url:
            raise AgentUnreachableError(f"agent {agent.name!r}: connection refused")
        if url in self.refusing:
            raise AgentRefusedError(401, "the token is not valid")
        return self.by_url[url]

    async def info(self, agent: AgentRef) -> Json:
        url = agent.control_url.rstrip("/")
        await self.volumes(agent)  # answers, or refuses, as it does for its volumes
        return self.infos.get(url, {"nics": [], "target_portals": []})
