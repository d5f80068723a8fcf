"""Login key negotiation of an iSCSI target, the responder (RFC 7143 §6, §13).

Every key the target knows is described once in :data:`KEYS` (kind, range,
default, leading-only, irrelevant in discovery, the target's own value); the
answer to an offer comes from the function of its kind in :data:`_ANSWERS`:

* ``MIN`` / ``MAX``: numerical, the result is the smaller / larger value;
* ``AND`` / ``OR``: boolean result functions;
* ``LIST``: the first value of the offerer's list that we accept;
* ``DECLARED``: MaxRecvDataSegmentLength, each side declares its own;
* ``OBSOLETE_NO`` / ``OBSOLETE_IRRELEVANT``: the RFC 3720 markers, which RFC
  7143 dropped: answered ``No`` and ``Irrelevant``;
* ``DECLARATIVE`` / ``SECURITY`` / ``TARGET_ONLY`` / ``FFP_ONLY``: handled by
  the login state machine (names, session type, authentication), listed here
  for the stage checks.

Offers outside a key's range or that do not parse are answered ``Reject`` and
the key keeps its default.  Unknown keys, ``X-`` and ``X#`` keys are answered
``NotUnderstood``.  Leading-only keys on a non-leading connection, keys in the
wrong stage and keys negotiated twice are login failures (Initiator error).
When the RFC default of a key is not acceptable to the target (e.g. a
MaxBurstLength limit below 262144), the target offers its own value before
leaving the operational stage (:meth:`OperationalNegotiator.offers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum

from reservoir.agent.iscsi.chap import SUPPORTED_ALGORITHMS
from reservoir.agent.iscsi.errors import IscsiError
from reservoir.agent.iscsi.text import (
    IRRELEVANT,
    NO,
    NOT_UNDERSTOOD,
    REJECT,
    RESERVED_VALUES,
    TextError,
    format_boolean,
    parse_boolean,
    parse_list,
    parse_numerical,
)

MAX_DATA_SEGMENT = 2**24 - 1
ISCSI_PROTOCOL_LEVEL = 1  # RFC 7143 is level 1 (RFC 7144 §2.1)
DIGESTS = ("CRC32C", "None")
SESSION_TYPES = ("Normal", "Discovery")


class LoginStatus(IntEnum):
    """Login Response Status-Class << 8 | Status-Detail (RFC 7143 §11.13.5)."""

    SUCCESS = 0x0000
    INITIATOR_ERROR = 0x0200
    AUTHENTICATION_FAILED = 0x0201
    AUTHORIZATION_FAILED = 0x0202
    TARGET_NOT_FOUND = 0x0203
    TARGET_REMOVED = 0x0204
    UNSUPPORTED_VERSION = 0x0205
    TOO_MANY_CONNECTIONS = 0x0206
    MISSING_PARAMETER = 0x0207
    CANT_INCLUDE_IN_SESSION = 0x0208
    SESSION_TYPE_NOT_SUPPORTED = 0x0209
    SESSION_DOES_NOT_EXIST = 0x020A
    INVALID_DURING_LOGIN = 0x020B
    TARGET_ERROR = 0x0300
    SERVICE_UNAVAILABLE = 0x0301
    OUT_OF_RESOURCES = 0x0302


class NegotiationError(IscsiError):
    """The login must fail with ``status``; ``reason`` is for the logs."""

    def __init__(self, status: LoginStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Stage(IntEnum):
    SECURITY = 0
    OPERATIONAL = 1
    FULL_FEATURE = 3


class Kind(Enum):
    MIN = "min"
    MAX = "max"
    AND = "and"
    OR = "or"
    LIST = "list"
    DECLARED = "declared"
    OBSOLETE_NO = "obsolete-no"
    OBSOLETE_IRRELEVANT = "obsolete-irrelevant"
    DECLARATIVE = "declarative"
    SECURITY = "security"
    TARGET_ONLY = "target-only"
    FFP_ONLY = "ffp-only"


NEGOTIATED_KINDS = frozenset({Kind.MIN, Kind.MAX, Kind.AND, Kind.OR, Kind.LIST})
OPERATIONAL_KINDS = NEGOTIATED_KINDS | {Kind.DECLARED, Kind.OBSOLETE_NO, Kind.OBSOLETE_IRRELEVANT}


# ----------------------------------------------------------------------------
# configuration and results


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is outside {lo}..{hi}")


def _check_digests(name: str, values: tuple[str, ...]) -> None:
    if not values or any(value not in DIGESTS for value in values):
        raise ValueError(f"{name} must be a non-empty subset of {DIGESTS}, not {values}")


@dataclass(frozen=True)
class TargetLimits:
    """What the target accepts; the negotiation never goes beyond these.

    Booleans are the target's own value in the result function: ``True`` for
    ``data_pdu_in_order`` means the target needs in-order data (it answers
    Yes); ``initial_r2t=False`` lets the initiator choose; ``immediate_data``
    False forbids immediate data.  Digests list the accepted values.
    """

    max_recv_data_segment_length: int = 262144
    max_burst_length: int = 16776192
    first_burst_length: int = 262144
    max_connections: int = 8
    immediate_data: bool = True
    initial_r2t: bool = False
    max_outstanding_r2t: int = 16
    default_time2wait: int = 2
    default_time2retain: int = 20
    data_pdu_in_order: bool = True
    data_sequence_in_order: bool = True
    header_digest: tuple[str, ...] = DIGESTS
    data_digest: tuple[str, ...] = DIGESTS
    error_recovery_level: int = 0
    chap_algorithms: tuple[int, ...] = SUPPORTED_ALGORITHMS

    def __post_init__(self) -> None:
        _check_range(
            "max_recv_data_segment_length", self.max_recv_data_segment_length, 512, MAX_DATA_SEGMENT
        )
        _check_range("max_burst_length", self.max_burst_length, 512, MAX_DATA_SEGMENT)
        _check_range("first_burst_length", self.first_burst_length, 512, MAX_DATA_SEGMENT)
        _check_range("max_connections", self.max_connections, 1, 65535)
        _check_range("max_outstanding_r2t", self.max_outstanding_r2t, 1, 65535)
        _check_range("default_time2wait", self.default_time2wait, 0, 3600)
        _check_range("default_time2retain", self.default_time2retain, 0, 3600)
        _check_range("error_recovery_level", self.error_recovery_level, 0, 0)
        _check_digests("header_digest", self.header_digest)
        _check_digests("data_digest", self.data_digest)
        if not self.chap_algorithms or not set(self.chap_algorithms) <= set(SUPPORTED_ALGORITHMS):
            raise ValueError(f"chap_algorithms must be a subset of {SUPPORTED_ALGORITHMS}")


@dataclass(frozen=True)
class SessionParams:
    """Session-wide results (RFC 7143 defaults when a key was not negotiated)."""

    max_burst_length: int = 262144
    first_burst_length: int = 65536
    initial_r2t: bool = True
    immediate_data: bool = True
    max_outstanding_r2t: int = 1
    data_pdu_in_order: bool = True
    data_sequence_in_order: bool = True
    error_recovery_level: int = 0
    default_time2wait: int = 2
    default_time2retain: int = 20
    max_connections: int = 1
    session_type: str = "Normal"
    target_name: str | None = None
    initiator_name: str = ""
    initiator_alias: str | None = None


@dataclass(frozen=True)
class ConnectionParams:
    """Per-connection results.

    ``max_recv_data_segment_length_initiator`` is what the initiator declared
    (the most we may send in one PDU), ``..._target`` what we declared (the
    most we accept).
    """

    header_digest: bool = False
    data_digest: bool = False
    max_recv_data_segment_length_initiator: int = 8192
    max_recv_data_segment_length_target: int = 8192


# ----------------------------------------------------------------------------
# the key table

Ours = Callable[[TargetLimits, Mapping[str, str]], str]


def _const(value: str) -> Ours:
    return lambda _limits, _results: value


def _limit(attribute: str) -> Ours:
    def ours(limits: TargetLimits, _results: Mapping[str, str]) -> str:
        value = getattr(limits, attribute)
        if isinstance(value, bool):
            return format_boolean(value)
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)

    return ours


def _first_burst(limits: TargetLimits, results: Mapping[str, str]) -> str:
    cap = min(limits.first_burst_length, limits.max_burst_length)
    if "MaxBurstLength" in results:
        cap = min(cap, int(results["MaxBurstLength"]))
    return str(cap)


@dataclass(frozen=True)
class KeySpec:
    name: str
    kind: Kind
    default: str = ""
    lo: int = 0
    hi: int = 0
    leading_only: bool = False
    discovery_irrelevant: bool = False
    ours: Ours = field(default=_const(""), compare=False, repr=False)


_MDS = MAX_DATA_SEGMENT
# Session-wide, leading-only keys (RFC 7143 §13): name, result function,
# default, range, the TargetLimits attribute holding our value, whether the
# key still matters in a Discovery session (if not, it is answered Irrelevant).
_SESSION_KEYS: tuple[tuple[str, Kind, str, int, int, str, bool], ...] = (
    ("MaxConnections", Kind.MIN, "1", 1, 65535, "max_connections", False),
    ("InitialR2T", Kind.OR, "Yes", 0, 0, "initial_r2t", False),
    ("ImmediateData", Kind.AND, "Yes", 0, 0, "immediate_data", False),
    ("MaxBurstLength", Kind.MIN, "262144", 512, _MDS, "max_burst_length", False),
    ("FirstBurstLength", Kind.MIN, "65536", 512, _MDS, "", False),
    ("DefaultTime2Wait", Kind.MAX, "2", 0, 3600, "default_time2wait", True),
    ("DefaultTime2Retain", Kind.MIN, "20", 0, 3600, "default_time2retain", True),
    ("MaxOutstandingR2T", Kind.MIN, "1", 1, 65535, "max_outstanding_r2t", False),
    ("DataPDUInOrder", Kind.OR, "Yes", 0, 0, "data_pdu_in_order", False),
    ("DataSequenceInOrder", Kind.OR, "Yes", 0, 0, "data_sequence_in_order", False),
    ("ErrorRecoveryLevel", Kind.MIN, "0", 0, 2, "error_recovery_level", True),
    ("iSCSIProtocolLevel", Kind.MIN, "0", 0, 31, "", False),
)
_COMPUTED_OURS: dict[str, Ours] = {
    "FirstBurstLength": _first_burst,
    "iSCSIProtocolLevel": _const(str(ISCSI_PROTOCOL_LEVEL)),
}


def _session_specs() -> list[KeySpec]:
    return [
        KeySpec(
            name,
            kind,
            default,
            lo,
            hi,
            True,
            not in_discovery,
            _COMPUTED_OURS[name] if not attribute else _limit(attribute),
        )
        for name, kind, default, lo, hi, attribute, in_discovery in _SESSION_KEYS
    ]


def _spec_list() -> list[KeySpec]:
    return [
        KeySpec("SessionType", Kind.DECLARATIVE, "Normal", leading_only=True),
        KeySpec("InitiatorName", Kind.DECLARATIVE),
        KeySpec("TargetName", Kind.DECLARATIVE),
        KeySpec("InitiatorAlias", Kind.DECLARATIVE),
        KeySpec("TargetAlias", Kind.TARGET_ONLY),
        KeySpec("TargetAddress", Kind.TARGET_ONLY),
        KeySpec("TargetPortalGroupTag", Kind.TARGET_ONLY),
        KeySpec("SendTargets", Kind.FFP_ONLY),
        *(KeySpec(key, Kind.SECURITY) for key in SECURITY_KEYS),
        KeySpec("HeaderDigest", Kind.LIST, "None", ours=_limit("header_digest")),
        KeySpec("DataDigest", Kind.LIST, "None", ours=_limit("data_digest")),
        KeySpec(
            "MaxRecvDataSegmentLength",
            Kind.DECLARED,
            "8192",
            512,
            _MDS,
            ours=_limit("max_recv_data_segment_length"),
        ),
        *_session_specs(),
        KeySpec("IFMarker", Kind.OBSOLETE_NO, "No"),
        KeySpec("OFMarker", Kind.OBSOLETE_NO, "No"),
        KeySpec("IFMarkInt", Kind.OBSOLETE_IRRELEVANT),
        KeySpec("OFMarkInt", Kind.OBSOLETE_IRRELEVANT),
    ]


SECURITY_KEYS = ("AuthMethod", "CHAP_A", "CHAP_I", "CHAP_C", "CHAP_N", "CHAP_R")
KEYS: dict[str, KeySpec] = {spec.name: spec for spec in _spec_list()}
_ORDER = {name: index for index, name in enumerate(KEYS)}
DEFAULTS: dict[str, str] = {
    spec.name: spec.default for spec in KEYS.values() if spec.kind in NEGOTIATED_KINDS
}


def is_private_key(key: str) -> bool:
    """``X-`` vendor keys and ``X#`` IANA-registered extension keys."""
    return key.startswith(("X-", "X#"))


