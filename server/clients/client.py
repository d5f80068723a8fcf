"""A small typed client of the coordinator's API (``/api/v1``), on httpx.

httpx's errors and the coordinator's error answers are translated once, in
:func:`_translated`, into the clients' tree (:mod:`.errors`): ``UnreachableError``
(no answer: refused, timed out, not a URL we can use), ``ApiError`` (an HTTP error
status: ``status``, ``message``, ``fields``, and the problem's ``code`` and
``request_id``, :mod:`reservoir.common.problems`) and ``UnexpectedAnswerError`` (an
answer that is not what the API documents).

The bodies are the coordinator's own models (``models.py``), so a field renamed on
the server is a type error here too. The token travels in ``Authorization: Bearer``
and appears in no message.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from reservoir.common.problems import code_for_status
from reservoir.server.app.models import (
    AgentPublic,
    LinkPublic,
    ProbeCreate,
    TransferCreate,
    TransferEventPublic,
    TransferPublic,
    VolumeSetPublic,
)
from reservoir.server.clients.errors import ClientError

__all__ = [
    "API_PREFIX",
    "DEFAULT_TIMEOUT",
    "ApiError",
    "ClientError",
    "CoordinatorClient",
    "FieldError",
    "UnexpectedAnswerError",
    "UnreachableError",
    "field_path",
]

API_PREFIX = "/api/v1"  # main.API_PREFIX, not imported: that pulls in FastAPI and SQLAlchemy
DEFAULT_TIMEOUT = 10.0
RETRY_DELAY_S = 0.5  # before the second try of a request that is safe to send again
ACTIONS = ("pause", "resume", "cancel")

M = TypeVar("M", bound=BaseModel)


class UnreachableError(ClientError):
    """The coordinator did not answer (refused, timed out, bad URL)."""


class UnexpectedAnswerError(ClientError):
    """The coordinator answered something the API does not document."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One entry of a 422 answer: ``path`` such as ``streams_per_pair`` or ``members.0``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ApiError(ClientError):
    """The API answered an error status; ``message`` is its ``detail`` (or the reason),
    ``code`` and ``request_id`` its problem's (None from an answer without them).

    ``str()`` names the code when it says more than the status (``HTTP 409 Conflict
    (idempotency_key_reused): ...``), and the request id of a server error, which
    finds it in the coordinator's log."""

    def __init__(
        self,
        status: int,
        message: str,
        fields: tuple[FieldError, ...] = (),
        reason: str = "",
        *,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.status = status
        self.message = message
        self.fields = fields
        self.reason = reason or httpx.codes.get_reason_phrase(status)
        self.code = code
        self.request_id = request_id
        head = f"HTTP {status} {self.reason}".rstrip()
        if code is not None and code != code_for_status(status):
            head += f" ({code})"
        tail = f" (request id {request_id})" if request_id and status >= 500 else ""
        super().__init__(f"{head}: {message}{tail}")

    def lines(self) -> list[str]:
        """The one-line summary, then one ``field.path: message`` line per field error."""
        return [str(self), *(str(f) for f in self.fields)]


def field_path(loc: list[Any] | tuple[Any, ...]) -> str:
    """``["body", "pacing", "margin"]`` -> ``pacing.margin`` (where the field was, dropped)."""
    parts = list(loc)
    if parts and parts[0] in ("body", "path", "query", "header"):
        parts = parts[1:]
    return ".".join(str(p) for p in parts)


def _clean(msg: str) -> str:
    return msg.removeprefix("Value error, ")


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) and value else None


def api_error(response: httpx.Response) -> ApiError:
    """The :class:`ApiError` of an error answer, whatever shape its body has: a problem
    (its field errors in ``errors``), an older ``{"detail": ...}`` (a list for a 422),
    or no JSON at all."""
    status, reason = response.status_code, response.reason_phrase
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    code, request_id = _text(body, "code"), _text(body, "request_id")
    listed = body.get("errors") or body.get("detail")
    if isinstance(listed, list) and listed:
        fields = tuple(
            FieldError(field_path(e.get("loc", [])), _clean(str(e.get("msg", ""))))
            for e in listed
            if isinstance(e, dict)
        )
        return ApiError(status, "invalid request", fields, reason, code=code, request_id=request_id)
    detail = _text(body, "detail")
    if detail is not None:
        return ApiError(status, detail, reason=reason, code=code, request_id=request_id)
    text = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    message = text or "no detail given"
    return ApiError(status, message, reason=reason, code=code, request_id=request_id)


PAGE = 500  # transfers asked per request when listing


