"""LUN addressing (SAM-5 4.7) and REPORT LUNS (SPC-4 6.33)."""

from __future__ import annotations

from collections.abc import Iterable

from ._cdb import truncate, u32
from ._sense import invalid_field_in_cdb
from ._types import ScsiResult, Status

NO_LUN = -1
MAX_FLAT_LUN = 0x3FFF
# SELECT REPORT values: which report the full list, which an empty one.
_REPORT_ALL = frozenset({0x00, 0x02, 0x11})
_REPORT_NONE = frozenset({0x01, 0x10, 0x12})


def encode_lun(lun: int) -> bytes:
    """The 8-byte LUN field: peripheral device addressing below 256, else flat."""
    if 0 <= lun < 256:
        return bytes((0, lun)) + bytes(6)
    if 256 <= lun <= MAX_FLAT_LUN:
        return bytes((0x40 | (lun >> 8), lun & 0xFF)) + bytes(6)
    raise ValueError(f"LUN {lun} is not addressable with a single level")


def decode_lun(field: bytes | bytearray | memoryview) -> int:
    """The LUN of a single-level peripheral or flat LUN field; :data:`NO_LUN` (-1)
    for any other addressing, which then matches no logical unit."""
    if type(field) is bytes and (lun := _PERIPHERAL.get(field)) is not None:
        return lun  # the usual field, decoded with every command: looked up
    if len(field) < 2 or any(field[2:8]):
        return NO_LUN
    method, high, low = field[0] >> 6, field[0] & 0x3F, field[1]
    if method == 0:
        return low if high == 0 else NO_LUN
    if method == 1:
        return (high << 8) | low
    return NO_LUN


def report_luns(cdb: bytes, luns: Iterable[int]) -> ScsiResult:
    """REPORT LUNS: the LUN list, cut to the allocation length."""
    select = cdb[2]
    if select not in _REPORT_ALL and select not in _REPORT_NONE:
        raise invalid_field_in_cdb(2)
    chosen = sorted(luns) if select in _REPORT_ALL else []
    body = b"".join(encode_lun(lun) for lun in chosen)
    data = len(body).to_bytes(4, "big") + bytes(4) + body
    return ScsiResult(Status.GOOD, truncate(data, u32(cdb, 6)))


_PERIPHERAL: dict[bytes, int] = {encode_lun(lun): lun for lun in range(256)}