def check_key_use(spec: KeySpec, stage: Stage, leading: bool) -> None:
    """Fail the login when ``spec`` may not be sent now (RFC 7143 §6.3, §13)."""
    if spec.kind is Kind.FFP_ONLY:
        raise NegotiationError(
            LoginStatus.INITIATOR_ERROR, f"{spec.name} is for the full feature phase only"
        )
    if spec.kind is Kind.SECURITY and stage is not Stage.SECURITY:
        raise NegotiationError(
            LoginStatus.INITIATOR_ERROR, f"security key {spec.name} outside security negotiation"
        )
    if spec.kind in OPERATIONAL_KINDS and stage is not Stage.OPERATIONAL:
        raise NegotiationError(
            LoginStatus.INITIATOR_ERROR,
            f"operational key {spec.name} during security negotiation",
        )
    if spec.leading_only and not leading and spec.kind is not Kind.DECLARATIVE:
        raise NegotiationError(
            LoginStatus.INITIATOR_ERROR, f"leading-only key {spec.name} on a non-leading connection"
        )


# ----------------------------------------------------------------------------
# answers, one function per kind


def _answer_min(spec: KeySpec, offer: str, ours: str) -> str:
    return str(min(parse_numerical(offer, spec.lo, spec.hi), int(ours)))


