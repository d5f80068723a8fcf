"""Bounded fuzzing of the target login state machine and the text parser.

The login negotiator faces the network before any authentication, so it must
answer every sequence of Login Requests with a well-formed reply, never raise,
never leak a secret and never grant a login it should not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reservoir.agent.iscsi.chap import ChapAuthError, ChapInitiator, ChapSecret
from reservoir.agent.iscsi.login import (
    LOGIN_SEGMENT_BYTES,
    LoginNegotiator,
    LoginReply,
    LoginRequestView,
    LoginStatus,
    TargetPolicy,
)
from reservoir.agent.iscsi.negotiation import KEYS, SessionParams, TargetLimits
from reservoir.agent.iscsi.text import TextError, encode_text, parse_text

pytestmark = pytest.mark.fuzz

INITIATOR_NAME = "iqn.2024-01.org.example:host1"
TARGET_NAME = "iqn.2024-01.org.example:vol1"
INITIATOR = ChapSecret("host1", "fuzz-initiator-secret")
TARGET = ChapSecret("vol1", "fuzz-target-secret")
SECRETS = (INITIATOR.secret, TARGET.secret)
ISIDS = (bytes.fromhex("400001370000"), bytes(6))
FUZZ = settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Directory:
    def __init__(self, target: TargetPolicy, discovery: ChapSecret | None) -> None:
        self._target = target
        self._discovery = discovery

    def target(self, name: str) -> TargetPolicy | None:
        return self._target if name == self._target.name else None

    def discovery_auth(self) -> tuple[ChapSecret | None, ChapSecret | None]:
        return self._discovery, None


def make_policy(chap: bool, mutual: bool, acl: bool) -> TargetPolicy:
    return TargetPolicy(
        name=TARGET_NAME,
        alias="fuzz",
        chap=INITIATOR if chap else None,
        mutual_chap=TARGET if mutual else None,
        allowed_initiators=frozenset({INITIATOR_NAME}) if acl else frozenset(),
        portals=(("192.0.2.1", 3260, 1),),
    )


# ------------------------------------------------------------------ strategies

key_names = st.one_of(
    st.sampled_from(sorted(KEYS)),
    st.sampled_from(["X-com.example.k", "X#org.example", "Unknown", "iSCSIProtocolLevel"]),
)
key_values = st.one_of(
    st.sampled_from(
        [
            INITIATOR_NAME,
            TARGET_NAME,
            "Normal",
            "Discovery",
            "CHAP",
            "None",
            "CHAP,None",
            "CRC32C,None",
            "Yes",
            "No",
            "0",
            "1",
            "5",
            "7,5",
            "512",
            "65536",
            "16777216",
            "0x10",
            "0x" + "ab" * 16,
            "0b" + "A" * 24,
            "Reject",
            "Irrelevant",
            "NotUnderstood",
            "",
        ]
    ),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30),
)
random_pairs = st.lists(st.tuples(key_names, key_values), max_size=8).map(
    lambda pairs: list(dict(pairs).items())
)
declarations = st.sampled_from(
    [
        [("InitiatorName", INITIATOR_NAME), ("TargetName", TARGET_NAME)],
        [("InitiatorName", INITIATOR_NAME), ("SessionType", "Discovery")],
        [("InitiatorName", INITIATOR_NAME), ("TargetName", TARGET_NAME), ("AuthMethod", "None")],
        [("InitiatorName", INITIATOR_NAME), ("TargetName", TARGET_NAME), ("AuthMethod", "CHAP")],
    ]
)


def _join(first: list[tuple[str, str]], extra: list[tuple[str, str]]) -> bytes:
    return encode_text(list({**dict(first), **dict(extra)}.items()))


texts = st.one_of(
    random_pairs.map(encode_text),
    st.builds(_join, declarations, random_pairs),
    st.binary(max_size=200),
)
requests = st.builds(
    LoginRequestView,
    transit=st.booleans(),
    cont=st.sampled_from([False, False, False, True]),
    csg=st.sampled_from([0, 0, 1, 1, 1, 2, 3]),
    nsg=st.sampled_from([1, 3, 3, 0, 2]),
    version_max=st.integers(0, 2),
    version_min=st.sampled_from([0, 0, 0, 0, 0, 1]),
    isid=st.sampled_from([ISIDS[0]] * 4 + [ISIDS[1]]),
    tsih=st.sampled_from([0] * 6 + [1, 0xFFFF]),
    cid=st.sampled_from([1] * 5 + [0]),
    data=texts,
)


def check_reply(neg: LoginNegotiator, req: LoginRequestView, reply: LoginReply) -> None:
    assert isinstance(reply, LoginReply)
    assert reply.status == 0 or reply.status in set(LoginStatus)
    assert len(reply.data) <= LOGIN_SEGMENT_BYTES
    assert not (reply.cont and reply.transit)
    if reply.transit:
        assert req.transit
        assert reply.nsg > reply.csg
    if reply.status:
        assert not reply.transit and not reply.complete and reply.data == b""
        assert neg.failed or neg.complete  # a request after completion is refused too
    if reply.complete:
        assert reply.transit and reply.nsg == 3
        assert neg.session_params.initiator_name
    reason = neg.failure_reason or ""
    assert "bug" not in reason
    assert not any(secret in reason for secret in SECRETS)


def run(neg: LoginNegotiator, sequence: list[LoginRequestView]) -> None:
    failed = False
    for req in sequence:
        reply = neg.step(req)
        check_reply(neg, req, reply)
        if failed:
            assert reply.status  # a failed login stays failed
        failed = failed or bool(reply.status)


# ------------------------------------------------------------------ random requests


HONEST_START = LoginRequestView(
    True,
    False,
    0,
    1,
    0,
    0,
    ISIDS[0],
    0,
    1,
    encode_text([("InitiatorName", INITIATOR_NAME), ("TargetName", TARGET_NAME)]),
)


@FUZZ
@given(
    st.lists(requests, min_size=1, max_size=8),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["leading", "existing", "honest start"]),
)
def test_random_request_sequences(
    sequence: list[LoginRequestView], chap: bool, mutual: bool, acl: bool, start: str
) -> None:
    directory = Directory(make_policy(chap, mutual, acl), INITIATOR if chap else None)
    params = SessionParams(target_name=TARGET_NAME, initiator_name=INITIATOR_NAME)
    existing = params if start == "existing" else None
    neg = LoginNegotiator(directory, TargetLimits(), portal_tpgt=1, existing=existing)
    if start == "honest start":
        sequence = [HONEST_START, *sequence]
    run(neg, sequence)


# ------------------------------------------------------------------ mutated good logins


def _honest_request(
    step: int, reply: LoginReply | None, initiator: ChapInitiator
) -> LoginRequestView:
    first = [("InitiatorName", INITIATOR_NAME), ("TargetName", TARGET_NAME)]
    pairs: list[tuple[str, str]]
    csg, nsg, transit = 0, 1, True
    if step == 0:
        pairs = [*first, ("SessionType", "Normal"), ("AuthMethod", "CHAP,None")]
    elif step == 1:
        pairs, transit = [("CHAP_A", initiator.algorithms_offer())], False
    elif step == 2 and reply is not None:
        try:
            pairs = initiator.respond(dict(parse_text(reply.data)))
        except (TextError, ChapAuthError):
            pairs = [("CHAP_N", "host1"), ("CHAP_R", "0x00")]
    else:
        pairs, csg, nsg = [("MaxBurstLength", "65536"), ("HeaderDigest", "CRC32C,None")], 1, 3
    return LoginRequestView(transit, False, csg, nsg, 0, 0, ISIDS[0], 0, 1, encode_text(pairs))


Mutation = Callable[[LoginRequestView], LoginRequestView]


def _flip(index: int) -> Mutation:
    def flip(req: LoginRequestView) -> LoginRequestView:
        if not req.data:
            return req
        at = index % len(req.data)
        data = req.data[:at] + bytes([req.data[at] ^ 0x41]) + req.data[at + 1 :]
        return replace(req, data=data)

    return flip


mutations: st.SearchStrategy[Mutation] = st.one_of(
    st.builds(lambda v: lambda r: replace(r, transit=v), st.booleans()),
    st.builds(lambda v: lambda r: replace(r, cont=v), st.booleans()),
    st.builds(lambda v: lambda r: replace(r, csg=v), st.integers(0, 3)),
    st.builds(lambda v: lambda r: replace(r, nsg=v), st.integers(0, 3)),
    st.builds(lambda v: lambda r: replace(r, tsih=v), st.integers(0, 3)),
    st.builds(lambda v: lambda r: replace(r, data=r.data[:v]), st.integers(0, 200)),
    st.builds(lambda v: lambda r: replace(r, data=r.data + v), texts),
    st.builds(_flip, st.integers(0, 10_000)),
)


@FUZZ
@given(
    st.dictionaries(st.integers(0, 4), mutations, max_size=2),
    st.booleans(),
    st.sampled_from([(5,), (7, 5), (8,), (6, 5)]),
)
def test_mutated_chap_logins(
    mutated: dict[int, Mutation], mutual: bool, algorithms: tuple[int, ...]
) -> None:
    directory = Directory(make_policy(True, True, True), None)
    neg = LoginNegotiator(directory, TargetLimits(), portal_tpgt=1)
    initiator = ChapInitiator(INITIATOR, TARGET if mutual else None, algorithms=algorithms)
    reply: LoginReply | None = None
    for step in range(5):
        req = _honest_request(step, reply, initiator)
        if step in mutated:
            req = mutated[step](req)
        reply = neg.step(req)
        check_reply(neg, req, reply)
        if reply.status or reply.complete:
            break
    assert reply is not None
    if reply.complete:
        assert neg.authenticated_user == "host1"  # nobody gets in without the secret
    if not mutated:
        assert reply.complete


@FUZZ
@given(st.binary(max_size=2000))
def test_text_parser(data: bytes) -> None:
    try:
        pairs = parse_text(data)
    except TextError:
        return
    assert encode_text(pairs) == data.rstrip(b"\x00") + (b"\x00" if pairs else b"")
