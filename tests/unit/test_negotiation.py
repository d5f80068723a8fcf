"""Operational key negotiation, target as responder (RFC 7143 §6.2, §13)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from reservoir.agent.iscsi.negotiation import (
    KEYS,
    ConnectionParams,
    Kind,
    LoginStatus,
    NegotiationError,
    OperationalNegotiator,
    SessionParams,
    Stage,
    TargetLimits,
    answer,
    check_key_use,
    is_private_key,
)

NAMES: dict[str, Any] = {
    "initiator_name": "iqn.2024-01.org.example:host",
    "target_name": "iqn.2024-01.org.example:vol",
    "initiator_alias": None,
}


def negotiate(
    pairs: list[tuple[str, str]], limits: TargetLimits | None = None, **kwargs: Any
) -> tuple[dict[str, str], OperationalNegotiator]:
    negotiator = OperationalNegotiator(limits or TargetLimits(), **kwargs)
    return dict(negotiator.respond(pairs)), negotiator


# (key, initiator offer, TargetLimits changes, expected answer, SessionParams/ConnectionParams
# attribute, expected value)
TABLE: list[tuple[str, str, dict[str, Any], str, str, object]] = [
    # lists: the first value of the offerer's list that we accept
    ("HeaderDigest", "CRC32C,None", {}, "CRC32C", "header_digest", True),
    ("HeaderDigest", "None,CRC32C", {}, "None", "header_digest", False),
    ("HeaderDigest", "CRC32C,None", {"header_digest": ("None",)}, "None", "header_digest", False),
    (
        "HeaderDigest",
        "None,CRC32C",
        {"header_digest": ("CRC32C",)},
        "CRC32C",
        "header_digest",
        True,
    ),
    ("DataDigest", "CRC32C", {}, "CRC32C", "data_digest", True),
    ("DataDigest", "MD5,None", {}, "None", "data_digest", False),
    ("DataDigest", "CRC32C", {"data_digest": ("None",)}, "Reject", "data_digest", False),
    # minimum
    ("MaxConnections", "4", {}, "4", "max_connections", 4),
    ("MaxConnections", "65535", {}, "8", "max_connections", 8),
    ("MaxConnections", "0", {}, "Reject", "max_connections", 1),
    ("MaxConnections", "65536", {}, "Reject", "max_connections", 1),
    ("MaxBurstLength", "1048576", {}, "1048576", "max_burst_length", 1048576),
    ("MaxBurstLength", "16777215", {}, "16776192", "max_burst_length", 16776192),
    ("MaxBurstLength", "0x100000", {}, "1048576", "max_burst_length", 1048576),
    ("MaxBurstLength", "65536", {"max_burst_length": 8192}, "8192", "max_burst_length", 8192),
    ("MaxBurstLength", "511", {}, "Reject", "max_burst_length", 262144),
    ("MaxBurstLength", "16777216", {}, "Reject", "max_burst_length", 262144),
    ("MaxBurstLength", "lots", {}, "Reject", "max_burst_length", 262144),
    ("FirstBurstLength", "1048576", {}, "262144", "first_burst_length", 262144),
    ("FirstBurstLength", "8192", {}, "8192", "first_burst_length", 8192),
    ("MaxOutstandingR2T", "1", {}, "1", "max_outstanding_r2t", 1),
    ("MaxOutstandingR2T", "64", {}, "16", "max_outstanding_r2t", 16),
    ("MaxOutstandingR2T", "0", {}, "Reject", "max_outstanding_r2t", 1),
    ("DefaultTime2Retain", "0", {}, "0", "default_time2retain", 0),
    ("DefaultTime2Retain", "3600", {}, "20", "default_time2retain", 20),
    ("DefaultTime2Retain", "3601", {}, "Reject", "default_time2retain", 20),
    ("ErrorRecoveryLevel", "2", {}, "0", "error_recovery_level", 0),
    ("ErrorRecoveryLevel", "3", {}, "Reject", "error_recovery_level", 0),
    # maximum
    ("DefaultTime2Wait", "0", {}, "2", "default_time2wait", 2),
    ("DefaultTime2Wait", "10", {}, "10", "default_time2wait", 10),
    ("DefaultTime2Wait", "0", {"default_time2wait": 5}, "5", "default_time2wait", 5),
    # OR
    ("InitialR2T", "No", {}, "No", "initial_r2t", False),
    ("InitialR2T", "Yes", {}, "Yes", "initial_r2t", True),
    ("InitialR2T", "No", {"initial_r2t": True}, "Yes", "initial_r2t", True),
    ("InitialR2T", "no", {}, "Reject", "initial_r2t", True),
    ("DataPDUInOrder", "No", {}, "Yes", "data_pdu_in_order", True),
    ("DataPDUInOrder", "No", {"data_pdu_in_order": False}, "No", "data_pdu_in_order", False),
    ("DataSequenceInOrder", "No", {}, "Yes", "data_sequence_in_order", True),
    # AND
    ("ImmediateData", "Yes", {}, "Yes", "immediate_data", True),
    ("ImmediateData", "No", {}, "No", "immediate_data", False),
    ("ImmediateData", "Yes", {"immediate_data": False}, "No", "immediate_data", False),
    # reserved words are not offers
    ("MaxBurstLength", "Irrelevant", {}, "Reject", "max_burst_length", 262144),
    ("ImmediateData", "NotUnderstood", {}, "Reject", "immediate_data", True),
]


def _result(negotiator: OperationalNegotiator, attribute: str) -> object:
    if attribute in ConnectionParams.__dataclass_fields__:
        return getattr(negotiator.connection_params(), attribute)
    return getattr(negotiator.session_params(**NAMES), attribute)


@pytest.mark.parametrize("case", TABLE, ids=lambda case: f"{case[0]}={case[1]}")
def test_negotiation_table(case: tuple[str, str, dict[str, Any], str, str, object]) -> None:
    key, offer, limits, reply, attribute, value = case
    replies, negotiator = negotiate([(key, offer)], TargetLimits(**limits))
    assert replies == {key: reply}
    assert _result(negotiator, attribute) == value


def test_defaults_when_nothing_is_negotiated() -> None:
    _, negotiator = negotiate([])
    negotiator.finish()
    assert negotiator.session_params(**NAMES) == SessionParams(**NAMES)
    params = negotiator.session_params(**NAMES)
    assert (params.max_burst_length, params.first_burst_length) == (262144, 65536)
    assert (params.initial_r2t, params.immediate_data, params.max_outstanding_r2t) == (
        True,
        True,
        1,
    )
    assert (params.default_time2wait, params.default_time2retain) == (2, 20)
    assert (params.max_connections, params.error_recovery_level) == (1, 0)
    assert negotiator.connection_params() == ConnectionParams()


def test_max_recv_data_segment_length_is_declared_both_ways() -> None:
    replies, negotiator = negotiate([("MaxRecvDataSegmentLength", "65536")])
    assert replies == {}  # a declaration needs no answer
    assert negotiator.declarations() == [("MaxRecvDataSegmentLength", "262144")]
    assert negotiator.declarations() == []  # once per connection
    params = negotiator.connection_params()
    assert params.max_recv_data_segment_length_initiator == 65536
    assert params.max_recv_data_segment_length_target == 262144


@pytest.mark.parametrize("value", ["511", "16777216", "x", "Irrelevant"])
def test_max_recv_data_segment_length_out_of_range(value: str) -> None:
    replies, negotiator = negotiate([("MaxRecvDataSegmentLength", value)])
    assert replies == {"MaxRecvDataSegmentLength": "Reject"}
    assert negotiator.connection_params().max_recv_data_segment_length_initiator == 8192


def test_first_burst_never_exceeds_max_burst() -> None:
    replies, negotiator = negotiate([("FirstBurstLength", "262144"), ("MaxBurstLength", "131072")])
    assert replies == {"MaxBurstLength": "131072", "FirstBurstLength": "131072"}
    params = negotiator.session_params(**NAMES)
    assert params.first_burst_length == params.max_burst_length == 131072


def test_first_burst_clamped_when_max_burst_comes_later() -> None:
    negotiator = OperationalNegotiator(TargetLimits())
    negotiator.respond([("FirstBurstLength", "262144")])
    negotiator.respond([("MaxBurstLength", "65536")])
    assert negotiator.session_params(**NAMES).first_burst_length == 65536


@pytest.mark.parametrize(("offer", "reply"), [("1", "1"), ("2", "1"), ("0", "0"), ("32", "Reject")])
def test_protocol_level(offer: str, reply: str) -> None:
    assert negotiate([("iSCSIProtocolLevel", offer)])[0] == {"iSCSIProtocolLevel": reply}


@pytest.mark.parametrize(
    ("key", "offer", "reply"),
    [
        ("OFMarker", "Yes", "No"),
        ("IFMarker", "No", "No"),
        ("IFMarker", "Maybe", "Reject"),
        ("OFMarkInt", "2048~8192", "Irrelevant"),
        ("IFMarkInt", "1", "Irrelevant"),
    ],
)
def test_obsolete_marker_keys(key: str, offer: str, reply: str) -> None:
    assert negotiate([(key, offer)])[0] == {key: reply}


@pytest.mark.parametrize("key", ["X-com.example.Thing", "X#org.example.thing", "FutureKey"])
def test_unknown_and_private_keys(key: str) -> None:
    assert negotiate([(key, "1")])[0] == {key: "NotUnderstood"}


def test_private_key_names() -> None:
    assert is_private_key("X-com.example")
    assert is_private_key("X#org.example")
    assert not is_private_key("XFoo")


DISCOVERY_IRRELEVANT = [
    ("MaxConnections", "2"),
    ("InitialR2T", "No"),
    ("ImmediateData", "Yes"),
    ("MaxBurstLength", "65536"),
    ("FirstBurstLength", "65536"),
    ("MaxOutstandingR2T", "1"),
    ("DataPDUInOrder", "Yes"),
    ("DataSequenceInOrder", "Yes"),
    ("iSCSIProtocolLevel", "1"),
]


@pytest.mark.parametrize(("key", "offer"), DISCOVERY_IRRELEVANT)
def test_irrelevant_in_discovery(key: str, offer: str) -> None:
    replies, negotiator = negotiate([(key, offer)], session_type="Discovery")
    assert replies == {key: "Irrelevant"}
    negotiator.finish()
    assert negotiator.session_params(**NAMES).max_connections == 1


@pytest.mark.parametrize(
    ("key", "offer", "reply"),
    [
        ("DefaultTime2Wait", "0", "2"),
        ("DefaultTime2Retain", "0", "0"),
        ("ErrorRecoveryLevel", "1", "0"),
        ("HeaderDigest", "CRC32C", "CRC32C"),
    ],
)
def test_still_negotiated_in_discovery(key: str, offer: str, reply: str) -> None:
    assert negotiate([(key, offer)], session_type="Discovery")[0] == {key: reply}


def test_discovery_session_params() -> None:
    _, negotiator = negotiate(
        [("DefaultTime2Retain", "0"), ("MaxBurstLength", "512")], session_type="Discovery"
    )
    params = negotiator.session_params(**NAMES)
    assert params.session_type == "Discovery"
    assert params.default_time2retain == 0
    assert params.max_burst_length == 262144


@pytest.mark.parametrize(
    "key",
    [name for name, spec in KEYS.items() if spec.leading_only and spec.kind != Kind.DECLARATIVE],
)
def test_leading_only_keys_refused_on_other_connections(key: str) -> None:
    negotiator = OperationalNegotiator(TargetLimits(), leading=False)
    with pytest.raises(NegotiationError, match="leading-only") as info:
        negotiator.respond([(key, KEYS[key].default)])
    assert info.value.status == LoginStatus.INITIATOR_ERROR


def test_connection_keys_on_other_connections() -> None:
    replies, negotiator = negotiate(
        [("HeaderDigest", "CRC32C"), ("MaxRecvDataSegmentLength", "4096")], leading=False
    )
    assert replies == {"HeaderDigest": "CRC32C"}
    negotiator.finish()
    assert negotiator.connection_params().max_recv_data_segment_length_initiator == 4096


def test_key_negotiated_twice() -> None:
    negotiator = OperationalNegotiator(TargetLimits())
    negotiator.respond([("MaxBurstLength", "65536")])
    with pytest.raises(NegotiationError, match="negotiated twice"):
        negotiator.respond([("MaxBurstLength", "65536")])


def test_rejected_key_cannot_be_retried() -> None:
    negotiator = OperationalNegotiator(TargetLimits())
    assert negotiator.respond([("MaxBurstLength", "1")]) == [("MaxBurstLength", "Reject")]
    with pytest.raises(NegotiationError):
        negotiator.respond([("MaxBurstLength", "65536")])


# ------------------------------------------------------------------ target offers

TIGHT = TargetLimits(max_burst_length=16384, immediate_data=False, header_digest=("CRC32C",))


def test_no_offers_with_default_limits() -> None:
    negotiator = OperationalNegotiator(TargetLimits())
    assert negotiator.offers() == []
    assert not negotiator.pending


def test_offers_when_defaults_are_unacceptable() -> None:
    negotiator = OperationalNegotiator(TIGHT)
    offers = dict(negotiator.offers())
    assert offers == {
        "HeaderDigest": "CRC32C",
        "ImmediateData": "No",
        "MaxBurstLength": "16384",
        "FirstBurstLength": "16384",
    }
    assert negotiator.pending
    assert negotiator.offers() == []  # offered once
    with pytest.raises(NegotiationError, match="did not answer"):
        negotiator.finish()
    answers = [(key, value) for key, value in offers.items() if key != "MaxBurstLength"]
    assert negotiator.respond([*answers, ("MaxBurstLength", "8192")]) == []
    negotiator.finish()  # nothing outstanding any more
    params = negotiator.session_params(**NAMES)
    assert (params.max_burst_length, params.first_burst_length) == (8192, 8192)
    assert params.immediate_data is False
    assert negotiator.connection_params().header_digest is True


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MaxBurstLength", "32768"),  # more than offered
        ("MaxBurstLength", "Reject"),
        ("MaxBurstLength", "NotUnderstood"),
        ("ImmediateData", "Yes"),
        ("HeaderDigest", "None"),
    ],
)
def test_bad_answers_to_offers(key: str, value: str) -> None:
    negotiator = OperationalNegotiator(TIGHT)
    negotiator.offers()
    with pytest.raises(NegotiationError, match="to our offer"):
        negotiator.respond([(key, value)])


def test_irrelevant_answer_to_offer_keeps_our_value() -> None:
    negotiator = OperationalNegotiator(TIGHT)
    negotiator.offers()
    negotiator.respond([("FirstBurstLength", "Irrelevant")])
    assert negotiator.session_params(**NAMES).first_burst_length == 16384


def test_offered_keys_already_negotiated_are_not_offered() -> None:
    negotiator = OperationalNegotiator(TIGHT)
    negotiator.respond([("MaxBurstLength", "4096"), ("ImmediateData", "Yes")])
    assert dict(negotiator.offers()) == {"HeaderDigest": "CRC32C", "FirstBurstLength": "4096"}


def test_finish_refuses_results_outside_limits() -> None:
    negotiator = OperationalNegotiator(TargetLimits(header_digest=("CRC32C",)))
    assert negotiator.respond([("HeaderDigest", "None")]) == [("HeaderDigest", "Reject")]
    with pytest.raises(NegotiationError, match="not acceptable"):
        negotiator.finish()


def test_no_offers_for_other_connections_or_discovery() -> None:
    other = OperationalNegotiator(TIGHT, leading=False)
    assert dict(other.offers()) == {"HeaderDigest": "CRC32C"}
    discovery = OperationalNegotiator(TIGHT, session_type="Discovery")
    assert dict(discovery.offers()) == {"HeaderDigest": "CRC32C"}


# ------------------------------------------------------------------ stage rules


@pytest.mark.parametrize(
    ("key", "stage", "leading", "message"),
    [
        ("MaxBurstLength", Stage.SECURITY, True, "during security negotiation"),
        ("HeaderDigest", Stage.SECURITY, True, "during security negotiation"),
        ("CHAP_A", Stage.OPERATIONAL, True, "outside security negotiation"),
        ("AuthMethod", Stage.OPERATIONAL, True, "outside security negotiation"),
        ("SendTargets", Stage.OPERATIONAL, True, "full feature phase only"),
        ("MaxConnections", Stage.OPERATIONAL, False, "leading-only"),
    ],
)
def test_key_use_errors(key: str, stage: Stage, leading: bool, message: str) -> None:
    with pytest.raises(NegotiationError, match=message):
        check_key_use(KEYS[key], stage, leading)


@pytest.mark.parametrize(
    ("key", "stage", "leading"),
    [
        ("InitiatorName", Stage.SECURITY, True),
        ("InitiatorName", Stage.OPERATIONAL, False),
        ("SessionType", Stage.OPERATIONAL, False),
        ("CHAP_N", Stage.SECURITY, False),
        ("HeaderDigest", Stage.OPERATIONAL, False),
        ("TargetAlias", Stage.SECURITY, True),
    ],
)
def test_key_use_allowed(key: str, stage: Stage, leading: bool) -> None:
    check_key_use(KEYS[key], stage, leading)


def test_answer_function() -> None:
    spec = KEYS["MaxBurstLength"]
    assert answer(spec, "1024", "4096") == "1024"
    assert answer(spec, "Reject", "4096") == "Reject"


# ------------------------------------------------------------------ limits


@pytest.mark.parametrize(
    "changes",
    [
        {"max_recv_data_segment_length": 511},
        {"max_burst_length": 2**24},
        {"max_connections": 0},
        {"max_outstanding_r2t": 0},
        {"error_recovery_level": 1},
        {"header_digest": ()},
        {"data_digest": ("MD5",)},
        {"default_time2wait": 3601},
        {"chap_algorithms": (4,)},
    ],
)
def test_limits_validation(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        replace(TargetLimits(), **changes)


def test_default_limits() -> None:
    limits = TargetLimits()
    assert limits.max_recv_data_segment_length == 262144
    assert limits.max_connections == 8
    assert limits.header_digest == ("CRC32C", "None")