def _answer_max(spec: KeySpec, offer: str, ours: str) -> str:
    return str(max(parse_numerical(offer, spec.lo, spec.hi), int(ours)))


def _answer_and(_spec: KeySpec, offer: str, ours: str) -> str:
    return format_boolean(parse_boolean(offer) and parse_boolean(ours))


def _answer_or(_spec: KeySpec, offer: str, ours: str) -> str:
    return format_boolean(parse_boolean(offer) or parse_boolean(ours))


def _answer_list(_spec: KeySpec, offer: str, ours: str) -> str:
    accepted = ours.split(",")
    return next((item for item in parse_list(offer) if item in accepted), REJECT)


def _answer_obsolete_no(_spec: KeySpec, offer: str, _ours: str) -> str:
    parse_boolean(offer)
    return NO


def _answer_irrelevant(_spec: KeySpec, _offer: str, _ours: str) -> str:
    return IRRELEVANT


_ANSWERS: dict[Kind, Callable[[KeySpec, str, str], str]] = {
    Kind.MIN: _answer_min,
    Kind.MAX: _answer_max,
    Kind.AND: _answer_and,
    Kind.OR: _answer_or,
    Kind.LIST: _answer_list,
    Kind.OBSOLETE_NO: _answer_obsolete_no,
    Kind.OBSOLETE_IRRELEVANT: _answer_irrelevant,
}


