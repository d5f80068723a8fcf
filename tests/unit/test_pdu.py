"""The PDU codec: round trips, byte layouts, framing, digests, strict validation."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi._header import Header
from reservoir.agent.iscsi.digest import digest
from reservoir.agent.iscsi.receiver import Receiver

u32 = st.integers(0, 0xFFFFFFFF)
u16 = st.integers(0, 0xFFFF)
lun = st.binary(min_size=8, max_size=8)
payload = st.binary(max_size=600)


_HAS_F_BIT = (P.ScsiCommand, P.TextRequest, P.TextResponse, P.DataOut, P.DataIn)


def _strategy_for(cls: type[P.Pdu]) -> st.SearchStrategy[P.Pdu]:
    """Random instances of a PDU class, each field in its wire range."""
    ranges: dict[str, st.SearchStrategy[object]] = {
        "isid": st.binary(min_size=6, max_size=6),
        "lun": lun,
        "csg": st.sampled_from([0, 1, 3]),
        "nsg": st.sampled_from([0, 1, 3]),
        "attr": st.integers(0, 7),
        "function": st.integers(1, 127),
        "reason": st.integers(0, 127),
        "snack_type": st.integers(0, 15),
        "version_max": st.integers(0, 255),
        "version_min": st.integers(0, 255),
        "version_active": st.integers(0, 255),
        "response": st.integers(0, 255),
        "status": st.integers(0, 255),
        "status_class": st.integers(0, 255),
        "status_detail": st.integers(0, 255),
        "event": st.integers(0, 255),
        "vcode": st.integers(0, 255),
    }
    sixteen = {"tsih", "cid", "time2wait", "time2retain", "parameter1", "parameter2", "parameter3"}
    kwargs: dict[str, st.SearchStrategy[object]] = {}
    for f in dataclasses.fields(cls):
        if f.name in ("ahs", "immediate", "cdb", "span"):
            continue
        if f.name == "final" and cls not in _HAS_F_BIT:
            continue
        if f.name == "data":
            if cls.OPCODE not in P._NO_DATA:
                kwargs["data"] = payload
        elif f.name in ranges:
            kwargs[f.name] = ranges[f.name]
        elif f.name in sixteen:
            kwargs[f.name] = u16
        elif f.type in ("bool", bool):
            kwargs[f.name] = st.booleans()
        else:
            kwargs[f.name] = u32
    if cls is P.ScsiCommand:
        kwargs["cdb"] = st.binary(min_size=16, max_size=16)
    if cls is P.Reject:
        kwargs.pop("itt", None)
    if cls.OPCODE in P.IMMEDIATE_ALLOWED:
        kwargs["immediate"] = st.booleans()
    return st.builds(cls, **kwargs)


def _roundtrip(pdu: P.Pdu, hd: bool, dd: bool) -> P.Pdu:
    rx = Receiver(header_digest=hd, data_digest=dd)
    frames = rx.feed(P.encode_bytes(pdu, header_digest=hd, data_digest=dd))
    assert len(frames) == 1 and rx.pending() == 0
    return P.decode(*frames[0])


def _normalize(pdu: P.Pdu) -> P.Pdu:
    pdu.data = bytes(pdu.data)
    if isinstance(pdu, P.DataIn) and not pdu.has_status:
        pdu.statsn = pdu.status = 0
    return pdu


@pytest.mark.parametrize("cls", list(P.PDU_CLASSES.values()), ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), hd=st.booleans(), dd=st.booleans())
def test_every_pdu_type_round_trips_with_and_without_digests(
    cls: type[P.Pdu], data: st.DataObject, hd: bool, dd: bool
) -> None:
    pdu = _normalize(data.draw(_strategy_for(cls)))
    back = _normalize(_roundtrip(pdu, hd, dd))
    assert back == pdu


def test_bhs_is_48_bytes_with_lengths_in_bytes_4_to_7() -> None:
    pdu = P.ScsiCommand(itt=7, data=b"x" * 5, write=True, expected_length=512)
    header = pdu.encode_header()
    assert len(header) == 48
    assert header[0] == 0x01
    assert header[4] == 0
    assert header[5:8] == (5).to_bytes(3, "big")
    assert header[16:20] == (7).to_bytes(4, "big")


def test_login_request_layout_matches_rfc() -> None:
    pdu = P.LoginRequest(transit=True, csg=1, nsg=3, isid=bytes.fromhex("400001370000"), cid=9)
    header = pdu.encode_header()
    assert header[0] == 0x43  # immediate + opcode 3
    assert header[1] == 0x80 | (1 << 2) | 3
    assert header[8:14] == bytes.fromhex("400001370000")
    assert header[20:22] == (9).to_bytes(2, "big")


def test_data_segment_is_padded_to_four_bytes() -> None:
    wire = P.encode_bytes(P.NopOut(itt=1, data=b"abcde"))
    assert len(wire) == 48 + 8
    assert wire[-3:] == b"\0\0\0"


class OpenFile:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def test_a_file_span_segment_has_the_header_of_the_same_bytes_and_passes_through(
    tmp_path: Path,
) -> None:
    content = bytes(range(256)) * 8
    (tmp_path / "f").write_bytes(content)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        span = P.FileSpan(OpenFile(fd), 100, 1001)
        out = P.DataOut(itt=3, ttt=4, offset=100, span=span)
        parts = P.encode_parts(out, header_digest=True)
        same = P.encode(dataclasses.replace(out, span=None, data=span.read()), header_digest=True)
        assert parts[0] == same[0]  # DataSegmentLength 1001, the header digest over it
        assert parts[1] is span and parts[2] == same[2] == b"\0\0\0"
        assert span.read() == content[100:1101]
        assert span[1:] == P.FileSpan(span.source, 101, 1000) and len(span[990:2000]) == 11
        with pytest.raises(ValueError, match="data digest"):
            P.encode_parts(out, data_digest=True)
        with pytest.raises(ValueError, match="encode_parts"):
            P.encode(out)
        with pytest.raises(OSError, match="ends before byte 2049"):
            P.FileSpan(span.source, 2000, 49).read()
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="closed"):
        P.FileSpan(OpenFile(-1), 0, 1).read()


def test_digest_of_32_zero_bytes_is_rfc_vector() -> None:
    assert digest(bytes(32)) == bytes.fromhex("aa36918a")


def test_digest_of_32_ff_bytes_is_rfc_vector() -> None:
    assert digest(b"\xff" * 32) == bytes.fromhex("43aba862")


def test_extended_cdb_travels_in_an_ahs() -> None:
    cdb = bytes(range(32))
    back = _roundtrip(P.ScsiCommand(cdb=cdb, itt=1), False, False)
    assert isinstance(back, P.ScsiCommand)
    assert back.cdb == cdb


def test_a_pdu_fed_byte_by_byte_arrives_once_whole() -> None:
    wire = P.encode_bytes(P.NopOut(itt=3, data=b"ping"), header_digest=True, data_digest=True)
    rx = Receiver(header_digest=True, data_digest=True)
    for i, byte in enumerate(wire[:-1]):
        assert rx.feed(bytes([byte])) == [], f"frame ready after {i + 1} bytes"
    frames = rx.feed(wire[-1:])
    assert len(frames) == 1 and P.decode(*frames[0]).itt == 3


def test_bad_header_digest_of_a_small_pdu_is_fatal() -> None:
    wire = bytearray(P.encode_bytes(P.NopOut(itt=3), header_digest=True))
    wire[50] ^= 1
    with pytest.raises(P.PduError) as err:
        Receiver(header_digest=True).feed(wire)
    assert err.value.fatal


def test_unknown_opcode_is_command_not_supported() -> None:
    header = bytearray(P.NopOut().encode_header())
    header[0] = 0x1C
    with pytest.raises(P.PduError) as err:
        P.decode(bytes(header))
    assert err.value.reason == P.RejectReason.COMMAND_NOT_SUPPORTED


def test_data_on_a_logout_request_is_protocol_error() -> None:
    header = bytearray(P.LogoutRequest().encode_header())
    header[7] = 4
    with pytest.raises(P.PduError) as err:
        P.decode(bytes(header), b"", b"abcd")
    assert err.value.reason == P.RejectReason.PROTOCOL_ERROR


def test_immediate_bit_on_data_out_is_protocol_error() -> None:
    header = bytearray(P.DataOut().encode_header())
    header[0] |= 0x40
    with pytest.raises(P.PduError, match="immediate"):
        P.decode(bytes(header))


def test_ahs_overrunning_its_area_is_refused() -> None:
    with pytest.raises(P.PduError):
        P.parse_ahs(b"\x00\x09\x01\x00" + bytes(4))


def test_truncated_bhs_is_fatal() -> None:
    with pytest.raises(P.PduError) as err:
        P.decode(bytes(20))
    assert err.value.fatal


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=48, max_size=200))
def test_decode_of_arbitrary_bytes_raises_only_pdu_error(blob: bytes) -> None:
    try:
        for frame in Receiver(header_digest=blob[0] & 1 == 1, max_data=1024).feed(blob):
            P.decode(*frame)
    except P.PduError:
        pass


def test_the_receiver_counts_padding_and_digests_in_what_is_missing() -> None:
    """What the target waits for in one wakeup (SO_RCVLOWAT): the rest of the PDU whose
    header has arrived, padding and digests included; 0 before a header."""
    data = bytes(range(256)) * 4 + b"x"  # 1025 bytes: 3 of padding
    wire = P.encode_bytes(P.NopOut(itt=1, data=data), data_digest=True)
    assert len(wire) == 48 + 1028 + 4
    rx = Receiver(data_digest=True)
    assert rx.missing() == 0
    rx.feed(wire[:20])
    assert rx.missing() == 0  # no whole header yet
    rx.feed(wire[20:100])
    assert rx.missing() == len(wire) - 100
    assert len(rx.feed(wire[100:])) == 1 and rx.missing() == 0


def _word(header: bytes, at: int) -> int:
    return int.from_bytes(header[at : at + 4], "big")


def test_declared_headers_put_fields_where_rfc_7143_says() -> None:
    r2t = P.R2T(itt=1, ttt=2, statsn=3, expcmdsn=4, maxcmdsn=5, r2tsn=6, offset=7, length=8)
    h = r2t.encode_header()
    assert [_word(h, at) for at in range(16, 48, 4)] == [1, 2, 3, 4, 5, 6, 7, 8]
    resp = P.ScsiResponse(response=1, status=2, underflow=True, residual=512, expdatasn=9)
    h = resp.encode_header()
    assert (h[1], h[2], h[3], _word(h, 36), _word(h, 44)) == (0x82, 1, 2, 9, 512)
    login = P.LoginResponse(status_class=2, status_detail=1, tsih=0x1234, version_active=0)
    h = login.encode_header()
    assert h[36:38] == b"\x02\x01" and h[14:16] == b"\x12\x34"
    event = P.AsyncMessage(event=1, vcode=2, parameter1=3, parameter2=4, parameter3=5)
    h = event.encode_header()
    assert h[36:48] == bytes([1, 2, 0, 3, 0, 4, 0, 5]) + bytes(4)
    bye = P.LogoutResponse(time2wait=2, time2retain=20)
    assert bye.encode_header()[40:44] == b"\x00\x02\x00\x14"


DATA_IN = st.builds(
    P.DataIn, final=st.booleans(), ack=st.booleans(), has_status=st.booleans(),
    status=st.integers(0, 255), statsn=u32, datasn=u32, offset=u32, residual=u32,
    itt=u32, ttt=u32, data=payload,
)  # fmt: skip


@given(DATA_IN)
def test_the_data_in_fast_encoder_is_the_declared_header_under_the_s_bit_rule(
    pdu: P.DataIn,
) -> None:
    fast = pdu.encode_header()
    if not pdu.has_status:  # without the S bit, status and StatSN are sent as zeros
        pdu.status = pdu.statsn = 0
    assert fast == pdu.declared_header()


def test_a_header_declaration_with_the_wrong_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="8 words"):
        Header(words=("itt",))
    with pytest.raises(ValueError, match="8 bytes"):
        Header(b8=(("lun", 6),))
