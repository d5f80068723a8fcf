"""The coordinator's client of the agents' control API (``/api/v1/copies``, ``/iperf``,
``/info``, ``/volumes``).

Errors, translated once in :func:`_mapped` (callers see only these)::

    AgentError
     +-- AgentUnreachableError   no answer: connection refused or reset, timeout, 5xx,
     |                      an answer that is not the JSON we expect (retry later)
     +-- AgentRefusedError       a 4xx other than 404: the agent understood and said no
     |                      (``status``, the agent's ``detail`` and ``agent_code``)
     +-- AgentTokenRefusedError  (raised by the proxy routes) its 401 or 403: 502
     +-- ForwardedRefusalError   (raised by the proxy routes) its other refusals, with
                            the agent's status and code

``get_copy`` answers ``None`` for a 404 (the agent does not know the copy); for
``iperf``, ``info`` and ``volumes`` a 404 and a 503 are refusals too
(``AgentRefusedError``).
The agent's control token is derived from the coordinator's key at each call
(``core/agent_credentials.py``), sent as a bearer token and never logged or kept. A
call made while the coordinator answers a request carries that request's id
(``X-Request-ID``), so the agent logs it under the same id.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
from fastapi import status

from reservoir.common.problems import code_for_status, located
from reservoir.common.request_id import HEADER as REQUEST_ID_HEADER
from reservoir.common.request_id import current_request_id
from reservoir.common.trust import trust
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.core.config import SettingsError
from reservoir.server.app.errors import ServerError

__all__ = [
    "AgentClient",
    "AgentError",
    "AgentRef",
    "AgentRefusedError",
    "AgentTokenRefusedError",
    "AgentUnreachableError",
    "ForwardedRefusalError",
    "HttpAgentClient",
    "OneShotVolumeLister",
    "VolumeLister",
]

Json = dict[str, Any]
TIMEOUT = 10.0  # seconds per request; pausing a copy waits for its checkpoint


class AgentError(ServerError):
    """Talking to an agent went wrong; the message says how (never with the token)."""

    status_code = status.HTTP_502_BAD_GATEWAY
    code = "bad_gateway"


class AgentUnreachableError(AgentError):
    """The agent did not answer usefully; the scheduler retries."""

    code = "agent_unreachable"


class AgentRefusedError(AgentError):
    """The agent answered ``status`` with ``answer`` (its detail) and ``agent_code``
    (its problem's code, None from an agent that gave none)."""

    code = "agent_refused"

    def __init__(self, status: int, detail: str, agent_code: str | None = None) -> None:
        super().__init__(f"the agent refused ({status}): {detail}")
        self.status = status
        self.answer = detail
        self.agent_code = agent_code


class AgentTokenRefusedError(AgentError):
    """The agent refused the coordinator's token (its 401 or 403): a 502, since the
    user's request was fine; the message says how to give the agent the digest."""

    code = "agent_token_refused"


class ForwardedRefusalError(AgentError):
    """The agent's refusal, answered to the user with the agent's status and code."""

    def __init__(self, message: str, refusal: AgentRefusedError) -> None:
        super().__init__(message)
        self.status_code = refusal.status
        self.code = refusal.agent_code or code_for_status(refusal.status)


@dataclass(frozen=True, slots=True)
class AgentRef:
    """Where an agent's control API is; its name and token generation say which
    credentials it takes."""

    id: str
    name: str
    control_url: str
    generation: int = 0


class AgentClient(Protocol):
    async def create_copy(self, agent: AgentRef, body: Json) -> Json: ...

    async def get_copy(self, agent: AgentRef, copy_id: str) -> Json | None: ...

    async def copy_action(self, agent: AgentRef, copy_id: str, action: str) -> Json: ...

    async def wait_copy(
        self, agent: AgentRef, copy_id: str, state: str, seconds: float
    ) -> Json | None: ...

    async def aclose(self) -> None: ...


class VolumeLister(Protocol):
    """What registration asks of an agent: the volumes it has (``GET /volumes``) and,
    to register it from what it says, its host's facts (``GET /info``: NICs, portals)."""

    async def volumes(self, agent: AgentRef) -> list[Json]: ...

    async def info(self, agent: AgentRef) -> Json: ...


@contextmanager
def _mapped(agent: AgentRef) -> Iterator[None]:
    try:
        yield
    except httpx.TransportError as exc:  # connect, read, timeouts, protocol
        reason = str(exc) or type(exc).__name__
        raise AgentUnreachableError(f"agent {agent.name!r}: {reason}") from exc
    except ValueError as exc:  # not JSON
        raise AgentUnreachableError(f"agent {agent.name!r}: unreadable answer") from exc


def _detail(response: httpx.Response) -> str:
    """The agent's reason: a problem's field errors as ``loc: msg; ...``, else its
    ``detail`` (an older agent's list of field errors read the same way)."""
    try:
        answer = response.json()
        listed = answer.get("errors") or answer.get("detail")
    except (ValueError, AttributeError):
        return response.text[:300]
    if isinstance(listed, list) and all(isinstance(e, dict) and "msg" in e for e in listed):
        return "; ".join(located(e) for e in listed)[:1000]
    detail = answer.get("detail")
    return detail if isinstance(detail, str) else str(detail)[:1000]


def _code(response: httpx.Response) -> str | None:
    """The code of the agent's problem, or None."""
    try:
        code = response.json().get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, str) else None