def answer(spec: KeySpec, offer: str, ours: str) -> str:
    """The responder's answer to ``offer``; ``Reject`` for a bad or reserved value."""
    if offer in RESERVED_VALUES:
        return REJECT
    try:
        return _ANSWERS[spec.kind](spec, offer, ours)
    except TextError:
        return REJECT


# ----------------------------------------------------------------------------
# results, for the side that offered


def outcome(key: str, offered: str, answered: str | None) -> str:
    """The value in force of ``key`` after we offered ``offered`` and the responder
    answered ``answered`` (RFC 7143 §13): the key's result function over both values,
    the one a responder computes its answer with, so an answer cannot give more than
    the offer allows (a larger MaxBurstLength, ImmediateData we said No to). No
    answer, or a reserved one (Reject, Irrelevant, NotUnderstood), counts as the
    key's default; a declared key (MaxRecvDataSegmentLength) is the responder's own
    value. Raises :class:`TextError` for an answer that does not parse, is out of the
    key's range, or picks a value we did not offer."""
    spec = KEYS[key]
    value = spec.default if answered is None or answered in RESERVED_VALUES else answered
    if spec.kind is Kind.DECLARED:
        return str(parse_numerical(value, spec.lo, spec.hi))
    result = _ANSWERS[spec.kind](spec, value, offered)
    if result == REJECT:
        raise TextError(f"{key}={value[:40]} is none of the values offered ({offered})")
    return result


