"""Discovery (RFC 7143 §4.3, Appendix C): SendTargets=All in a discovery session."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from reservoir.agent.initiator._errors import LoginError, ProtocolError
from reservoir.agent.initiator._login import LoginExchange, LoginOptions
from reservoir.agent.initiator._session import new_isid
from reservoir.agent.initiator._transport import Mailbox, PduTransport, tcp_connect
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.text import encode_text, parse_text

_MAX_TEXT_ROUNDS = 64


@dataclass(frozen=True, slots=True)
class Portal:
    """One network portal of a target: address, TCP port, portal group tag."""

    address: str
    port: int
    tpgt: int


@dataclass(frozen=True, slots=True)
class DiscoveredTarget:
    """A target named by SendTargets with every portal it listed."""

    name: str
    portals: tuple[Portal, ...] = field(default_factory=tuple)


def parse_address(value: str) -> Portal:
    """A TargetAddress value: ``host[:port][,tpgt]``, IPv6 hosts in brackets (§13.8)."""
    where, _, tag = value.partition(",")
    if where.startswith("["):
        host, _, rest = where[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = where.rpartition(":") if ":" in where else (where, "", "")
    return Portal(host, int(port) if port else 3260, int(tag) if tag else 1)


def parse_send_targets(pairs: list[tuple[str, str]]) -> list[DiscoveredTarget]:
    """Group TargetName/TargetAddress pairs (in order) into targets."""
    found: list[tuple[str, list[Portal]]] = []
    for key, value in pairs:
        if key == "TargetName":
            found.append((value, []))
        elif key == "TargetAddress" and found:
            found[-1][1].append(parse_address(value))
    return [DiscoveredTarget(name, tuple(portals)) for name, portals in found]


async def _send_targets(
    transport: PduTransport, mailbox: Mailbox, cmdsn: int, exp_statsn: int, timeout: float
) -> list[tuple[str, str]]:
    """Text Request SendTargets=All, following continued (C bit) answers (§11.10)."""
    text, ttt, data = bytearray(), P.RESERVED_TAG, encode_text([("SendTargets", "All")])
    for _ in range(_MAX_TEXT_ROUNDS):
        request = P.TextRequest(itt=1, ttt=ttt, cmdsn=cmdsn, expstatsn=exp_statsn, data=data)
        transport.send(request)
        answer = await mailbox.recv(timeout)
        if not isinstance(answer, P.TextResponse):
            raise ProtocolError(f"unexpected {type(answer).__name__} answering SendTargets")
        exp_statsn = (answer.statsn + 1) & 0xFFFFFFFF
        text += answer.data
        if answer.final and not answer.cont:
            return parse_text(bytes(text), repeatable=("TargetName", "TargetAddress"))
        ttt, data = answer.ttt, b""
    raise ProtocolError("SendTargets answer never ended")


async def discover(
    host: str,
    port: int,
    *,
    initiator_name: str,
    chap: tuple[str, str] | None = None,
    mutual_chap: tuple[str, str] | None = None,
    timeout: float = 10.0,
    local_address: str | None = None,
) -> list[DiscoveredTarget]:
    """The targets (each with all its portals) a portal reports to SendTargets=All."""
    mailbox = Mailbox()
    transport = await asyncio.wait_for(tcp_connect(host, port, local_address, mailbox), timeout)
    try:
        options = LoginOptions(initiator_name, None, chap, mutual_chap, timeout=timeout)
        login = await LoginExchange(transport, mailbox, options, isid=new_isid()).run()
        transport.set_digests(login.params.header_digest, login.params.data_digest)
        pairs = await _send_targets(transport, mailbox, login.exp_cmdsn, login.exp_statsn, timeout)
        transport.send(P.LogoutRequest(itt=2, cmdsn=login.exp_cmdsn, immediate=True))
        await _logout_answer(mailbox, timeout)
    except (ConnectionError, TimeoutError) as exc:
        raise LoginError(0, 0, f"discovery on {host}:{port} failed: {exc}") from exc
    finally:
        transport.close()
    return parse_send_targets(pairs)


async def _logout_answer(mailbox: Mailbox, timeout: float) -> None:
    try:
        await mailbox.recv(timeout)
    except (ConnectionError, TimeoutError):
        return