def _refused(response: httpx.Response) -> AgentRefusedError:
    return AgentRefusedError(response.status_code, _detail(response), _code(response))


class HttpAgentClient:
    """One pooled :class:`httpx.AsyncClient` for every agent."""

    def __init__(
        self,
        credentials: AgentCredentials,
        *,
        timeout: float = TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ):
        self._credentials = credentials
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport, verify=verify)

    def _auth(self, agent: AgentRef) -> dict[str, str]:
        """The agent's bearer token, and the id of the request being answered, if any."""
        token = self._credentials.control_token(agent.name, agent.generation)
        headers = {"Authorization": f"Bearer {token}"}
        request_id = current_request_id.get()
        if request_id is not None:
            headers[REQUEST_ID_HEADER] = request_id
        return headers

    async def _call(
        self,
        agent: AgentRef,
        method: str,
        path: str,
        body: Json | None = None,
        *,
        params: dict[str, str | float] | None = None,
        timeout: float | None = None,  # None: the client's
    ) -> Json | None:
        url = agent.control_url.rstrip("/") + "/api/v1" + path
        headers = self._auth(agent)
        wait = httpx.USE_CLIENT_DEFAULT if timeout is None else timeout
        with _mapped(agent):
            response = await self._http.request(
                method, url, json=body, params=params, headers=headers, timeout=wait
            )
            if response.status_code == 404:
                return None
            if response.status_code >= 500:
                raise AgentUnreachableError(f"agent {agent.name!r}: HTTP {response.status_code}")
            if response.status_code >= 400:
                raise _refused(response)
            data = response.json()
        if not isinstance(data, dict):
            raise AgentUnreachableError(f"agent {agent.name!r}: unexpected answer")
        return data

    async def create_copy(self, agent: AgentRef, body: Json) -> Json:
        data = await self._call(agent, "POST", "/copies", body)
        if data is None:
            raise AgentUnreachableError(f"agent {agent.name!r}: no /copies endpoint")
        return data

    async def get_copy(self, agent: AgentRef, copy_id: str) -> Json | None:
        return await self._call(agent, "GET", f"/copies/{copy_id}")

    async def wait_copy(
        self, agent: AgentRef, copy_id: str, state: str, seconds: float
    ) -> Json | None:
        """The copy once it has left ``state``, or after ``seconds`` as it is then
        (``GET /copies/{id}?while_state=&wait=``, answered by the agent as soon as the
        copy's state changes); ``None``: the agent does not know the copy."""
        params: dict[str, str | float] = {"while_state": state, "wait": seconds}
        path = f"/copies/{copy_id}"
        return await self._call(agent, "GET", path, params=params, timeout=seconds + TIMEOUT)

    async def get_telemetry(self, agent: AgentRef, copy_id: str, limit: int) -> list[Json] | None:
        """The copy's last ``limit`` telemetry records (``None``: the agent does not
        know the copy)."""
        url = f"{agent.control_url.rstrip('/')}/api/v1/copies/{copy_id}/telemetry"
        headers = self._auth(agent)
        with _mapped(agent):
            response = await self._http.get(url, params={"limit": limit}, headers=headers)
            if response.status_code == 404:
                return None
            if response.status_code >= 400:
                raise AgentUnreachableError(f"agent {agent.name!r}: HTTP {response.status_code}")
            data = response.json()
        if not isinstance(data, list):
            raise AgentUnreachableError(f"agent {agent.name!r}: unexpected answer")
        return [r for r in data if isinstance(r, dict)]

    async def set_caps(self, agent: AgentRef, copy_id: str, body: Json) -> Json:
        """``PUT /copies/{id}/caps``: the copy's per-stream cwnd caps and pacing rates."""
        data = await self._call(agent, "PUT", f"/copies/{copy_id}/caps", body)
        if data is None:
            raise AgentRefusedError(404, f"no copy {copy_id!r}")
        return data

    async def copy_action(self, agent: AgentRef, copy_id: str, action: str) -> Json:
        data = await self._call(agent, "POST", f"/copies/{copy_id}/{action}")
        if data is None:
            raise AgentRefusedError(404, f"no copy {copy_id!r}")
        return data

    async def _strict(
        self, agent: AgentRef, method: str, path: str, body: Json | None = None
    ) -> Json:
        """A call whose 4xx (404 included) and 503 are refusals with the agent's reason."""
        url = agent.control_url.rstrip("/") + "/api/v1" + path
        headers = self._auth(agent)
        with _mapped(agent):
            response = await self._http.request(method, url, json=body, headers=headers)
            if 400 <= response.status_code < 500 or response.status_code == 503:
                raise _refused(response)
            if response.status_code >= 500:
                raise AgentUnreachableError(f"agent {agent.name!r}: HTTP {response.status_code}")
            data = response.json()
        if not isinstance(data, dict):
            raise AgentUnreachableError(f"agent {agent.name!r}: unexpected answer")
        return data

    async def iperf(
        self, agent: AgentRef, method: str, path: str, body: Json | None = None
    ) -> Json:
        """``/iperf/...`` (``POST servers``, ``POST runs``, ``GET runs/{id}``, ``DELETE
        servers/{id}``): a 503 (iperf3 missing, no NIC pacing) and a 404 are refusals
        with the agent's reason, not a reason to retry."""
        return await self._strict(agent, method, "/iperf" + path, body)

    async def info(self, agent: AgentRef) -> Json:
        """``GET /info``: the agent's name, version, host and CPU time, mapped as
        :meth:`iperf` (a 4xx or 503 is a refusal)."""
        return await self._strict(agent, "GET", "/info")

    async def volumes(self, agent: AgentRef) -> list[Json]:
        """``GET /volumes``: every volume the agent may copy from and to (path, kind,
        size_bytes, device_id, read_only, iqn, lun, error), mapped as :meth:`iperf`."""
        url = agent.control_url.rstrip("/") + "/api/v1/volumes"
        with _mapped(agent):
            response = await self._http.get(url, headers=self._auth(agent))
            if 400 <= response.status_code < 500 or response.status_code == 503:
                raise _refused(response)
            if response.status_code >= 500:
                raise AgentUnreachableError(f"agent {agent.name!r}: HTTP {response.status_code}")
            data = response.json()
        if not isinstance(data, list) or not all(isinstance(v, dict) for v in data):
            raise AgentUnreachableError(f"agent {agent.name!r}: unexpected answer")
        return data

    async def aclose(self) -> None:
        await self._http.aclose()


def agent_trust(ca_file: Path | None) -> ssl.SSLContext | bool:
    """What agents' HTTPS certificates are checked against: the CA certificates of
    ``ca_file``, else the system's trust store (one context, loaded once)."""
    try:
        return trust(ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(f"agent_ca_file {ca_file}: {exc}") from None


class OneShotVolumeLister:
    """Asks an agent for its volumes with an :class:`HttpAgentClient` of its own per call:
    registrations are rare, and nothing pooled outlives the request."""

    def __init__(
        self,
        credentials: AgentCredentials,
        *,
        timeout: float = TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.credentials = credentials
        self.timeout = timeout
        self.transport = transport
        self.verify = verify

    def _client(self) -> HttpAgentClient:
        return HttpAgentClient(
            self.credentials, timeout=self.timeout, transport=self.transport, verify=self.verify
        )

    async def volumes(self, agent: AgentRef) -> list[Json]:
        client = self._client()
        try:
            return await client.volumes(agent)
        finally:
            await client.aclose()

    async def info(self, agent: AgentRef) -> Json:
        client = self._client()
        try:
            return await client.info(agent)
        finally:
            await client.aclose()
