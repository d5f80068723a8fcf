"""The initiator's side of operational negotiation (RFC 7143 §13): the values in force
come from the same key table and result functions the target answers with
(reservoir.agent.iscsi.negotiation), so both ends agree on every parameter."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reservoir.agent.initiator._errors import LoginError
from reservoir.agent.initiator._login import LoginOptions, resolve
from reservoir.agent.iscsi.negotiation import (
    OperationalNegotiator,
    TargetLimits,
    outcome,
)
from reservoir.agent.iscsi.text import TextError

OFFER = LoginOptions("iqn.2026-11.org.example:host", "iqn.2026-11.org.example:vol")

OFFERS = [
    OFFER,
    replace(OFFER, header_digest=True, data_digest=True),
    replace(OFFER, max_burst_length=65536, first_burst_length=131072),
    replace(OFFER, immediate_data=False, initial_r2t=True),
    replace(OFFER, max_recv_data_segment_length=8192),
]
LIMITS = [
    TargetLimits(),
    TargetLimits(header_digest=("None",), data_digest=("CRC32C", "None")),
    TargetLimits(max_burst_length=131072, first_burst_length=8192, immediate_data=False),
    TargetLimits(initial_r2t=True, max_outstanding_r2t=1, max_recv_data_segment_length=4096),
]


@pytest.mark.parametrize("limits", LIMITS)
@pytest.mark.parametrize("offer", OFFERS)
def test_initiator_and_target_agree_on_every_parameter(
    offer: LoginOptions, limits: TargetLimits
) -> None:
    target = OperationalNegotiator(limits)
    answers = dict(target.respond(offer.operational_keys()))
    answers.update(target.declarations())
    mine = resolve(offer, answers)
    theirs = target.session_params(
        initiator_name=offer.initiator_name, target_name=offer.target_name, initiator_alias=None
    )
    conn = target.connection_params()
    assert (mine.header_digest, mine.data_digest) == (conn.header_digest, conn.data_digest)
    assert mine.max_recv_data_segment_length == conn.max_recv_data_segment_length_initiator
    assert mine.target_max_recv_data_segment_length == conn.max_recv_data_segment_length_target
    assert mine.max_burst_length == theirs.max_burst_length
    assert mine.first_burst_length == theirs.first_burst_length
    assert mine.immediate_data == theirs.immediate_data
    assert mine.initial_r2t == theirs.initial_r2t
    assert mine.max_outstanding_r2t == theirs.max_outstanding_r2t


def test_an_answer_cannot_give_more_than_the_offer() -> None:
    offer = replace(OFFER, max_burst_length=65536, immediate_data=False)
    got = resolve(offer, {"MaxBurstLength": "1048576", "ImmediateData": "Yes"})
    assert got.max_burst_length == 65536 and got.immediate_data is False


def test_no_answer_or_a_reserved_one_is_the_default_within_the_offer() -> None:
    offer = replace(OFFER, max_burst_length=65536, first_burst_length=65536)
    got = resolve(offer, {"MaxBurstLength": "Reject", "InitialR2T": "NotUnderstood"})
    assert got.max_burst_length == 65536  # min(default 262144, the offer)
    assert got.first_burst_length == 65536
    assert got.initial_r2t is True  # OR with the default Yes
    assert got.target_max_recv_data_segment_length == 8192
    assert outcome("MaxOutstandingR2T", "1", None) == "1"


@pytest.mark.parametrize(
    ("answers", "says"),
    [
        ({"HeaderDigest": "CRC32C"}, "HeaderDigest"),  # we offered None only
        ({"MaxBurstLength": "lots"}, "MaxBurstLength"),
        ({"MaxBurstLength": "100"}, "MaxBurstLength"),  # below the key's range
        ({"MaxRecvDataSegmentLength": str(1 << 24)}, "MaxRecvDataSegmentLength"),
        ({"ImmediateData": "Perhaps"}, "ImmediateData"),
    ],
)
def test_an_answer_outside_the_rules_fails_the_login_naming_the_key(
    answers: dict[str, str], says: str
) -> None:
    with pytest.raises(LoginError, match=f"target answered {says}"):
        resolve(OFFER, answers)


def test_outcome_is_the_result_function_from_the_offering_side() -> None:
    assert outcome("MaxBurstLength", "65536", "262144") == "65536"
    assert outcome("DefaultTime2Wait", "2", "5") == "5"  # MAX
    assert outcome("DataDigest", "CRC32C,None", "CRC32C") == "CRC32C"
    with pytest.raises(TextError):
        outcome("DataDigest", "None", "CRC32C")
