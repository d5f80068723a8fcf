"""Login (RFC 7143 §6.3, §11.12-11.13): CHAP security stage, operational negotiation.

:func:`resolve` turns what we offered and what the target answered into the
parameters in force with the key table and result functions of RFC 7143 §13 that
the target answers with (:func:`reservoir.agent.iscsi.negotiation.outcome`): min
for lengths, OR for InitialR2T, AND for ImmediateData, one of our values for
digests, the target's declaration for its MaxRecvDataSegmentLength.
"""

from __future__ import annotations

from dataclasses import dataclass

from reservoir.agent.initiator._errors import LoginError
from reservoir.agent.initiator._transport import Mailbox, PduTransport
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.chap import ChapAuthError, ChapInitiator, ChapSecret
from reservoir.agent.iscsi.negotiation import KEYS, OPERATIONAL_KINDS, Kind, outcome
from reservoir.agent.iscsi.negotiation import answer as responders_answer
from reservoir.agent.iscsi.text import TextError, encode_text, parse_text

MAX_LENGTH = (1 << 24) - 1  # the largest value of the 24-bit length keys (RFC 7143 §13)
_MAX_STEPS = 16


@dataclass(frozen=True, slots=True)
class LoginOptions:
    """What the initiator asks for (RFC 7143 §13 keys)."""

    initiator_name: str
    target_name: str | None
    chap: tuple[str, str] | None = None
    mutual_chap: tuple[str, str] | None = None
    header_digest: bool = False
    data_digest: bool = False
    max_recv_data_segment_length: int = MAX_LENGTH
    max_burst_length: int = MAX_LENGTH
    first_burst_length: int = MAX_LENGTH
    immediate_data: bool = True
    initial_r2t: bool = False
    timeout: float = 10.0

    def operational_keys(self) -> list[tuple[str, str]]:
        """The keys of the operational stage (session-wide ones only for Normal)."""
        keys = [
            ("HeaderDigest", "CRC32C,None" if self.header_digest else "None"),
            ("DataDigest", "CRC32C,None" if self.data_digest else "None"),
            ("MaxRecvDataSegmentLength", str(self.max_recv_data_segment_length)),
        ]
        if self.target_name is None:
            return keys
        first = min(self.first_burst_length, self.max_burst_length)
        return [
            *keys,
            ("ImmediateData", "Yes" if self.immediate_data else "No"),
            ("InitialR2T", "Yes" if self.initial_r2t else "No"),
            ("MaxBurstLength", str(self.max_burst_length)),
            ("FirstBurstLength", str(first)),
            ("MaxOutstandingR2T", "1"),
            ("ErrorRecoveryLevel", "0"),
            ("DataPDUInOrder", "Yes"),
            ("DataSequenceInOrder", "Yes"),
        ]


@dataclass(frozen=True, slots=True)
class Negotiated:
    """Parameters in force after login.

    ``target_max_recv_data_segment_length`` bounds every data segment we send;
    ``max_recv_data_segment_length`` is what the target may send us.
    """

    header_digest: bool = False
    data_digest: bool = False
    max_recv_data_segment_length: int = 8192
    target_max_recv_data_segment_length: int = 8192
    max_burst_length: int = 262144
    first_burst_length: int = 65536
    immediate_data: bool = True
    initial_r2t: bool = True
    max_outstanding_r2t: int = 1


# what this initiator answers to a key the target offers and it did not: one
# connection a session, no error recovery beyond level 0; each key's default else
_OWN_VALUES = {"MaxConnections": "1", "ErrorRecoveryLevel": "0"}
_ANSWERED_KINDS = OPERATIONAL_KINDS - {Kind.DECLARED}


def answer_offers(pairs: list[tuple[str, str]], sent: set[str]) -> list[tuple[str, str]]:
    """Our answers to the operational keys in ``pairs`` that the target offered and we
    did not (RFC 7143 §6.2: every offered key is answered), by the target's own table
    (:func:`~reservoir.agent.iscsi.negotiation.answer`)."""
    replies = []
    for key, value in pairs:
        spec = KEYS.get(key)
        if key in sent or spec is None or spec.kind not in _ANSWERED_KINDS:
            continue
        replies.append((key, responders_answer(spec, value, _OWN_VALUES.get(key, spec.default))))
    return replies


def resolve(offer: LoginOptions, answers: dict[str, str]) -> Negotiated:
    """The parameters in force: :func:`~reservoir.agent.iscsi.negotiation.outcome` of
    each key we offered and the target's answer (the target's table, applied from the
    offering side)."""
    offered = dict(offer.operational_keys())

    def value(key: str) -> str:
        try:
            return outcome(key, offered.get(key, KEYS[key].default), answers.get(key))
        except TextError as exc:
            raise LoginError(0, 0, f"target answered {key}: {exc}") from None

    burst = int(value("MaxBurstLength"))
    return Negotiated(
        header_digest=value("HeaderDigest") == "CRC32C",
        data_digest=value("DataDigest") == "CRC32C",
        max_recv_data_segment_length=offer.max_recv_data_segment_length,
        target_max_recv_data_segment_length=int(value("MaxRecvDataSegmentLength")),
        max_burst_length=burst,
        first_burst_length=min(int(value("FirstBurstLength")), burst),
        immediate_data=value("ImmediateData") == "Yes",
        initial_r2t=value("InitialR2T") == "Yes",
        max_outstanding_r2t=int(value("MaxOutstandingR2T")),
    )


