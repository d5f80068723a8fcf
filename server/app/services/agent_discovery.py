"""Registering an agent from what it says of itself (``AgentCreate.discover``): its NICs
from ``GET /info``, its volumes from ``GET /volumes``. What the body gives is kept; only
what it leaves out is asked for. The volumes are then confirmed as for any registration
(``agents.confirm_volumes``)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from reservoir.server.app.agent_client import AgentError, AgentRef, VolumeLister
from reservoir.server.app.errors import InvalidRequestError
from reservoir.server.app.models import AgentCreate
from reservoir.server.app.services.agents import unconfirmed

__all__ = ["discovered", "nics_of", "volumes_of"]

Json = dict[str, Any]
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9._:@-]")


async def discovered(lister: VolumeLister, body: AgentCreate) -> AgentCreate:
    """``body`` with the NICs and volumes it leaves out, as the agent reports them."""
    if not body.discover or (body.nics and body.volumes):
        return body
    ref = AgentRef("", body.name, str(body.control_url))
    try:
        info = await lister.info(ref)
        reported = [] if body.volumes else await lister.volumes(ref)
    except AgentError as exc:
        raise unconfirmed(body, exc) from None
    fields = body.model_dump(mode="json")
    if not body.nics:
        fields["nics"] = nics_of(info, body)
    if not body.volumes:
        fields["volumes"] = volumes_of(reported, info)
    fields["discover"] = False
    return AgentCreate.model_validate(fields)


def nics_of(info: Json, body: AgentCreate) -> list[Json]:
    """The NICs to register: up, with an address; loopback ones only for an agent whose
    control URL is a loopback address (a lab on one host). 422 for a NIC whose speed
    neither the kernel nor ``nic_speed_bps`` gives."""
    host = urlsplit(str(body.control_url)).hostname or ""
    on_loopback = _loopback(host)
    chosen = [
        nic
        for nic in info.get("nics") or []
        if nic.get("up") and nic.get("addresses") and bool(nic.get("loopback")) == on_loopback
    ]
    if not chosen:
        raise InvalidRequestError(
            ("nics",), f"agent {body.name!r} reports no NIC that is up with an address: give nics"
        )
    unknown = [nic["name"] for nic in chosen if not nic.get("speed_bps")]
    if unknown and body.nic_speed_bps is None:
        raise InvalidRequestError(
            ("nic_speed_bps",),
            f"the kernel of agent {body.name!r} reports no speed for {', '.join(unknown)}: "
            "give nic_speed_bps (bits/s), or the nics",
        )
    return [
        {
            "name": nic["name"],
            "address": nic["addresses"][0],
            "speed_bps": nic.get("speed_bps") or body.nic_speed_bps,
        }
        for nic in chosen
    ]


def volumes_of(reported: list[Json], info: Json) -> list[Json]:
    """Every volume the agent can use, named ``lunN`` (a LUN; ``lunN-TARGET`` where two
    targets have an N) or by its file's name; LUNs served at the agent's first portal."""
    usable = [v for v in reported if not v.get("error") and isinstance(v.get("size_bytes"), int)]
    portals = info.get("target_portals") or []
    luns = [v["lun"] for v in usable if v.get("kind") == "lun"]
    taken: set[str] = set()
    volumes = []
    for v in usable:
        if v.get("kind") == "lun":
            name = f"lun{v['lun']}"
            if luns.count(v["lun"]) > 1:
                name += "-" + str(v["iqn"]).rsplit(":", 1)[-1]
            entry: Json = {"iqn": v["iqn"], "lun": v["lun"]}
            if portals:
                entry["portal"] = portals[0]
        else:
            name = _name_of(PurePosixPath(v["path"]).name)
            entry = {"path": v["path"]}
        volumes.append({"name": _unique(name, taken), "size_bytes": v["size_bytes"], **entry})
    return volumes


def _name_of(text: str) -> str:
    name = _NOT_IN_NAME.sub("-", text)[:120]
    return name if name[:1].isalnum() else f"v{name}"


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