class CoordinatorClient:
    """``with CoordinatorClient(url, token) as c: c.transfers()``; every call may raise
    :class:`ClientError`."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        base = self.url if self.url.endswith(API_PREFIX) else self.url + API_PREFIX
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        try:
            self._http = httpx.Client(
                base_url=base, headers=headers, timeout=timeout, transport=transport
            )
        except (httpx.InvalidURL, ValueError) as exc:
            raise UnreachableError(f"{url!r} is not a coordinator URL: {exc}") from exc

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------ the API

    def agents(self, **filters: list[str]) -> list[AgentPublic]:
        """Every agent (``filters``: the query of ``GET /agents``, e.g. ``label``)."""
        return self._get_list("/agents", AgentPublic, filters)

    def register_agent(self, body: dict[str, Any]) -> AgentPublic:
        return self._request("POST", "/agents", AgentPublic, json=body)

    def update_agent(self, agent_id: str, body: dict[str, Any]) -> AgentPublic:
        return self._request("PATCH", f"/agents/{_quote(agent_id)}", AgentPublic, json=body)

    def delete(self, kind: str, item_id: str) -> None:
        """Removes the item ``item_id`` of ``kind`` (agents, volume-sets, links)."""
        with self._translated():
            self._send("DELETE", f"/{kind}/{_quote(item_id)}")

    def volume_sets(self) -> list[VolumeSetPublic]:
        return self._get_list("/volume-sets", VolumeSetPublic)

    def create_volume_set(self, body: dict[str, Any]) -> VolumeSetPublic:
        return self._request("POST", "/volume-sets", VolumeSetPublic, json=body)

    def create_link(self, body: dict[str, Any]) -> LinkPublic:
        return self._request("POST", "/links", LinkPublic, json=body)

    def links(self) -> list[LinkPublic]:
        return self._get_list("/links", LinkPublic)

    def link(self, link_id: str) -> LinkPublic:
        return self._request("GET", f"/links/{_quote(link_id)}", LinkPublic)

    def probe_link(self, link_id: str, body: ProbeCreate) -> LinkPublic:
        """Starts a probe of the link (``probe.state`` is ``running``)."""
        payload = body.model_dump(mode="json")
        return self._request("POST", f"/links/{_quote(link_id)}/probe", LinkPublic, json=payload)

    def transfers(self, **filters: list[str]) -> list[TransferPublic]:
        """Every transfer (``filters``: the query of ``GET /transfers``), page after page."""
        return self._get_list("/transfers", TransferPublic, filters)

    def transfer(self, transfer_id: str) -> TransferPublic:
        return self._request("GET", f"/transfers/{_quote(transfer_id)}", TransferPublic)

    def create_transfer(
        self, body: TransferCreate, idempotency_key: str | None = None, attempts: int = 3
    ) -> TransferPublic:
        """The transfer ``body`` asks for. The request carries an Idempotency-Key (a new
        UUID unless given), so it is sent again, up to ``attempts`` times, when the
        coordinator could not be reached or did not answer: a request that did arrive
        returns the transfer it made instead of asking for a second one."""
        payload = body.model_dump(mode="json")
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        for attempt in range(attempts):
            try:
                return self._request(
                    "POST", "/transfers", TransferPublic, json=payload, headers=headers
                )
            except UnreachableError:
                if attempt == attempts - 1:
                    raise
                time.sleep(RETRY_DELAY_S * 2**attempt)
        raise AssertionError("unreachable: the loop returns or raises")

    def act(self, transfer_id: str, action: str) -> TransferPublic:
        """``pause``, ``resume`` or ``cancel``: the transfer in its new state."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}")
        return self._request("POST", f"/transfers/{_quote(transfer_id)}/{action}", TransferPublic)

    def events(self, transfer_id: str) -> list[TransferEventPublic]:
        return self._get_list(f"/transfers/{_quote(transfer_id)}/events", TransferEventPublic)

    # ------------------------------------------------------------ plumbing

    def _get_list(
        self, path: str, model: type[M], filters: dict[str, list[str]] | None = None
    ) -> list[M]:
        """Every item of the list at ``path`` (with the query ``filters``), page after
        page (its X-Next-Cursor)."""
        found: list[M] = []
        params: dict[str, str | list[str]] = {**(filters or {}), "limit": str(PAGE)}
        while True:
            with self._translated():
                response = self._send("GET", path, params=params)
                found += TypeAdapter(list[model]).validate_json(response.content)  # type: ignore[valid-type]
            following = response.headers.get("X-Next-Cursor")
            if following is None:
                return found
            params["cursor"] = following

    def _request(self, method: str, path: str, model: type[M], **kwargs: Any) -> M:
        with self._translated():
            response = self._send(method, path, **kwargs)
            return model.model_validate_json(response.content)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        if response.is_error:
            raise api_error(response)
        return response

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """The one place where httpx's and pydantic's errors become :class:`ClientError`."""
        try:
            yield
        except httpx.TimeoutException as exc:
            raise UnreachableError(
                f"the coordinator at {self.url} did not answer within {self.timeout:g} s"
            ) from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise UnreachableError(f"{self.url!r} is not a coordinator URL: {exc}") from exc
        except httpx.TransportError as exc:
            raise UnreachableError(
                f"cannot reach the coordinator at {self.url} ({_reason(exc)})"
            ) from exc
        except ValidationError as exc:
            raise UnexpectedAnswerError(
                f"the coordinator at {self.url} sent an answer this client does not "
                f"understand ({exc.error_count()} problem(s), first: "
                f"{field_path(exc.errors()[0]['loc'])}: {exc.errors()[0]['msg']})"
            ) from exc


def _quote(segment: str) -> str:
    """One path segment: an id typed by a user must not walk to another route."""
    return quote(segment, safe="")


def _reason(exc: httpx.TransportError) -> str:
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    return text.splitlines()[0]
