"""The login phase of an iSCSI target, without I/O (RFC 7143 §6.3, §11.12, §11.13).

:class:`LoginNegotiator` is fed the Login Requests of one connection, one PDU
at a time, and returns the Login Response to send for each.  It handles:

* the stages: SecurityNegotiation (0), LoginOperationalNegotiation (1) and
  FullFeaturePhase (3); the T and C bits and the CSG/NSG rules.  The target
  answers T=1 only when the initiator asked for it; a request to go from
  security straight to full feature is answered with NSG=1, so that the
  target can declare its MaxRecvDataSegmentLength (as Linux LIO does);
* text spanning several PDUs (C bit) in both directions: a request with C=1
  gets an empty response; a response longer than 8192 bytes (the login
  MaxRecvDataSegmentLength) is sent in pieces with C=1, each fetched by an
  empty request;
* the declarations of the first request: InitiatorName, SessionType,
  TargetName, with target lookup, ACL and the TargetPortalGroupTag answer;
* authentication: AuthMethod (CHAP or None) and CHAP, one-way or mutual;
* the operational keys (:mod:`reservoir.agent.iscsi.negotiation`).

Any error ends the login: the reply carries the status and ``failure_reason``
says who and why (never a secret).  The negotiator never raises from
:meth:`LoginNegotiator.step`: it is a fuzz target.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from reservoir.agent.iscsi.chap import ChapAuthError, ChapError, ChapSecret, ChapTarget
from reservoir.agent.iscsi.negotiation import (
    KEYS,
    SESSION_TYPES,
    ConnectionParams,
    Kind,
    LoginStatus,
    NegotiationError,
    OperationalNegotiator,
    SessionParams,
    Stage,
    TargetLimits,
    check_key_use,
)
from reservoir.agent.iscsi.text import (
    NOT_UNDERSTOOD,
    REJECT,
    TextAssembler,
    TextError,
    encode_text,
    parse_list,
    split_text,
)

__all__ = [
    "ChapSecret",
    "LoginDirectory",
    "LoginNegotiator",
    "LoginReply",
    "LoginRequestView",
    "LoginStatus",
    "TargetPolicy",
]

SUPPORTED_VERSION = 0x00
LOGIN_SEGMENT_BYTES = 8192  # MaxRecvDataSegmentLength in force during login
MAX_LOGIN_PDUS = 128
MAX_ISCSI_NAME_BYTES = 223
_ISCSI_NAME_RE = re.compile(r"(?:iqn\.|eui\.|naa\.)[^\s,\x00-\x1f]+", re.IGNORECASE)


@dataclass(frozen=True)
class LoginRequestView:
    """The fields of a Login Request PDU that matter to the negotiation."""

    transit: bool
    cont: bool
    csg: int
    nsg: int
    version_max: int
    version_min: int
    isid: bytes
    tsih: int
    cid: int
    data: bytes  # the text data segment of this PDU, without padding


@dataclass(frozen=True)
class LoginReply:
    """What to put in the Login Response PDU.

    ``complete`` is True for the final response (T=1, NSG=3, success).  Any
    non-zero status ends the login: the caller sends the reply and closes.
    """

    transit: bool
    cont: bool
    csg: int
    nsg: int
    data: bytes
    status_class: int
    status_detail: int
    complete: bool

    @property
    def status(self) -> int:
        return self.status_class << 8 | self.status_detail


@dataclass(frozen=True)
class TargetPolicy:
    """How a target node lets initiators in."""

    name: str
    alias: str | None
    chap: ChapSecret | None  # the initiator must authenticate with this when set
    mutual_chap: ChapSecret | None  # the target answers a mutual challenge with this
    allowed_initiators: frozenset[str]  # empty: everyone
    portals: tuple[tuple[str, int, int], ...]  # (host, port, tpgt)


class LoginDirectory(Protocol):
    def target(self, name: str) -> TargetPolicy | None: ...

    def discovery_auth(self) -> tuple[ChapSecret | None, ChapSecret | None]: ...


def is_valid_iscsi_name(name: str) -> bool:
    """An ``iqn.``, ``eui.`` or ``naa.`` name of at most 223 bytes (RFC 7143 §4.2.7)."""
    size = len(name.encode("utf-8"))
    return size <= MAX_ISCSI_NAME_BYTES and _ISCSI_NAME_RE.fullmatch(name) is not None


def _same_name(first: str, second: str) -> bool:
    """iSCSI names compare without regard to case (RFC 3722 stringprep)."""
    return first.casefold() == second.casefold()


def _fail(status: LoginStatus, reason: str) -> NegotiationError:
    return NegotiationError(status, reason)


class _Auth:
    """State of the security stage for one connection."""

    def __init__(self, chap: ChapSecret | None, mutual: ChapSecret | None, limits: TargetLimits):
        self.required = chap is not None
        self.method: str | None = None
        self.phase = "idle"  # idle -> algorithm -> response -> done
        self.chap = ChapTarget(chap, mutual, allowed=limits.chap_algorithms) if chap else None

    @property
    def done(self) -> bool:
        return self.phase == "done" if self.required else self.method in (None, "None")

    def process(self, keys: dict[str, str]) -> list[tuple[str, str]]:
        replies: list[tuple[str, str]] = []
        if "AuthMethod" in keys:
            replies.append(("AuthMethod", self._method(keys.pop("AuthMethod"))))
        if "CHAP_A" in keys:
            replies += self._algorithm(keys.pop("CHAP_A"))
        if keys:
            replies += self._response(keys)
        return replies

    def _method(self, offer: str) -> str:
        if self.method is not None:
            raise _fail(LoginStatus.INITIATOR_ERROR, "AuthMethod negotiated twice")
        supported = ("CHAP",) if self.required else ("None",)
        try:
            chosen = next((item for item in parse_list(offer) if item in supported), None)
        except TextError:
            chosen = None
        if chosen is None:
            raise _fail(
                LoginStatus.AUTHENTICATION_FAILED,
                f"no acceptable AuthMethod in {offer[:80]!r} (target uses {supported[0]})",
            )
        self.method = chosen
        self.phase = "algorithm" if chosen == "CHAP" else "done"
        return chosen

    def _algorithm(self, offer: str) -> list[tuple[str, str]]:
        if self.chap is None or self.phase != "algorithm":
            raise _fail(LoginStatus.AUTHENTICATION_FAILED, "unexpected CHAP_A")
        try:
            replies = self.chap.offer(offer)
        except ChapAuthError as exc:
            raise _fail(LoginStatus.AUTHENTICATION_FAILED, str(exc)) from None
        self.phase = "response"
        return replies

    def _response(self, keys: dict[str, str]) -> list[tuple[str, str]]:
        if self.chap is None or self.phase != "response":
            names = ", ".join(sorted(keys))
            raise _fail(LoginStatus.AUTHENTICATION_FAILED, f"unexpected {names}")
        try:
            replies = self.chap.verify(keys)
        except ChapAuthError as exc:
            raise _fail(LoginStatus.AUTHENTICATION_FAILED, str(exc)) from None
        self.phase = "done"
        return replies


class LoginNegotiator:
    """Target side of the login of one connection (sans I/O).

    ``leading`` may be given; otherwise the first request decides (TSIH 0 is
    a leading login).  For a non-leading login, ``existing`` must hold the
    parameters of the session that the caller found for the TSIH.
    """

    def __init__(
        self,
        directory: LoginDirectory,
        limits: TargetLimits,
        *,
        portal_tpgt: int,
        leading: bool | None = None,
        existing: SessionParams | None = None,
    ) -> None:
        self._directory = directory
        self._limits = limits
        self._portal_tpgt = portal_tpgt
        self._leading = leading
        self._existing = existing
        self._assembler = TextAssembler()
        self._outgoing: list[bytes] = []
        self._ready = False
        self._stage: Stage | None = None
        self._ids: tuple[bytes, int, int] | None = None
        self._pdus = 0
        self._declared: dict[str, str] = {}
        self._auth: _Auth | None = None
        self._negotiator: OperationalNegotiator | None = None
        self._session_params: SessionParams | None = None
        self._connection_params: ConnectionParams | None = None
        self._failure: NegotiationError | None = None
        self.target: TargetPolicy | None = None
        self.complete = False

    # ------------------------------------------------------------------ results

    @property
    def leading(self) -> bool | None:
        return self._leading

    @property
    def failed(self) -> bool:
        return self._failure is not None

    @property
    def failure_status(self) -> LoginStatus | None:
        return self._failure.status if self._failure else None

    @property
    def failure_reason(self) -> str | None:
        return self._failure.reason if self._failure else None

    @property
    def initiator_name(self) -> str | None:
        return self._declared.get("InitiatorName")

    @property
    def session_type(self) -> str | None:
        return self._declared.get("SessionType")

    @property
    def authenticated_user(self) -> str | None:
        chap = self._auth.chap if self._auth else None
        return chap.authenticated_user if chap else None

    @property
    def session_params(self) -> SessionParams:
        if self._session_params is None:
            raise RuntimeError("login is not complete")
        return self._session_params

    @property
    def connection_params(self) -> ConnectionParams:
        if self._connection_params is None:
            raise RuntimeError("login is not complete")
        return self._connection_params

    # --------------------------------------------------------------------- step

    def step(self, req: LoginRequestView) -> LoginReply:
        """The response to one Login Request; never raises."""
        if self._failure is not None:
            return self._failure_reply(req, self._failure)
        if self.complete:
            error = _fail(LoginStatus.INITIATOR_ERROR, "Login Request after the login completed")
            return self._failure_reply(req, error)
        try:
            return self._step(req)
        except NegotiationError as exc:
            return self._record_failure(req, exc)
        except Exception as exc:  # last line of defence: a network peer must not crash us
            return self._record_failure(req, _fail(LoginStatus.TARGET_ERROR, f"bug: {exc!r}"))

    def _step(self, req: LoginRequestView) -> LoginReply:
        self._pdus += 1
        if self._pdus > MAX_LOGIN_PDUS:
            raise _fail(LoginStatus.INITIATOR_ERROR, f"more than {MAX_LOGIN_PDUS} Login Requests")
        self._check_ids(req)
        self._check_flags(req)
        if self._outgoing:
            return self._continue_response(req)
        try:
            pairs = self._assembler.feed(req.data, req.cont)
        except TextError as exc:
            raise _fail(LoginStatus.INITIATOR_ERROR, f"bad login text: {exc}") from None
        if pairs is None:
            return self._reply(req, b"", cont=False)
        return self._handle_text(req, pairs)

    # ------------------------------------------------------------ header checks

    def _check_ids(self, req: LoginRequestView) -> None:
        ids = (bytes(req.isid), req.tsih, req.cid)
        if self._ids is None:
            self._start(req)
            self._ids = ids
        elif ids != self._ids:
            raise _fail(LoginStatus.INITIATOR_ERROR, "ISID, TSIH or CID changed during login")

    def _start(self, req: LoginRequestView) -> None:
        if req.version_min > SUPPORTED_VERSION or req.version_max < SUPPORTED_VERSION:
            raise _fail(
                LoginStatus.UNSUPPORTED_VERSION,
                f"initiator versions {req.version_min}..{req.version_max}, target supports 0",
            )
        if self._leading is None:
            self._leading = req.tsih == 0
        if not self._leading and self._existing is None:
            raise _fail(LoginStatus.SESSION_DOES_NOT_EXIST, f"no session with TSIH {req.tsih}")

    def _check_flags(self, req: LoginRequestView) -> None:
        if req.csg not in (Stage.SECURITY, Stage.OPERATIONAL):
            raise _fail(LoginStatus.INITIATOR_ERROR, f"invalid CSG {req.csg}")
        if req.cont and req.transit:
            raise _fail(LoginStatus.INITIATOR_ERROR, "C and T bits both set")
        if req.transit and (
            req.nsg not in (Stage.OPERATIONAL, Stage.FULL_FEATURE) or req.nsg <= req.csg
        ):
            raise _fail(LoginStatus.INITIATOR_ERROR, f"invalid transition {req.csg}->{req.nsg}")
        if self._stage is None:
            self._stage = Stage(req.csg)
        elif req.csg != self._stage:
            raise _fail(
                LoginStatus.INITIATOR_ERROR,
                f"CSG {req.csg} while the login is in stage {self._stage}",
            )

    # ---------------------------------------------------------------- responses

    def _reply(
        self, req: LoginRequestView, data: bytes, *, cont: bool = False, transit: bool = False
    ) -> LoginReply:
        nsg = 0
        complete = False
        if transit:
            nsg, complete = self._advance()
        return LoginReply(transit, cont, req.csg, nsg, data, 0, 0, complete)

    def _advance(self) -> tuple[int, bool]:
        if self._stage is Stage.SECURITY:
            self._stage = Stage.OPERATIONAL
            return Stage.OPERATIONAL, False
        self._complete()
        return Stage.FULL_FEATURE, True

    def _continue_response(self, req: LoginRequestView) -> LoginReply:
        if req.data or req.cont:
            raise _fail(LoginStatus.INITIATOR_ERROR, "text sent while a response was continuing")
        return self._next_chunk(req)

    def _next_chunk(self, req: LoginRequestView) -> LoginReply:
        chunk = self._outgoing.pop(0)
        if self._outgoing:
            return self._reply(req, chunk, cont=True)
        return self._reply(req, chunk, transit=self._ready and req.transit)

    def _record_failure(self, req: LoginRequestView, error: NegotiationError) -> LoginReply:
        self._failure = error
        self._outgoing = []
        return self._failure_reply(req, error)

    def _failure_reply(self, req: LoginRequestView, error: NegotiationError) -> LoginReply:
        csg = req.csg if req.csg in (Stage.SECURITY, Stage.OPERATIONAL) else 0
        status = int(error.status)
        return LoginReply(False, False, csg, 0, b"", status >> 8, status & 0xFF, False)

    # --------------------------------------------------------------------- text

    def _handle_text(self, req: LoginRequestView, pairs: list[tuple[str, str]]) -> LoginReply:
        replies = self._process(pairs)
        self._ready = self._ready_to_transit(req, replies)
        self._outgoing = split_text(encode_text(replies), LOGIN_SEGMENT_BYTES)
        return self._next_chunk(req)

    def _process(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        assert self._stage is not None and self._leading is not None
        replies: list[tuple[str, str]] = []
        declared: list[tuple[str, str]] = []
        security: dict[str, str] = {}
        operational: list[tuple[str, str]] = []
        for key, value in pairs:
            spec = KEYS.get(key)
            if spec is None:
                replies.append((key, NOT_UNDERSTOOD))
                continue
            check_key_use(spec, self._stage, self._leading)
            if spec.kind is Kind.DECLARATIVE:
                declared.append((key, value))
            elif spec.kind is Kind.TARGET_ONLY:
                replies.append((key, REJECT))
            elif spec.kind is Kind.SECURITY:
                security[key] = value
            else:
                operational.append((key, value))
        first = self._declare(declared)
        return first + self._stage_replies(security, operational) + replies

    def _stage_replies(
        self, security: dict[str, str], operational: list[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        assert self._auth is not None and self._negotiator is not None
        if self._stage is Stage.SECURITY:
            if self._auth.required and not self._auth.done and not security:
                raise _fail(
                    LoginStatus.AUTHENTICATION_FAILED,
                    f"{self.initiator_name} sent no authentication keys; target requires CHAP",
                )
            return self._auth.process(security)
        return self._negotiator.declarations() + self._negotiator.respond(operational)

    def _ready_to_transit(self, req: LoginRequestView, replies: list[tuple[str, str]]) -> bool:
        assert self._auth is not None and self._negotiator is not None
        if not req.transit:
            return False
        if self._stage is Stage.SECURITY:
            return self._auth.done
        if self._negotiator.pending:
            self._negotiator.finish()  # raises: the offers were not answered
        offers = self._negotiator.offers()
        if offers:
            replies += offers
            return False
        self._negotiator.finish()
        return True

    # -------------------------------------------------------------- declaratives

    def _declare(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        first = self._auth is None
        for key, value in pairs:
            previous = self._declared.get(key)
            if previous is not None and previous != value:
                raise _fail(
                    LoginStatus.INITIATOR_ERROR,
                    f"{key} changed during login from {previous!r} to {value[:80]!r}",
                )
            self._declared[key] = value
        return self._first_text() if first else []

    def _first_text(self) -> list[tuple[str, str]]:
        """Checks of the first complete request; the first response's extra keys."""
        initiator = self._check_initiator()
        session_type = self._session_type()
        try:
            if session_type == "Normal":
                chap, mutual = self._normal_session(initiator)
            else:
                chap, mutual = self._directory.discovery_auth()
        except ChapError as exc:  # e.g. a configured secret that is too short
            raise _fail(LoginStatus.TARGET_ERROR, f"CHAP configuration: {exc}") from None
        self._auth = _Auth(chap, mutual, self._limits)
        if self._stage is Stage.OPERATIONAL and self._auth.required:
            raise _fail(
                LoginStatus.AUTHENTICATION_FAILED,
                f"{initiator} skipped security negotiation; target requires CHAP",
            )
        assert self._leading is not None
        self._negotiator = OperationalNegotiator(
            self._limits, leading=self._leading, session_type=session_type
        )
        return self._first_response_keys()

    def _check_initiator(self) -> str:
        initiator = self._declared.get("InitiatorName")
        if initiator is None:
            raise _fail(LoginStatus.MISSING_PARAMETER, "no InitiatorName in the first request")
        if not is_valid_iscsi_name(initiator):
            raise _fail(LoginStatus.INITIATOR_ERROR, f"invalid InitiatorName {initiator[:80]!r}")
        return initiator

    def _session_type(self) -> str:
        default = self._existing.session_type if self._existing else "Normal"
        session_type = self._declared.setdefault("SessionType", default)
        if session_type not in SESSION_TYPES:
            raise _fail(
                LoginStatus.SESSION_TYPE_NOT_SUPPORTED,
                f"{self.initiator_name} asked for SessionType={session_type[:40]}",
            )
        if not self._leading:
            self._check_existing(session_type)
        return session_type

    def _check_existing(self, session_type: str) -> None:
        existing = self._existing
        assert existing is not None
        if existing.session_type != "Normal":
            raise _fail(
                LoginStatus.CANT_INCLUDE_IN_SESSION, "a discovery session has one connection only"
            )
        if session_type != existing.session_type:
            raise _fail(LoginStatus.INITIATOR_ERROR, "SessionType differs from the session's")
        same_initiator = _same_name(self._declared["InitiatorName"], existing.initiator_name)
        target = self._declared.get("TargetName", "")
        if not same_initiator or not _same_name(target, existing.target_name or ""):
            raise _fail(
                LoginStatus.SESSION_DOES_NOT_EXIST,
                f"{self.initiator_name} has no session with {target[:80]!r} for this TSIH",
            )

    def _normal_session(self, initiator: str) -> tuple[ChapSecret | None, ChapSecret | None]:
        name = self._declared.get("TargetName")
        if name is None:
            raise _fail(LoginStatus.MISSING_PARAMETER, f"{initiator} sent no TargetName")
        policy = self._directory.target(name) if is_valid_iscsi_name(name) else None
        if policy is None:
            raise _fail(LoginStatus.TARGET_NOT_FOUND, f"{initiator} asked for unknown {name[:80]}")
        allowed = policy.allowed_initiators
        if allowed and not any(_same_name(initiator, entry) for entry in allowed):
            raise _fail(
                LoginStatus.AUTHORIZATION_FAILED,
                f"{initiator} is not in the access list of {policy.name}",
            )
        self.target = policy
        return policy.chap, policy.mutual_chap

    def _first_response_keys(self) -> list[tuple[str, str]]:
        if self.target is None:
            return []
        keys = [("TargetPortalGroupTag", str(self._portal_tpgt))]
        if self.target.alias:
            keys.append(("TargetAlias", self.target.alias))
        return keys

    # ------------------------------------------------------------------ results

    def _complete(self) -> None:
        assert self._negotiator is not None
        self.complete = True
        self._connection_params = self._negotiator.connection_params()
        if self._existing is not None and not self._leading:
            self._session_params = self._existing
            return
        self._session_params = self._negotiator.session_params(
            initiator_name=self._declared["InitiatorName"],
            target_name=self.target.name if self.target else None,
            initiator_alias=self._declared.get("InitiatorAlias"),
        )