# ----------------------------------------------------------------------------
# the negotiator


class OperationalNegotiator:
    """Operational stage of one connection's login, target side.

    Feed it the operational keys of each complete request text with
    :meth:`respond`; when the initiator wants to leave the stage call
    :meth:`offers` (keys the target must propose itself) and, once nothing is
    outstanding, :meth:`finish`.  Errors are :class:`NegotiationError`.
    """

    def __init__(
        self, limits: TargetLimits, *, leading: bool = True, session_type: str = "Normal"
    ) -> None:
        self.limits = limits
        self.leading = leading
        self.session_type = session_type
        self._results: dict[str, str] = {}
        self._seen: set[str] = set()
        self._offered: dict[str, str] = {}
        self._initiator_mrdsl = 8192
        self._declared = False

    @property
    def pending(self) -> bool:
        """True while offers of the target wait for the initiator's answer."""
        return bool(self._offered)

    def _irrelevant(self, spec: KeySpec) -> bool:
        return spec.discovery_irrelevant and self.session_type == "Discovery"

    def _ours(self, spec: KeySpec) -> str:
        return spec.ours(self.limits, self._results)

    def respond(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """Answers to the operational keys in ``pairs`` (table order)."""
        ordered = sorted(pairs, key=lambda pair: _ORDER.get(pair[0], len(_ORDER)))
        replies: list[tuple[str, str]] = []
        for key, value in ordered:
            reply = self._respond_one(key, value)
            if reply is not None:
                replies.append((key, reply))
        return replies

    def _respond_one(self, key: str, value: str) -> str | None:
        spec = KEYS.get(key)
        if spec is None or spec.kind not in OPERATIONAL_KINDS:
            return NOT_UNDERSTOOD
        if key in self._offered:
            self._take_response(spec, value)
            return None
        if key in self._seen:
            raise NegotiationError(LoginStatus.INITIATOR_ERROR, f"key {key} negotiated twice")
        check_key_use(spec, Stage.OPERATIONAL, self.leading)
        self._seen.add(key)
        if self._irrelevant(spec):
            return IRRELEVANT
        if spec.kind is Kind.DECLARED:
            return self._declared_value(spec, value)
        reply = answer(spec, value, self._ours(spec))
        if spec.kind in NEGOTIATED_KINDS and reply != REJECT:
            self._results[key] = reply
        return reply

    def _declared_value(self, spec: KeySpec, value: str) -> str | None:
        try:
            self._initiator_mrdsl = parse_numerical(value, spec.lo, spec.hi)
        except TextError:
            return REJECT
        return None

    def _take_response(self, spec: KeySpec, value: str) -> None:
        offered = self._offered.pop(spec.name)
        self._seen.add(spec.name)
        if value == IRRELEVANT:
            self._results[spec.name] = offered
            return
        if value in RESERVED_VALUES or answer(spec, value, offered) != value:
            raise NegotiationError(
                LoginStatus.INITIATOR_ERROR,
                f"initiator answered {spec.name}={value[:40]} to our offer {offered}",
            )
        self._results[spec.name] = value

    def declarations(self) -> list[tuple[str, str]]:
        """The target's own MaxRecvDataSegmentLength, once per connection."""
        if self._declared:
            return []
        self._declared = True
        return [("MaxRecvDataSegmentLength", str(self.limits.max_recv_data_segment_length))]

    def _needs_offer(self, spec: KeySpec) -> bool:
        if spec.kind not in NEGOTIATED_KINDS or spec.name in self._seen:
            return False
        if (spec.leading_only and not self.leading) or self._irrelevant(spec):
            return False
        return answer(spec, spec.default, self._ours(spec)) != spec.default

    def offers(self) -> list[tuple[str, str]]:
        """Keys whose RFC default the target cannot accept: offer our value."""
        fresh = [
            (spec.name, self._ours(spec))
            for spec in KEYS.values()
            if spec.name not in self._offered and self._needs_offer(spec)
        ]
        self._offered.update(fresh)
        return fresh

    def _check_result(self, spec: KeySpec) -> None:
        value = self._value(spec.name)
        if answer(spec, value, self._ours(spec)) != value:
            raise NegotiationError(
                LoginStatus.INITIATOR_ERROR,
                f"{spec.name}={value} is not acceptable to the target",
            )

    def finish(self) -> None:
        """Check that every result is within the target's limits."""
        if self._offered:
            missing = ", ".join(sorted(self._offered))
            raise NegotiationError(
                LoginStatus.INITIATOR_ERROR, f"initiator did not answer the offer of {missing}"
            )
        for spec in KEYS.values():
            relevant = not self._irrelevant(spec) and (self.leading or not spec.leading_only)
            if spec.kind in NEGOTIATED_KINDS and relevant:
                self._check_result(spec)

    def _value(self, key: str) -> str:
        """The result of ``key``; FirstBurstLength never exceeds MaxBurstLength."""
        value = self._results.get(key, KEYS[key].default)
        if key == "FirstBurstLength":
            return str(min(int(value), int(self._value("MaxBurstLength"))))
        return value

    def _int(self, key: str) -> int:
        return int(self._value(key))

    def _bool(self, key: str) -> bool:
        return parse_boolean(self._value(key))

    def session_params(
        self, *, initiator_name: str, target_name: str | None, initiator_alias: str | None
    ) -> SessionParams:
        """The session-wide results (RFC defaults for keys not negotiated)."""
        common = SessionParams(
            error_recovery_level=self._int("ErrorRecoveryLevel"),
            default_time2wait=self._int("DefaultTime2Wait"),
            default_time2retain=self._int("DefaultTime2Retain"),
            session_type=self.session_type,
            target_name=target_name,
            initiator_name=initiator_name,
            initiator_alias=initiator_alias,
        )
        if self.session_type == "Discovery":
            return common
        return replace(
            common,
            max_burst_length=self._int("MaxBurstLength"),
            first_burst_length=self._int("FirstBurstLength"),
            initial_r2t=self._bool("InitialR2T"),
            immediate_data=self._bool("ImmediateData"),
            max_outstanding_r2t=self._int("MaxOutstandingR2T"),
            data_pdu_in_order=self._bool("DataPDUInOrder"),
            data_sequence_in_order=self._bool("DataSequenceInOrder"),
            max_connections=self._int("MaxConnections"),
        )

    def connection_params(self) -> ConnectionParams:
        return ConnectionParams(
            header_digest=self._value("HeaderDigest") == "CRC32C",
            data_digest=self._value("DataDigest") == "CRC32C",
            max_recv_data_segment_length_initiator=self._initiator_mrdsl,
            max_recv_data_segment_length_target=(
                self.limits.max_recv_data_segment_length if self._declared else 8192
            ),
        )
