"""The logical units of one target, addressed by the 8-byte LUN field."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from . import _cdb as op
from ._inquiry import absent_lun_inquiry
from ._lu import LogicalUnit
from ._luns import decode_lun, encode_lun, report_luns
from ._sense import (
    INVALID_FIELD_IN_CDB,
    LOGICAL_UNIT_NOT_SUPPORTED,
    CheckConditionError,
    SenseKey,
    build_sense,
    check_condition,
)
from ._state import Identity
from ._types import Nexus, ScsiCommand, ScsiResult, Status

_ABSENT = Identity(
    lun=-1,
    naa=bytes(16),
    serial="",
    vendor="RESERVOR",
    product="NO LOGICAL UNIT",
    revision="0001",
    target_name="",
    target_port_id=1,
)


class LunTable:
    """Routes commands to logical units; answers REPORT LUNS for every LUN and the
    commands sent to LUNs without a logical unit (SPC-4 6.6.2, SAM-5 5.9)."""

    def __init__(self, units: Mapping[int, LogicalUnit]) -> None:
        self._units = dict(units)
        self.units: Mapping[int, LogicalUnit] = MappingProxyType(self._units)

    @staticmethod
    def decode_lun(lun_field: bytes | bytearray | memoryview) -> int:
        return decode_lun(lun_field)

    @staticmethod
    def encode_lun(lun: int) -> bytes:
        return encode_lun(lun)

    async def execute(self, lun: int, cmd: ScsiCommand) -> ScsiResult:
        cdb = cmd.cdb
        if cdb and cdb[0] == op.REPORT_LUNS:
            try:
                return report_luns(cdb, self._units)
            except (CheckConditionError, IndexError) as exc:
                return _illegal(exc)
        unit = self._units.get(lun)
        if unit is not None:
            return await unit.execute(cmd)
        return _absent(cdb)

    def data_out_length(self, lun: int, cdb: bytes) -> int:
        """Bytes of Data-Out ``cdb`` asks for on ``lun`` (0 if none or no such LUN);
        the transport compares it with the Expected Data Transfer Length to report
        write residuals (RFC 7143 11.4.5.2)."""
        unit = self._units.get(lun)
        return 0 if unit is None else unit.data_out_length(cdb)

    def reset_all(self, nexus: Nexus | None) -> None:
        """TARGET WARM RESET: every logical unit is reset."""
        for unit in self._units.values():
            unit.target_reset(nexus)

    def nexus_lost(self, nexus: Nexus) -> None:
        for unit in self._units.values():
            unit.nexus_lost(nexus)


def _illegal(exc: Exception) -> ScsiResult:
    if isinstance(exc, CheckConditionError):
        return exc.result()
    return CheckConditionError(SenseKey.ILLEGAL_REQUEST, INVALID_FIELD_IN_CDB).result()


def _absent(cdb: bytes) -> ScsiResult:
    """INQUIRY gets qualifier 011b data, REQUEST SENSE the 25/00 sense, the rest
    CHECK CONDITION, ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED."""
    try:
        if cdb and cdb[0] == op.INQUIRY:
            return absent_lun_inquiry(_ABSENT, cdb)
        if cdb and cdb[0] == op.REQUEST_SENSE:
            sense = build_sense(SenseKey.ILLEGAL_REQUEST, *LOGICAL_UNIT_NOT_SUPPORTED)
            return ScsiResult(Status.GOOD, sense[: cdb[4]])
    except IndexError as exc:
        return _illegal(exc)
    return check_condition(SenseKey.ILLEGAL_REQUEST, LOGICAL_UNIT_NOT_SUPPORTED)
