"""The LU designator the initiator reads from INQUIRY VPD 0x83."""

from __future__ import annotations

import pytest

from reservoir.agent.initiator import ProtocolError
from reservoir.agent.initiator._identity import parse_device_identification


def designator(kind: int, value: bytes, association: int = 0, code_set: int = 1) -> bytes:
    return bytes((code_set, association << 4 | kind, 0, len(value))) + value


def page(*descriptors: bytes) -> bytes:
    body = b"".join(descriptors)
    return bytes((0, 0x83)) + len(body).to_bytes(2, "big") + body


NAA = bytes.fromhex("6001405aabbccddeeff0011223344556")


def test_the_lus_naa_is_preferred_to_its_vendor_id_and_to_port_designators() -> None:
    data = page(
        designator(0x1, b"RESERVORserial"),
        designator(0x8, b"iqn.x,t,0x1\0", association=1, code_set=3),
        designator(0x3, NAA),
    )
    assert parse_device_identification(data) == "naa." + NAA.hex()


def test_a_page_with_only_a_vendor_id_gives_it() -> None:
    assert parse_device_identification(page(designator(0x1, b"AB"))) == "t10.4142"


def test_a_page_with_only_port_designators_gives_none() -> None:
    assert parse_device_identification(page(designator(0x3, NAA, association=1))) is None


def test_a_truncated_descriptor_is_ignored_not_read_past_the_page() -> None:
    data = page(designator(0x3, NAA))[:-4]
    assert parse_device_identification(data) is None or data.endswith(NAA[:-4])


def test_another_page_is_refused() -> None:
    with pytest.raises(ProtocolError):
        parse_device_identification(bytes((0, 0x80, 0, 0)))