@dataclass(slots=True)
class LoginResult:
    """What a successful login leaves: parameters and the sequence numbers in force."""

    params: Negotiated
    tsih: int
    exp_statsn: int
    exp_cmdsn: int
    max_cmdsn: int
    answers: dict[str, str]


class LoginExchange:
    """One login on one connection (RFC 7143 §6.3): the stages, request by request."""

    def __init__(
        self,
        transport: PduTransport,
        mailbox: Mailbox,
        options: LoginOptions,
        *,
        isid: bytes,
        tsih: int = 0,
        cid: int = 0,
        cmdsn: int = 1,
    ) -> None:
        self.transport = transport
        self.mailbox = mailbox
        self.options = options
        self.isid, self.tsih, self.cid, self.cmdsn = isid, tsih, cid, cmdsn
        self.exp_statsn = 0
        self.itt = 0
        self.answers: dict[str, str] = {}

    def _first_keys(self) -> list[tuple[str, str]]:
        keys = [("InitiatorName", self.options.initiator_name)]
        if self.options.target_name is None:
            return [*keys, ("SessionType", "Discovery")]
        return [*keys, ("SessionType", "Normal"), ("TargetName", self.options.target_name)]

    async def run(self) -> LoginResult:
        first = self._first_keys()
        if self.options.chap is not None:
            await self._security(first)
            first = []
        keys = first + self.options.operational_keys()
        sent = {key for key, _ in keys}
        answer = await self._step(keys, csg=1, nsg=3, transit=True)
        for _ in range(_MAX_STEPS):
            if answer.transit and answer.nsg == P.Stage.FULL_FEATURE:
                return self._result(answer)
            # a target that offers keys of its own (LIO: MaxConnections,
            # DefaultTime2Wait, ...) stays in this stage until each is answered
            replies = answer_offers(parse_text(bytes(answer.data)), sent)
            sent |= {key for key, _ in replies}
            answer = await self._step(replies, csg=1, nsg=3, transit=True)
        raise LoginError(0, 0, "target never reached the full feature phase")

    def _result(self, answer: P.LoginResponse) -> LoginResult:
        params = resolve(self.options, self.answers)
        return LoginResult(
            params, answer.tsih, self.exp_statsn, answer.expcmdsn, answer.maxcmdsn, self.answers
        )

    async def _security(self, first: list[tuple[str, str]]) -> None:
        """CHAP (RFC 7143 §12.1.3): offer, challenge, response, optional mutual check."""
        assert self.options.chap is not None
        mutual = self.options.mutual_chap
        chap = ChapInitiator(
            ChapSecret(*self.options.chap), ChapSecret(*mutual) if mutual else None
        )
        answer = await self._step([*first, ("AuthMethod", "CHAP")], csg=0, nsg=1, transit=False)
        if self.answers.get("AuthMethod") != "CHAP":
            raise LoginError(0, 0, f"target refused CHAP: {self.answers.get('AuthMethod')}")
        answer = await self._step([("CHAP_A", chap.algorithms_offer())], csg=0, nsg=1)
        try:
            reply = chap.respond(dict(parse_text(bytes(answer.data))))
            answer = await self._step(reply, csg=0, nsg=1, transit=True)
            if mutual is not None:
                chap.verify_target(dict(parse_text(bytes(answer.data))))
        except ChapAuthError as exc:
            raise LoginError(0, 0, f"CHAP: {exc}") from exc

    async def _step(
        self, pairs: list[tuple[str, str]], *, csg: int, nsg: int, transit: bool = False
    ) -> P.LoginResponse:
        request = P.LoginRequest(
            transit=transit,
            csg=csg,
            nsg=nsg,
            isid=self.isid,
            tsih=self.tsih,
            cid=self.cid,
            itt=self.itt,
            cmdsn=self.cmdsn,
            expstatsn=self.exp_statsn,
            data=encode_text(pairs),
        )
        self.transport.send(request)
        answer = await self._receive()
        self.exp_statsn = (answer.statsn + 1) & 0xFFFFFFFF
        if answer.status_class:
            raise LoginError(answer.status_class, answer.status_detail)
        self.answers.update(parse_text(bytes(answer.data), allow_duplicates=True))
        return answer

    async def _receive(self) -> P.LoginResponse:
        try:
            answer = await self.mailbox.recv(self.options.timeout)
        except TimeoutError:
            raise LoginError(0, 0, "no login response from target") from None
        except ConnectionError:
            raise LoginError(0, 0, "target closed the connection during login") from None
        if not isinstance(answer, P.LoginResponse):
            raise LoginError(0, 0, f"unexpected {type(answer).__name__} during login")
        return answer
