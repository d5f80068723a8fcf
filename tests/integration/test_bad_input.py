"""Bad input gets the right protocol answer, changes no data, and the target keeps serving."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from reservoir.agent.iscsi import pdu as P
from reservoir.lab.peers import ReservoirTarget

from .conftest import ALLOWED, CHAP, IQN, LUN_SIZE, MUTUAL
from .rawclient import LoginFailedError, RawClient, read16, sense_key_asc, write16

pytestmark = pytest.mark.integration

ILLEGAL_REQUEST = 0x05
CHECK_CONDITION = 0x02


def _still_serves(target: ReservoirTarget) -> None:
    """Another initiator can log in and run a command."""
    with RawClient(target.host, target.port) as other:
        other.login(IQN)
        other.clear_unit_attention()
        assert other.scsi(bytes(6)).status == 0  # TEST UNIT READY


def _logged_in(target: ReservoirTarget, **kw: bool) -> RawClient:
    client = RawClient(target.host, target.port, **kw).connect()  # type: ignore[arg-type]
    client.login(IQN)
    client.clear_unit_attention()
    return client


# ---------------------------------------------------------------- framing and PDUs


def test_truncated_pdu_then_hangup_leaves_target_serving(target: ReservoirTarget) -> None:
    with _logged_in(target) as client:
        client.send_raw(P.NopOut(itt=9).encode_header()[:20])
    _still_serves(target)


def test_unknown_opcode_is_rejected_and_connection_continues(target: ReservoirTarget) -> None:
    with _logged_in(target) as client:
        header = bytearray(P.NopOut(itt=9).encode_header())
        header[0] = 0x1D
        client.send_raw(bytes(header))
        reject = client.recv()
        assert isinstance(reject, P.Reject)
        assert reject.reason == P.RejectReason.COMMAND_NOT_SUPPORTED
        assert bytes(reject.data[:48]) == bytes(header)
        assert client.nop(b"still").data == b"still"


def test_bad_header_digest_closes_only_that_connection(target: ReservoirTarget) -> None:
    with _logged_in(target, header_digest=True) as client:
        wire = bytearray(P.encode_bytes(P.NopOut(itt=5, immediate=True), header_digest=True))
        wire[49] ^= 0xFF
        client.send_raw(bytes(wire))
        assert client.closed_by_target()
    _still_serves(target)


def test_bad_data_digest_is_rejected_and_connection_continues(target: ReservoirTarget) -> None:
    with _logged_in(target, data_digest=True) as client:
        wire = bytearray(
            P.encode_bytes(P.NopOut(itt=5, immediate=True, data=b"abcd"), data_digest=True)
        )
        wire[-1] ^= 0xFF
        client.send_raw(bytes(wire))
        reject = client.recv()
        assert isinstance(reject, P.Reject)
        assert reject.reason == P.RejectReason.DATA_DIGEST_ERROR
        assert client.nop(b"ok").data == b"ok"


def test_oversized_data_segment_is_rejected_and_connection_closed(target: ReservoirTarget) -> None:
    with _logged_in(target) as client:
        limit = int(client.params.get("MaxRecvDataSegmentLength", "8192"))
        header = bytearray(P.NopOut(itt=5, immediate=True).encode_header())
        header[5:8] = (limit + 4).to_bytes(3, "big")
        client.send_raw(bytes(header))
        reject = client.recv()
        assert isinstance(reject, P.Reject)
        assert reject.reason == P.RejectReason.PROTOCOL_ERROR
        assert client.closed_by_target()
    _still_serves(target)


def test_first_pdu_other_than_login_closes_connection(target: ReservoirTarget) -> None:
    with RawClient(target.host, target.port) as client:
        client.send(P.NopOut(itt=1, immediate=True))
        assert client.closed_by_target()
    _still_serves(target)


def test_garbage_before_login_closes_connection(target: ReservoirTarget) -> None:
    with RawClient(target.host, target.port) as client:
        client.send_raw(os.urandom(200))
        assert client.closed_by_target()
    _still_serves(target)


# ---------------------------------------------------------------- login


def test_unknown_target_name_fails_login_with_target_not_found(target: ReservoirTarget) -> None:
    with RawClient(target.host, target.port) as client, pytest.raises(LoginFailedError) as err:
        client.login("iqn.2026-11.org.reservoir:nope")
    assert err.value.status == (0x02, 0x03)


def test_wrong_chap_secret_fails_login_with_authentication_failure(
    chap_target: ReservoirTarget,
) -> None:
    with (
        RawClient(chap_target.host, chap_target.port) as client,
        pytest.raises(LoginFailedError) as err,
    ):
        client.login(IQN, initiator=ALLOWED, chap=(CHAP[0], "not-the-secret"))
    assert err.value.status == (0x02, 0x01)


def test_missing_chap_fails_login_with_authentication_failure(chap_target: ReservoirTarget) -> None:
    with (
        RawClient(chap_target.host, chap_target.port) as client,
        pytest.raises(LoginFailedError) as err,
    ):
        client.login(IQN, initiator=ALLOWED)
    assert err.value.status == (0x02, 0x01)


def test_initiator_outside_acl_fails_login_with_authorization_failure(
    chap_target: ReservoirTarget,
) -> None:
    with (
        RawClient(chap_target.host, chap_target.port) as client,
        pytest.raises(LoginFailedError) as err,
    ):
        client.login(IQN, initiator="iqn.2026-11.org.example:stranger", chap=CHAP)
    assert err.value.status == (0x02, 0x02)


def test_mutual_chap_login_succeeds_and_serves(chap_target: ReservoirTarget) -> None:
    with RawClient(chap_target.host, chap_target.port) as client:
        client.login(IQN, initiator=ALLOWED, chap=CHAP, mutual=MUTUAL)
        client.clear_unit_attention()
        assert client.scsi(bytes(6)).status == 0


def test_one_way_chap_login_succeeds(chap_target: ReservoirTarget) -> None:
    with RawClient(chap_target.host, chap_target.port) as client:
        client.login(IQN, initiator=ALLOWED, chap=CHAP)
        assert client.nop(b"x").data == b"x"


# ---------------------------------------------------------------- SCSI


def test_read_beyond_end_of_lun_is_lba_out_of_range(target: ReservoirTarget) -> None:
    last = LUN_SIZE // 512
    with _logged_in(target) as client:
        answer = client.scsi(read16(last - 1, 2), read=1024)
        assert answer.status == CHECK_CONDITION
        assert sense_key_asc(answer.sense) == (ILLEGAL_REQUEST, 0x21, 0x00)


def test_write_beyond_end_of_lun_changes_nothing(target: ReservoirTarget, lun_file: Path) -> None:
    last = LUN_SIZE // 512
    before = lun_file.read_bytes()[-4096:]
    with _logged_in(target) as client:
        answer = client.scsi(write16(last - 1, 8), data=b"\xee" * 4096, immediate=4096)
        assert answer.status == CHECK_CONDITION
        assert sense_key_asc(answer.sense) == (ILLEGAL_REQUEST, 0x21, 0x00)
    assert lun_file.read_bytes()[-4096:] == before


def test_unsupported_opcode_is_invalid_command_operation_code(target: ReservoirTarget) -> None:
    with _logged_in(target) as client:
        answer = client.scsi(struct.pack(">B15x", 0xEE))
        assert answer.status == CHECK_CONDITION
        assert sense_key_asc(answer.sense) == (ILLEGAL_REQUEST, 0x20, 0x00)
