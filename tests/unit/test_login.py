"""The target login state machine (RFC 7143 §6.3, §11.12, §11.13), driven PDU by PDU."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reservoir.agent.iscsi.chap import ChapInitiator, ChapSecret
from reservoir.agent.iscsi.login import (
    LoginNegotiator,
    LoginReply,
    LoginRequestView,
    LoginStatus,
    TargetPolicy,
    is_valid_iscsi_name,
)
from reservoir.agent.iscsi.negotiation import SessionParams, TargetLimits
from reservoir.agent.iscsi.text import encode_text, parse_text

ISID = bytes.fromhex("400001370000")
INITIATOR_NAME = "iqn.2024-01.org.example:host1"
TARGET_NAME = "iqn.2024-01.org.example:vol1"
INITIATOR = ChapSecret("host1", "initiator-secret")
TARGET = ChapSecret("vol1", "target-secret-1")
FIRST = [("InitiatorName", INITIATOR_NAME), ("TargetName", TARGET_NAME), ("SessionType", "Normal")]
Pairs = list[tuple[str, str]]


class Directory:
    def __init__(
        self,
        *policies: TargetPolicy,
        discovery: tuple[ChapSecret | None, ChapSecret | None] = (None, None),
    ) -> None:
        self.policies = {policy.name: policy for policy in policies}
        self.discovery = discovery

    def target(self, name: str) -> TargetPolicy | None:
        return self.policies.get(name)

    def discovery_auth(self) -> tuple[ChapSecret | None, ChapSecret | None]:
        return self.discovery


def policy(**changes: Any) -> TargetPolicy:
    base = TargetPolicy(
        name=TARGET_NAME,
        alias=None,
        chap=None,
        mutual_chap=None,
        allowed_initiators=frozenset(),
        portals=(("192.0.2.1", 3260, 1),),
    )
    return replace(base, **changes)


def negotiator(
    directory: Directory | None = None, limits: TargetLimits | None = None, **kwargs: Any
) -> LoginNegotiator:
    return LoginNegotiator(
        directory or Directory(policy()), limits or TargetLimits(), portal_tpgt=7, **kwargs
    )


def request(
    pairs: Pairs = (),  # type: ignore[assignment]
    *,
    data: bytes | None = None,
    csg: int = 1,
    nsg: int = 3,
    transit: bool = True,
    cont: bool = False,
    tsih: int = 0,
    cid: int = 1,
    isid: bytes = ISID,
    version_min: int = 0,
    version_max: int = 0,
) -> LoginRequestView:
    return LoginRequestView(
        transit=transit,
        cont=cont,
        csg=csg,
        nsg=nsg,
        version_max=version_max,
        version_min=version_min,
        isid=isid,
        tsih=tsih,
        cid=cid,
        data=encode_text(pairs) if data is None else data,
    )


def keys(reply: LoginReply) -> dict[str, str]:
    return dict(parse_text(reply.data))


def assert_ok(reply: LoginReply) -> None:
    assert (reply.status_class, reply.status_detail) == (0, 0)


def assert_fails(neg: LoginNegotiator, reply: LoginReply, status: LoginStatus) -> None:
    assert reply.status == status, neg.failure_reason
    assert not reply.transit
    assert not reply.complete
    assert reply.data == b""
    assert neg.failed
    assert neg.failure_status == status
    assert neg.failure_reason


def chap_exchange(
    neg: LoginNegotiator, initiator: ChapInitiator, first: Pairs = FIRST
) -> LoginReply:
    reply = neg.step(request([*first, ("AuthMethod", "CHAP,None")], csg=0, nsg=1))
    assert_ok(reply)
    assert keys(reply)["AuthMethod"] == "CHAP"
    assert not reply.transit  # more to do within the stage
    reply = neg.step(
        request([("CHAP_A", initiator.algorithms_offer())], csg=0, nsg=1, transit=False)
    )
    assert_ok(reply)
    assert not reply.transit
    return neg.step(request(initiator.respond(keys(reply)), csg=0, nsg=1))


# ------------------------------------------------------------------ no authentication


def test_operational_only_login() -> None:
    neg = negotiator()
    offer = [
        *FIRST,
        ("HeaderDigest", "CRC32C,None"),
        ("DataDigest", "None"),
        ("MaxRecvDataSegmentLength", "65536"),
        ("MaxBurstLength", "1048576"),
        ("FirstBurstLength", "262144"),
        ("InitialR2T", "No"),
        ("ImmediateData", "Yes"),
        ("MaxConnections", "4"),
        ("ErrorRecoveryLevel", "0"),
    ]
    reply = neg.step(request(offer))
    assert_ok(reply)
    assert (reply.transit, reply.cont, reply.csg, reply.nsg, reply.complete) == (
        True,
        False,
        1,
        3,
        True,
    )
    answer = keys(reply)
    assert answer["TargetPortalGroupTag"] == "7"
    assert answer["MaxRecvDataSegmentLength"] == "262144"
    assert answer["HeaderDigest"] == "CRC32C"
    assert answer["MaxBurstLength"] == "1048576"
    assert answer["MaxConnections"] == "4"
    assert "InitiatorName" not in answer and "TargetName" not in answer
    assert neg.complete
    assert neg.session_type == "Normal"
    assert neg.initiator_name == INITIATOR_NAME
    assert neg.target is not None and neg.target.name == TARGET_NAME
    assert neg.authenticated_user is None
    assert neg.leading is True
    params = neg.session_params
    assert (params.max_burst_length, params.first_burst_length) == (1048576, 262144)
    assert (params.initial_r2t, params.immediate_data, params.max_connections) == (False, True, 4)
    assert params.target_name == TARGET_NAME and params.initiator_name == INITIATOR_NAME
    conn = neg.connection_params
    assert (conn.header_digest, conn.data_digest) == (True, False)
    assert conn.max_recv_data_segment_length_initiator == 65536
    assert conn.max_recv_data_segment_length_target == 262144


def test_security_stage_without_authentication() -> None:
    neg = negotiator(Directory(policy(alias="disk one")))
    reply = neg.step(request([*FIRST, ("AuthMethod", "None")], csg=0, nsg=1))
    assert_ok(reply)
    assert (reply.transit, reply.csg, reply.nsg) == (True, 0, 1)
    assert keys(reply) == {
        "TargetPortalGroupTag": "7",
        "TargetAlias": "disk one",
        "AuthMethod": "None",
    }
    reply = neg.step(request([("MaxBurstLength", "65536")]))
    assert_ok(reply)
    assert reply.complete
    assert "TargetPortalGroupTag" not in keys(reply)  # only in the first response
    assert keys(reply)["MaxRecvDataSegmentLength"] == "262144"
    assert neg.session_params.max_burst_length == 65536


def test_offered_auth_method_list_picks_none() -> None:
    neg = negotiator()
    reply = neg.step(request([*FIRST, ("AuthMethod", "CHAP,None")], csg=0, nsg=1))
    assert keys(reply)["AuthMethod"] == "None"
    assert reply.transit


def test_security_to_full_feature_goes_through_operational() -> None:
    neg = negotiator()
    reply = neg.step(request(FIRST, csg=0, nsg=3))
    assert_ok(reply)
    assert (reply.transit, reply.nsg, reply.complete) == (True, 1, False)
    reply = neg.step(request([]))
    assert reply.complete
    assert keys(reply) == {"MaxRecvDataSegmentLength": "262144"}
    assert neg.session_params == SessionParams(
        target_name=TARGET_NAME, initiator_name=INITIATOR_NAME
    )


def test_target_waits_when_initiator_does_not_ask_to_transit() -> None:
    neg = negotiator()
    reply = neg.step(request(FIRST, transit=False))
    assert_ok(reply)
    assert (reply.transit, reply.nsg, reply.complete) == (False, 0, False)
    reply = neg.step(request([("ImmediateData", "No")], transit=False))
    assert keys(reply) == {"ImmediateData": "No"}
    assert not reply.transit
    reply = neg.step(request([]))
    assert reply.complete
    assert neg.session_params.immediate_data is False


def test_session_type_defaults_to_normal_and_alias_is_kept() -> None:
    neg = negotiator()
    first = [*FIRST[:2], ("InitiatorAlias", "host one")]
    assert neg.step(request(first)).complete
    assert neg.session_type == "Normal"
    assert neg.session_params.initiator_alias == "host one"


def test_unknown_target_only_and_private_keys() -> None:
    neg = negotiator()
    offer = [*FIRST, ("X-com.example.Ping", "1"), ("FutureKey", "x"), ("TargetAlias", "me")]
    answer = keys(neg.step(request(offer)))
    assert answer["X-com.example.Ping"] == "NotUnderstood"
    assert answer["FutureKey"] == "NotUnderstood"
    assert answer["TargetAlias"] == "Reject"


def test_unknown_keys_in_security_stage() -> None:
    neg = negotiator()
    reply = neg.step(request([*FIRST, ("X-vendor", "1")], csg=0, nsg=1))
    assert keys(reply)["X-vendor"] == "NotUnderstood"
    assert reply.transit


def test_libiscsi_style_chap_login_redeclares_names() -> None:
    """libiscsi sends InitiatorName/TargetName/SessionType again in the operational stage."""
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    reply = chap_exchange(neg, ChapInitiator(INITIATOR, algorithms=(5,)))
    assert_ok(reply)
    assert reply.transit
    offer = [*FIRST, ("HeaderDigest", "None,CRC32C"), ("IFMarker", "No"), ("OFMarker", "No")]
    reply = neg.step(request(offer))
    assert_ok(reply)
    assert reply.complete
    assert keys(reply)["IFMarker"] == "No"


# ------------------------------------------------------------------ CHAP


@pytest.mark.parametrize("algorithms", [(5,), (7, 5), (8,), (6,)])
def test_one_way_chap(algorithms: tuple[int, ...]) -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    reply = chap_exchange(neg, ChapInitiator(INITIATOR, algorithms=algorithms))
    assert_ok(reply)
    assert (reply.transit, reply.csg, reply.nsg) == (True, 0, 1)
    assert reply.data == b""
    reply = neg.step(request([]))
    assert reply.complete
    assert neg.authenticated_user == "host1"


def test_mutual_chap() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR, mutual_chap=TARGET)))
    initiator = ChapInitiator(INITIATOR, TARGET)
    reply = chap_exchange(neg, initiator)
    assert_ok(reply)
    assert reply.transit
    answer = keys(reply)
    assert answer["CHAP_N"] == "vol1"
    initiator.verify_target(answer)
    assert neg.step(request([])).complete
    assert neg.authenticated_user == "host1"


def test_wrong_secret() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    wrong = ChapSecret("host1", "a-wrong-secret")
    reply = chap_exchange(neg, ChapInitiator(wrong))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)
    assert neg.failure_reason == "wrong CHAP response for user 'host1'"
    assert neg.authenticated_user is None
    # the login stays failed
    again = neg.step(request([], csg=0, nsg=1))
    assert again.status == LoginStatus.AUTHENTICATION_FAILED


def test_wrong_user() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    reply = chap_exchange(neg, ChapInitiator(ChapSecret("host2", INITIATOR.secret)))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)
    assert "host2" in (neg.failure_reason or "")


def test_mutual_requested_but_not_configured() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    reply = chap_exchange(neg, ChapInitiator(INITIATOR, TARGET))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)
    assert "mutual" in (neg.failure_reason or "")


def test_skipping_security_when_auth_required() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    reply = neg.step(request(FIRST))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)
    assert "skipped security" in (neg.failure_reason or "")


def test_auth_method_none_when_chap_required() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    reply = neg.step(request([*FIRST, ("AuthMethod", "None")], csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)


def test_no_auth_method_when_chap_required() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    reply = neg.step(request(FIRST, csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)


class BrokenDirectory(Directory):
    def target(self, name: str) -> TargetPolicy | None:
        return policy(chap=ChapSecret("host1", "short"))


def test_short_configured_secret_is_a_target_error() -> None:
    neg = negotiator(BrokenDirectory())
    reply = neg.step(request(FIRST, csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.TARGET_ERROR)
    assert (neg.failure_reason or "").startswith("CHAP configuration: CHAP secret is 5 bytes")


def test_chap_offered_to_target_without_chap() -> None:
    neg = negotiator()
    reply = neg.step(request([*FIRST, ("AuthMethod", "CHAP")], csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)


def test_no_common_chap_algorithm() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)), TargetLimits(chap_algorithms=(5,)))
    neg.step(request([*FIRST, ("AuthMethod", "CHAP")], csg=0, nsg=1))
    reply = neg.step(request([("CHAP_A", "7,8")], csg=0, nsg=1, transit=False))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)


def test_chap_keys_out_of_order() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    neg.step(request([*FIRST, ("AuthMethod", "CHAP")], csg=0, nsg=1))
    reply = neg.step(request([("CHAP_N", "host1"), ("CHAP_R", "0x00")], csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)


def test_stalled_authentication() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    neg.step(request([*FIRST, ("AuthMethod", "CHAP")], csg=0, nsg=1))
    reply = neg.step(request([], csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)


def test_auth_method_twice() -> None:
    neg = negotiator()
    neg.step(request([*FIRST, ("AuthMethod", "None")], csg=0, nsg=1, transit=False))
    reply = neg.step(request([("AuthMethod", "None")], csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


# ------------------------------------------------------------------ names, ACL, targets


def test_initiator_outside_acl() -> None:
    allowed = frozenset({"iqn.2024-01.org.example:other"})
    neg = negotiator(Directory(policy(allowed_initiators=allowed)))
    reply = neg.step(request(FIRST))
    assert_fails(neg, reply, LoginStatus.AUTHORIZATION_FAILED)
    assert neg.failure_reason == f"{INITIATOR_NAME} is not in the access list of {TARGET_NAME}"


def test_acl_names_ignore_case() -> None:
    allowed = frozenset({INITIATOR_NAME.upper().replace("IQN.", "iqn.")})
    neg = negotiator(Directory(policy(allowed_initiators=allowed)))
    assert neg.step(request(FIRST)).complete


def test_unknown_target() -> None:
    neg = negotiator(Directory())
    reply = neg.step(request(FIRST))
    assert_fails(neg, reply, LoginStatus.TARGET_NOT_FOUND)
    assert TARGET_NAME in (neg.failure_reason or "")


@pytest.mark.parametrize(
    ("first", "status"),
    [
        ([("TargetName", TARGET_NAME)], LoginStatus.MISSING_PARAMETER),
        ([("InitiatorName", INITIATOR_NAME)], LoginStatus.MISSING_PARAMETER),
        ([("InitiatorName", "host1"), ("TargetName", TARGET_NAME)], LoginStatus.INITIATOR_ERROR),
        ([*FIRST[:2], ("SessionType", "Boot")], LoginStatus.SESSION_TYPE_NOT_SUPPORTED),
        ([*FIRST[:1], ("TargetName", "not-a-name")], LoginStatus.TARGET_NOT_FOUND),
    ],
)
def test_first_request_checks(first: Pairs, status: LoginStatus) -> None:
    neg = negotiator()
    assert_fails(neg, neg.step(request(first)), status)


def test_declared_name_cannot_change() -> None:
    neg = negotiator()
    neg.step(request(FIRST, transit=False))
    reply = neg.step(request([("TargetName", "iqn.2024-01.org.example:vol2")]))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


def test_session_type_cannot_change_after_default() -> None:
    neg = negotiator()
    neg.step(request(FIRST[:2], transit=False))
    reply = neg.step(request([("SessionType", "Discovery")]))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("iqn.2024-01.org.example:host", True),
        ("IQN.2024-01.ORG.EXAMPLE:HOST", True),
        ("eui.0123456789ABCDEF", True),
        ("naa.52004567BA64678D", True),
        ("iqn.", False),
        ("host1", False),
        ("iqn.2024-01.org.example:a b", False),
        ("iqn." + "x" * 220, False),
    ],
)
def test_iscsi_names(name: str, valid: bool) -> None:
    assert is_valid_iscsi_name(name) is valid


# ------------------------------------------------------------------ discovery


def test_discovery_session() -> None:
    neg = negotiator(Directory())
    offer = [
        ("InitiatorName", INITIATOR_NAME),
        ("SessionType", "Discovery"),
        ("MaxConnections", "1"),
        ("MaxBurstLength", "262144"),
        ("HeaderDigest", "None"),
        ("DefaultTime2Retain", "0"),
    ]
    reply = neg.step(request(offer))
    assert_ok(reply)
    assert reply.complete
    answer = keys(reply)
    assert answer["MaxConnections"] == "Irrelevant"
    assert answer["MaxBurstLength"] == "Irrelevant"
    assert answer["HeaderDigest"] == "None"
    assert "TargetPortalGroupTag" not in answer
    assert neg.session_type == "Discovery"
    assert neg.target is None
    assert neg.session_params.session_type == "Discovery"
    assert neg.session_params.target_name is None
    assert neg.session_params.default_time2retain == 0


def test_discovery_with_chap() -> None:
    neg = negotiator(Directory(discovery=(INITIATOR, None)))
    first = [("InitiatorName", INITIATOR_NAME), ("SessionType", "Discovery")]
    reply = chap_exchange(neg, ChapInitiator(INITIATOR), first)
    assert_ok(reply)
    assert reply.transit
    assert neg.step(request([])).complete
    assert neg.authenticated_user == "host1"


def test_discovery_chap_required() -> None:
    neg = negotiator(Directory(discovery=(INITIATOR, None)))
    reply = neg.step(request([("InitiatorName", INITIATOR_NAME), ("SessionType", "Discovery")]))
    assert_fails(neg, reply, LoginStatus.AUTHENTICATION_FAILED)


# ------------------------------------------------------------------ stages and flags


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"csg": 2}, LoginStatus.INITIATOR_ERROR),
        ({"csg": 3}, LoginStatus.INITIATOR_ERROR),
        ({"csg": 1, "nsg": 1}, LoginStatus.INITIATOR_ERROR),
        ({"csg": 1, "nsg": 0}, LoginStatus.INITIATOR_ERROR),
        ({"csg": 0, "nsg": 2}, LoginStatus.INITIATOR_ERROR),
        ({"csg": 0, "nsg": 0}, LoginStatus.INITIATOR_ERROR),
        ({"cont": True, "transit": True}, LoginStatus.INITIATOR_ERROR),
        ({"version_min": 1, "version_max": 2}, LoginStatus.UNSUPPORTED_VERSION),
    ],
)
def test_bad_first_request_header(fields: dict[str, Any], status: LoginStatus) -> None:
    neg = negotiator()
    reply = neg.step(request(FIRST, **fields))
    assert_fails(neg, reply, status)
    assert reply.csg in (0, 1)


def test_nsg_is_ignored_without_transit() -> None:
    neg = negotiator()
    assert_ok(neg.step(request(FIRST, transit=False, nsg=2)))


def test_csg_must_follow_the_agreed_stage() -> None:
    neg = negotiator()
    neg.step(request(FIRST, csg=0, nsg=1))  # now in operational stage
    reply = neg.step(request([], csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


def test_csg_cannot_jump_ahead() -> None:
    neg = negotiator()
    neg.step(request(FIRST, csg=0, nsg=1, transit=False))
    reply = neg.step(request([], csg=1))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


@pytest.mark.parametrize("field", ["isid", "tsih", "cid"])
def test_ids_must_not_change(field: str) -> None:
    neg = negotiator()
    neg.step(request(FIRST, transit=False))
    changed: dict[str, Any] = {"isid": bytes(6), "tsih": 5, "cid": 2}
    reply = neg.step(request([], **{field: changed[field]}))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


def test_operational_key_in_security_stage() -> None:
    neg = negotiator()
    reply = neg.step(request([*FIRST, ("MaxBurstLength", "65536")], csg=0, nsg=1))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


def test_security_key_in_operational_stage() -> None:
    neg = negotiator()
    reply = neg.step(request([*FIRST, ("AuthMethod", "None")]))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


def test_send_targets_during_login() -> None:
    neg = negotiator()
    reply = neg.step(request([*FIRST, ("SendTargets", "All")]))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


def test_key_offered_twice_across_requests() -> None:
    neg = negotiator()
    neg.step(request([*FIRST, ("MaxBurstLength", "65536")], transit=False))
    reply = neg.step(request([("MaxBurstLength", "65536")]))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


def test_key_twice_in_one_request() -> None:
    neg = negotiator()
    data = encode_text(FIRST) + b"MaxBurstLength=1024\x00MaxBurstLength=1024\x00"
    assert_fails(neg, neg.step(request(data=data)), LoginStatus.INITIATOR_ERROR)


def test_malformed_text() -> None:
    neg = negotiator()
    reply = neg.step(request(data=b"InitiatorName=iqn.x"))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)
    assert "bad login text" in (neg.failure_reason or "")


def test_step_after_completion() -> None:
    neg = negotiator()
    assert neg.step(request(FIRST)).complete
    reply = neg.step(request([]))
    assert reply.status == LoginStatus.INITIATOR_ERROR
    assert neg.complete


def test_results_before_completion() -> None:
    neg = negotiator()
    with pytest.raises(RuntimeError):
        _ = neg.session_params
    with pytest.raises(RuntimeError):
        _ = neg.connection_params


def test_too_many_requests() -> None:
    neg = negotiator()
    neg.step(request(FIRST, transit=False))
    replies = [neg.step(request([], transit=False)) for _ in range(200)]
    assert replies[-1].status == LoginStatus.INITIATOR_ERROR
    assert "more than" in (neg.failure_reason or "")


# ------------------------------------------------------------------ continuation (C bit)


def test_request_text_split_across_pdus() -> None:
    neg = negotiator()
    data = encode_text([*FIRST, ("MaxBurstLength", "65536"), ("HeaderDigest", "CRC32C")])
    pieces = [data[:7], data[7:40], data[40:]]
    for piece in pieces[:-1]:
        ack = neg.step(request(data=piece, cont=True, transit=False))
        assert_ok(ack)
        assert (ack.data, ack.cont, ack.transit) == (b"", False, False)
    reply = neg.step(request(data=pieces[-1]))
    assert reply.complete
    assert keys(reply)["TargetPortalGroupTag"] == "7"  # answers the first complete request
    assert neg.session_params.max_burst_length == 65536


def test_long_response_is_continued() -> None:
    neg = negotiator()
    unknown = [(f"X-com.example.key{i:03d}-{'p' * 40}", "1") for i in range(200)]
    reply = neg.step(request([*FIRST, *unknown]))
    assert_ok(reply)
    chunks = [reply.data]
    while reply.cont:
        assert not reply.transit and len(reply.data) == 8192
        reply = neg.step(request([]))
        assert_ok(reply)
        chunks.append(reply.data)
    assert reply.complete
    answer = dict(parse_text(b"".join(chunks)))
    assert all(answer[key] == "NotUnderstood" for key, _ in unknown)
    assert len(chunks) > 1


def test_long_response_waits_for_transit_request() -> None:
    neg = negotiator()
    unknown = [(f"X-k{i:03d}-{'p' * 50}", "1") for i in range(150)]
    reply = neg.step(request([*FIRST, *unknown]))
    while reply.cont:
        reply = neg.step(request([], transit=False))
    assert not reply.transit  # the last request did not ask to transit
    reply = neg.step(request([]))
    assert reply.complete


def test_text_during_continued_response_is_an_error() -> None:
    neg = negotiator()
    unknown = [(f"X-k{i:03d}-{'p' * 50}", "1") for i in range(150)]
    reply = neg.step(request([*FIRST, *unknown]))
    assert reply.cont
    reply = neg.step(request([("MaxBurstLength", "1024")]))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)


# ------------------------------------------------------------------ target offers


def test_target_offers_a_limit_below_the_default() -> None:
    neg = negotiator(limits=TargetLimits(max_burst_length=16384))
    reply = neg.step(request(FIRST))
    assert_ok(reply)
    assert not reply.transit  # waits for the answer to its offers
    offers = keys(reply)
    assert offers["MaxBurstLength"] == "16384"
    assert offers["FirstBurstLength"] == "16384"
    reply = neg.step(request([("MaxBurstLength", "8192"), ("FirstBurstLength", "8192")]))
    assert reply.complete
    params = neg.session_params
    assert (params.max_burst_length, params.first_burst_length) == (8192, 8192)


def test_unanswered_offer_fails() -> None:
    neg = negotiator(limits=TargetLimits(max_burst_length=16384))
    neg.step(request(FIRST))
    reply = neg.step(request([]))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)
    assert "did not answer" in (neg.failure_reason or "")


# ------------------------------------------------------------------ more connections


EXISTING = SessionParams(
    max_connections=4, target_name=TARGET_NAME, initiator_name=INITIATOR_NAME, max_burst_length=4096
)


def test_second_connection_of_a_session() -> None:
    neg = negotiator(existing=EXISTING)
    offer = [*FIRST, ("HeaderDigest", "CRC32C"), ("MaxRecvDataSegmentLength", "16384")]
    reply = neg.step(request(offer, tsih=0x12, cid=2))
    assert_ok(reply)
    assert reply.complete
    assert neg.leading is False
    assert neg.session_params is EXISTING
    assert neg.connection_params.header_digest is True
    assert neg.connection_params.max_recv_data_segment_length_initiator == 16384


def test_second_connection_with_chap() -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)), existing=EXISTING)
    initiator = ChapInitiator(INITIATOR)
    reply = neg.step(request([*FIRST, ("AuthMethod", "CHAP")], csg=0, nsg=1, tsih=3))
    reply = neg.step(
        request([("CHAP_A", "5")], csg=0, nsg=1, tsih=3, transit=False)  # same TSIH throughout
    )
    reply = neg.step(request(initiator.respond(keys(reply)), csg=0, nsg=1, tsih=3))
    assert reply.transit
    assert neg.step(request([], tsih=3)).complete


def test_leading_only_key_on_second_connection() -> None:
    neg = negotiator(existing=EXISTING)
    reply = neg.step(request([*FIRST, ("MaxBurstLength", "1024")], tsih=3))
    assert_fails(neg, reply, LoginStatus.INITIATOR_ERROR)
    assert "leading-only" in (neg.failure_reason or "")


@pytest.mark.parametrize(
    "first",
    [
        [("InitiatorName", "iqn.2024-01.org.example:host2"), ("TargetName", TARGET_NAME)],
        [("InitiatorName", INITIATOR_NAME), ("TargetName", "iqn.2024-01.org.example:vol2")],
    ],
)
def test_second_connection_names_must_match(first: Pairs) -> None:
    directory = Directory(policy(), policy(name="iqn.2024-01.org.example:vol2"))
    neg = negotiator(directory, existing=EXISTING)
    assert_fails(neg, neg.step(request(first, tsih=3)), LoginStatus.SESSION_DOES_NOT_EXIST)


def test_second_connection_session_type_must_match() -> None:
    neg = negotiator(existing=EXISTING)
    first = [*FIRST[:2], ("SessionType", "Discovery")]
    assert_fails(neg, neg.step(request(first, tsih=3)), LoginStatus.INITIATOR_ERROR)


def test_second_connection_to_discovery_session() -> None:
    neg = negotiator(existing=SessionParams(session_type="Discovery"))
    reply = neg.step(request(FIRST[:1], tsih=3))
    assert_fails(neg, reply, LoginStatus.CANT_INCLUDE_IN_SESSION)


def test_nonzero_tsih_without_session() -> None:
    neg = negotiator()
    assert_fails(neg, neg.step(request(FIRST, tsih=9)), LoginStatus.SESSION_DOES_NOT_EXIST)


def test_explicit_leading_flag() -> None:
    neg = negotiator(leading=True)
    assert neg.step(request(FIRST, tsih=9)).complete
    assert neg.leading is True


# ------------------------------------------------------------------ never raises

text_pairs = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "InitiatorName",
                "TargetName",
                "SessionType",
                "AuthMethod",
                "CHAP_A",
                "CHAP_N",
                "CHAP_R",
                "CHAP_I",
                "CHAP_C",
                "MaxBurstLength",
                "HeaderDigest",
                "MaxConnections",
                "X-foo",
            ]
        ),
        st.sampled_from(
            [INITIATOR_NAME, TARGET_NAME, "Normal", "Discovery", "CHAP,None", "None", "5", "0x00"]
        ),
    ),
    max_size=6,
    unique_by=lambda pair: pair[0],
)
requests = st.builds(
    request,
    text_pairs,
    csg=st.integers(0, 3),
    nsg=st.integers(0, 3),
    transit=st.booleans(),
    cont=st.booleans(),
    tsih=st.sampled_from([0, 0, 0, 1]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(requests, min_size=1, max_size=6))
def test_step_always_replies(sequence: list[LoginRequestView]) -> None:
    neg = negotiator(Directory(policy(chap=INITIATOR)))
    for req in sequence:
        reply = neg.step(req)
        assert isinstance(reply, LoginReply)
        assert "bug" not in (neg.failure_reason or "")
        if reply.status:
            assert not reply.transit and not reply.complete
        if reply.transit:
            assert req.transit
