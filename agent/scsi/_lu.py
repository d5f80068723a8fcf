"""A logical unit: a direct access block device (SBC-3) over a storage backend."""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable

from . import _cdb as op
from ._device import (
    pre_fetch_10,
    pre_fetch_16,
    prevent_allow_medium_removal,
    read_capacity_10,
    read_capacity_16,
    request_sense,
    start_stop_unit,
    synchronize_cache_10,
    synchronize_cache_16,
    test_unit_ready,
)
from ._disk import (
    compare_and_write,
    orwrite_16,
    read_6,
    read_10,
    read_12,
    read_16,
    verify_10,
    verify_12,
    verify_16,
    write_6,
    write_10,
    write_12,
    write_16,
    write_and_verify_10,
    write_and_verify_12,
    write_and_verify_16,
)
from ._hash_range import hash_range
from ._inquiry import inquiry, report_target_port_groups
from ._luns import report_luns
from ._modepages import mode_select, mode_sense
from ._opcodes import report_supported_opcodes
from ._persistent import persistent_reserve_in, persistent_reserve_out, release, reserve
from ._provisioning import get_lba_status, unmap, write_same_10, write_same_16
from ._sense import (
    BUS_DEVICE_RESET_FUNCTION_OCCURRED,
    CAPACITY_DATA_HAS_CHANGED,
    INTERNAL_TARGET_FAILURE,
    INVALID_FIELD_IN_CDB,
    POWER_ON_RESET,
    CheckConditionError,
    SenseKey,
    check_condition,
    invalid_field_in_cdb,
    invalid_opcode,
)
from ._state import Identity, LuState, derive_naa
from ._transfer import data_out_length
from ._types import Backend, Nexus, ScsiCommand, ScsiResult, Status

log = logging.getLogger(__name__)

Handler = Callable[[LuState, ScsiCommand], Awaitable[ScsiResult]]

# INQUIRY, REPORT LUNS and REQUEST SENSE do not report unit attentions (SAM-5 5.14).
_UA_EXEMPT = frozenset({op.INQUIRY, op.REPORT_LUNS, op.REQUEST_SENSE})
# READ(10)/(16): (flags, LBA, blocks) layout, group number byte, CDB length.
_PLAIN_READS = {op.READ_10: (op.RW10, 6, 10), op.READ_16: (op.RW16, 14, 16)}


async def _service_action_in(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    action = cmd.cdb[1] & 0x1F
    if action == op.SA_READ_CAPACITY_16:
        return await read_capacity_16(st, cmd)
    if action == op.SA_GET_LBA_STATUS:
        return await get_lba_status(st, cmd)
    raise invalid_field_in_cdb(1, 4)


async def _maintenance_in(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    action = cmd.cdb[1] & 0x1F
    if action == op.SA_REPORT_SUPPORTED_OPCODES:
        return await report_supported_opcodes(st, cmd)
    if action == op.SA_REPORT_TARGET_PORT_GROUPS:
        return await report_target_port_groups(st, cmd)
    raise invalid_field_in_cdb(1, 4)


async def _report_luns(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    return report_luns(cmd.cdb, (st.identity.lun,))


_HANDLERS: dict[int, Handler] = {
    op.TEST_UNIT_READY: test_unit_ready,
    op.REQUEST_SENSE: request_sense,
    op.READ_6: read_6,
    op.WRITE_6: write_6,
    op.INQUIRY: inquiry,
    op.MODE_SELECT_6: mode_select,
    op.RESERVE_6: reserve,
    op.RELEASE_6: release,
    op.MODE_SENSE_6: mode_sense,
    op.START_STOP_UNIT: start_stop_unit,
    op.PREVENT_ALLOW_MEDIUM_REMOVAL: prevent_allow_medium_removal,
    op.READ_CAPACITY_10: read_capacity_10,
    op.READ_10: read_10,
    op.WRITE_10: write_10,
    op.WRITE_AND_VERIFY_10: write_and_verify_10,
    op.VERIFY_10: verify_10,
    op.PRE_FETCH_10: pre_fetch_10,
    op.SYNCHRONIZE_CACHE_10: synchronize_cache_10,
    op.WRITE_SAME_10: write_same_10,
    op.UNMAP: unmap,
    op.MODE_SELECT_10: mode_select,
    op.RESERVE_10: reserve,
    op.RELEASE_10: release,
    op.MODE_SENSE_10: mode_sense,
    op.PERSISTENT_RESERVE_IN: persistent_reserve_in,
    op.PERSISTENT_RESERVE_OUT: persistent_reserve_out,
    op.READ_16: read_16,
    op.COMPARE_AND_WRITE: compare_and_write,
    op.WRITE_16: write_16,
    op.ORWRITE_16: orwrite_16,
    op.WRITE_AND_VERIFY_16: write_and_verify_16,
    op.VERIFY_16: verify_16,
    op.PRE_FETCH_16: pre_fetch_16,
    op.SYNCHRONIZE_CACHE_16: synchronize_cache_16,
    op.WRITE_SAME_16: write_same_16,
    op.SERVICE_ACTION_IN_16: _service_action_in,
    op.REPORT_LUNS: _report_luns,
    op.MAINTENANCE_IN: _maintenance_in,
    op.READ_12: read_12,
    op.WRITE_12: write_12,
    op.WRITE_AND_VERIFY_12: write_and_verify_12,
    op.VERIFY_12: verify_12,
    op.HASH_RANGE: hash_range,
}


def _naa(device_id: bytes | None, seed: str) -> bytes:
    """``device_id`` itself when it is a 16-byte NAA 6h designator, else derived."""
    if device_id is not None and len(device_id) == 16 and device_id[0] >> 4 == 6:
        return bytes(device_id)
    return derive_naa(device_id if device_id is not None else seed.encode())


class LogicalUnit:
    """One SBC-3 logical unit; :meth:`execute` never raises (except on cancellation).

    ``ua_on_new_nexus`` establishes POWER ON, RESET, OR BUS DEVICE RESET OCCURRED
    for every I_T nexus on its first command (see :mod:`._unit_attention`).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        lun: int,
        serial: str,
        target_name: str,
        device_id: bytes | None = None,
        vendor: str = "RESERVOR",
        product: str = "VOLUME",
        revision: str = "0001",
        target_port_id: int = 1,
        write_cache: bool = True,
        read_only: bool = False,
        ua_on_new_nexus: bool = True,
    ) -> None:
        identity = Identity(
            lun=lun,
            naa=_naa(device_id, f"{target_name}/{lun}/{serial}"),
            serial=serial,
            vendor=vendor,
            product=product,
            revision=revision,
            target_name=target_name,
            target_port_id=target_port_id,
        )
        self._st = LuState(
            backend,
            identity,
            write_cache=write_cache,
            read_only=read_only,
            ua_on_new_nexus=ua_on_new_nexus,
        )
        self._handlers = dict(_HANDLERS)
        if not self._st.thin:
            del self._handlers[op.UNMAP]
        self._cached: Callable[[int, int], bytes | None] | None = getattr(
            backend, "read_cached", None
        )

    @property
    def lun(self) -> int:
        return self._st.identity.lun

    @property
    def backend(self) -> Backend:
        return self._st.backend

    @property
    def identity(self) -> Identity:
        return self._st.identity

    @property
    def num_blocks(self) -> int:
        return self._st.num_blocks

    @property
    def block_size(self) -> int:
        return self._st.block_size

    def read_cached(self, nexus: Nexus, cdb: bytes) -> bytes | None:
        """The data of a plain READ(10)/(16) served at once from the page cache (its
        status GOOD), or None.

        None whenever anything needs :meth:`execute`'s full path: a unit
        attention to report, a nexus not seen yet, a reservation, any flag,
        group or control bit, a length or range to refuse, data not cached.
        It answers only what :meth:`execute` would answer GOOD with the same data.
        """
        st = self._st
        plain = _PLAIN_READS.get(cdb[0]) if cdb else None
        if plain is None or self._cached is None or st.ua.pending or st.res.active:
            return None
        layout, group, length = plain
        if nexus not in st.ua.seen or len(cdb) < length or cdb[group] or cdb[length - 1]:
            return None
        flags, lba, blocks = layout.unpack_from(cdb)
        if flags or not 0 < blocks <= st.max_transfer or lba + blocks > st.num_blocks:
            return None
        bs = st.block_size
        return self._cached(lba * bs, blocks * bs)

    async def execute(self, cmd: ScsiCommand) -> ScsiResult:
        """Runs one command: unit attention, reservation check, then the handler."""
        st = self._st
        cdb = cmd.cdb
        nexus = cmd.nexus
        ua = st.ua
        if nexus not in ua.seen:
            ua.first_contact(nexus)
        opcode = cdb[0] if cdb else -1
        if ua.pending and opcode not in _UA_EXEMPT:
            code = ua.pop(nexus)
            if code is not None:
                return check_condition(SenseKey.UNIT_ATTENTION, code, descriptor=st.mode.d_sense)
        handler = self._handlers.get(opcode)
        if handler is None:
            return invalid_opcode().result(st.mode.d_sense)
        if st.res.active and st.res.conflicts(nexus, cdb):
            return ScsiResult(Status.RESERVATION_CONFLICT)
        try:
            return await handler(st, cmd)
        except CheckConditionError as exc:
            return exc.result(st.mode.d_sense)
        except (IndexError, struct.error):
            # The CDB is shorter than its operation code requires.
            return check_condition(
                SenseKey.ILLEGAL_REQUEST, INVALID_FIELD_IN_CDB, descriptor=st.mode.d_sense
            )
        except Exception:
            log.exception("LUN %d: %s failed", st.identity.lun, cdb[:1].hex())
            return check_condition(
                SenseKey.HARDWARE_ERROR, INTERNAL_TARGET_FAILURE, descriptor=st.mode.d_sense
            )

    def data_out_length(self, cdb: bytes) -> int:
        """Bytes of Data-Out ``cdb`` asks for (for write residuals, RFC 7143 11.4.5.2)."""
        return data_out_length(cdb, self._st.block_size)

    def reset(self, nexus: Nexus | None) -> None:
        """LOGICAL UNIT RESET (SAM-5 5.11.3): drops the SPC-2 reservation and
        establishes BUS DEVICE RESET FUNCTION OCCURRED for every I_T nexus the LU
        has seen, the requesting one included (libiscsi MultipathIO.Reset checks
        every path); ``nexus`` is accepted for symmetry with the transport."""
        self._reset(BUS_DEVICE_RESET_FUNCTION_OCCURRED)

    def target_reset(self, nexus: Nexus | None) -> None:
        """TARGET WARM/COLD RESET: as a LU reset, reported as 29/00."""
        self._reset(POWER_ON_RESET)

    def _reset(self, code: tuple[int, int]) -> None:
        res = self._st.res
        res.spc2_holder = None
        res.update()
        self._st.ua.establish(code)

    def nexus_lost(self, nexus: Nexus) -> None:
        """The session is gone: its SPC-2 reservation goes, registrations stay."""
        res = self._st.res
        if res.spc2_holder == nexus:
            res.spc2_holder = None
            res.update()
        self._st.ua.forget(nexus)

    def capacity_changed(self) -> bool:
        """Re-reads the backend size; on a change every nexus gets 2A/09."""
        changed = self._st.refresh_capacity()
        if changed:
            self._st.ua.establish(CAPACITY_DATA_HAS_CHANGED)
        return changed
