"""PERSISTENT RESERVE IN/OUT (SPC-4 6.15-6.16, 5.12) and RESERVE/RELEASE (SPC-2 7.21-7.24).

Registrations belong to I_T nexuses; ALL_TG_PT, SPEC_I_PT and APTPL are not
supported (REPORT CAPABILITIES says so), so the parameter list is always 24 bytes.
"""

from __future__ import annotations

from . import _cdb as op
from ._cdb import truncate, u16, u32, u64
from ._reservations import ALL_REGISTRANTS, PR_TYPES, REGISTRANTS_ONLY, Reservations
from ._sense import (
    INVALID_RELEASE_OF_PERSISTENT_RESERVATION,
    REGISTRATIONS_PREEMPTED,
    RESERVATIONS_PREEMPTED,
    RESERVATIONS_RELEASED,
    CheckConditionError,
    SenseKey,
    invalid_field_in_cdb,
    invalid_field_in_parameters,
    parameter_list_length_error,
)
from ._state import LuState, tpgt_of
from ._types import Nexus, ScsiCommand, ScsiResult, Status

READ_KEYS, READ_RESERVATION, REPORT_CAPABILITIES, READ_FULL_STATUS = 0, 1, 2, 3
REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT, PREEMPT_AND_ABORT, REGISTER_AND_IGNORE = range(7)
PARAMETER_LIST_LENGTH = 24
# REPORT CAPABILITIES type mask: WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX | EX_AC_AR.
TYPE_MASK = bytes((0xEA, 0x01))
ISCSI_TRANSPORT_ID = 0x45  # format 01b (port identifier), protocol identifier 5h


def _good() -> ScsiResult:
    return ScsiResult(Status.GOOD)


def _conflict() -> ScsiResult:
    return ScsiResult(Status.RESERVATION_CONFLICT)


# -- PERSISTENT RESERVE IN -----------------------------------------------------------


def _read_keys(res: Reservations) -> bytes:
    keys = b"".join(key.to_bytes(8, "big") for key in res.registrations.values())
    return res.generation.to_bytes(4, "big") + len(keys).to_bytes(4, "big") + keys


def _read_reservation(res: Reservations) -> bytes:
    head = res.generation.to_bytes(4, "big")
    if not res.pr_type:
        return head + bytes(4)
    descriptor = res.reservation_key().to_bytes(8, "big") + bytes(
        (0, 0, 0, 0, 0, res.pr_type, 0, 0)
    )
    return head + len(descriptor).to_bytes(4, "big") + descriptor


def _report_capabilities() -> bytes:
    """CRH=1 (SPC-4 5.12.3), TMV=1 with the six types; no SIP_C, ATP_C, PTPL_C."""
    return bytes((0, 8, 0x10, 0x80)) + TYPE_MASK + bytes(2)


def transport_id(nexus: Nexus) -> bytes:
    """iSCSI TransportID, initiator port format (SPC-4 7.6.4.6): NUL-padded to a
    multiple of four and at least 20 bytes."""
    name = nexus.initiator_port.encode("utf-8") + b"\x00"
    padded = name.ljust(max(20, -(-len(name) // 4) * 4), b"\x00")
    return bytes((ISCSI_TRANSPORT_ID, 0)) + len(padded).to_bytes(2, "big") + padded


def _read_full_status(st: LuState) -> bytes:
    res = st.res
    descriptors = bytearray()
    for nexus, key in res.registrations.items():
        holder = res.is_holder(nexus)
        tid = transport_id(nexus)
        descriptors += key.to_bytes(8, "big") + bytes(4)
        descriptors += bytes((0x01 if holder else 0, res.pr_type if holder else 0)) + bytes(4)
        descriptors += tpgt_of(nexus, st.identity.target_port_id).to_bytes(2, "big")
        descriptors += len(tid).to_bytes(4, "big") + tid
    return res.generation.to_bytes(4, "big") + len(descriptors).to_bytes(4, "big") + descriptors


async def persistent_reserve_in(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """PERSISTENT RESERVE IN: READ KEYS, READ RESERVATION, REPORT CAPABILITIES,
    READ FULL STATUS; the lengths inside are not cut by the allocation length."""
    cdb = cmd.cdb
    action = cdb[1] & 0x1F
    if action == READ_KEYS:
        data = _read_keys(st.res)
    elif action == READ_RESERVATION:
        data = _read_reservation(st.res)
    elif action == REPORT_CAPABILITIES:
        data = _report_capabilities()
    elif action == READ_FULL_STATUS:
        data = _read_full_status(st)
    else:
        raise invalid_field_in_cdb(1, 4)
    return ScsiResult(Status.GOOD, truncate(data, u16(cdb, 7)))


# -- PERSISTENT RESERVE OUT ----------------------------------------------------------


def _unregister(st: LuState, nexus: Nexus) -> None:
    """Removes a registration and the reservation it held (SPC-4 5.12.11.2.2)."""
    res = st.res
    del res.registrations[nexus]
    if res.pr_type in ALL_REGISTRANTS:
        if not res.registrations:
            res.clear_reservation()
    elif res.pr_type and res.pr_holder == nexus:
        released = res.pr_type
        res.clear_reservation()
        if released in REGISTRANTS_ONLY:
            st.ua.establish(RESERVATIONS_RELEASED, targets=res.registrations)


def _register(st: LuState, nexus: Nexus, key: int, new_key: int, ignore: bool) -> ScsiResult:
    """REGISTER / REGISTER AND IGNORE EXISTING KEY (SPC-4 5.12.7)."""
    res = st.res
    current = res.registrations.get(nexus)
    if current is None:
        if not ignore and key:
            return _conflict()
        if not new_key:
            return _good()
        res.registrations[nexus] = new_key
    else:
        if not ignore and key != current:
            return _conflict()
        if new_key:
            res.registrations[nexus] = new_key
        else:
            _unregister(st, nexus)
    res.generation = (res.generation + 1) & 0xFFFFFFFF
    return _good()


def _reserve(res: Reservations, nexus: Nexus, pr_type: int) -> ScsiResult:
    """RESERVE (SPC-4 5.12.9): a holder may repeat its reservation, nobody may change it."""
    if res.pr_type:
        return _good() if res.is_holder(nexus) and res.pr_type == pr_type else _conflict()
    res.set_reservation(None if pr_type in ALL_REGISTRANTS else nexus, pr_type)
    return _good()


def _release(st: LuState, nexus: Nexus, pr_type: int) -> ScsiResult:
    """RELEASE (SPC-4 5.12.11.2.2): only the holder releases, with the same type."""
    res = st.res
    if not res.pr_type or not res.is_holder(nexus):
        return _good()
    if res.pr_type != pr_type:
        raise CheckConditionError(
            SenseKey.ILLEGAL_REQUEST, INVALID_RELEASE_OF_PERSISTENT_RESERVATION
        )
    released = res.pr_type
    res.clear_reservation()
    if released in REGISTRANTS_ONLY or released in ALL_REGISTRANTS:
        st.ua.establish(RESERVATIONS_RELEASED, targets=res.registrations, exclude=nexus)
    return _good()


def _clear(st: LuState, nexus: Nexus) -> ScsiResult:
    """CLEAR (SPC-4 5.12.11.2.6): every registration and the reservation go."""
    res = st.res
    others = [other for other in res.registrations if other != nexus]
    res.registrations.clear()
    res.clear_reservation()
    res.generation = (res.generation + 1) & 0xFFFFFFFF
    st.ua.establish(RESERVATIONS_PREEMPTED, targets=others)
    return _good()


def _preempt(st: LuState, nexus: Nexus, victim_key: int, pr_type: int) -> ScsiResult:
    """PREEMPT / PREEMPT AND ABORT (SPC-4 5.12.11.2.4-5)."""
    res = st.res
    all_registrants = res.pr_type in ALL_REGISTRANTS
    takes_reservation = res.pr_type != 0 and (
        victim_key == 0 if all_registrants else victim_key == res.reservation_key()
    )
    if not takes_reservation and not victim_key:
        raise invalid_field_in_parameters(8)
    if victim_key:
        victims = [n for n, k in res.registrations.items() if k == victim_key]
        if not victims:
            return _conflict()
    else:
        victims = list(res.registrations)
    victims = [victim for victim in victims if victim != nexus]
    for victim in victims:
        del res.registrations[victim]
    if takes_reservation:
        res.set_reservation(None if pr_type in ALL_REGISTRANTS else nexus, pr_type)
    res.generation = (res.generation + 1) & 0xFFFFFFFF
    st.ua.establish(REGISTRATIONS_PREEMPTED, targets=victims)
    return _good()


def _out_parameters(cmd: ScsiCommand) -> tuple[int, int]:
    """(RESERVATION KEY, SERVICE ACTION RESERVATION KEY) of the 24-byte list."""
    if u32(cmd.cdb, 5) != PARAMETER_LIST_LENGTH or len(cmd.data_out) < PARAMETER_LIST_LENGTH:
        raise parameter_list_length_error()
    data = memoryview(cmd.data_out)
    flags = data[20]
    for bit, mask in ((3, 0x08), (2, 0x04), (0, 0x01)):  # SPEC_I_PT, ALL_TG_PT, APTPL
        if flags & mask:
            raise invalid_field_in_parameters(20, bit)
    return u64(data, 0), u64(data, 8)


async def persistent_reserve_out(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """PERSISTENT RESERVE OUT: REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT (AND ABORT),
    REGISTER AND IGNORE EXISTING KEY; the PR generation counts successful changes."""
    cdb = cmd.cdb
    action, scope, pr_type = cdb[1] & 0x1F, cdb[2] >> 4, cdb[2] & 0x0F
    if action > REGISTER_AND_IGNORE:
        raise invalid_field_in_cdb(1, 4)  # REGISTER AND MOVE, REPLACE LOST RESERVATION
    key, service_key = _out_parameters(cmd)
    nexus = cmd.nexus
    if action in (REGISTER, REGISTER_AND_IGNORE):
        return _register(st, nexus, key, service_key, action == REGISTER_AND_IGNORE)
    registrations = st.res.registrations
    if nexus not in registrations or registrations[nexus] != key:
        return _conflict()
    if action == CLEAR:
        return _clear(st, nexus)
    if scope:
        raise invalid_field_in_cdb(2, 7)
    if pr_type not in PR_TYPES:
        raise invalid_field_in_cdb(2, 3)
    if action == RESERVE:
        return _reserve(st.res, nexus, pr_type)
    if action == RELEASE:
        return _release(st, nexus, pr_type)
    return _preempt(st, nexus, service_key, pr_type)


# -- RESERVE / RELEASE (SPC-2) -----------------------------------------------------


async def reserve(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """RESERVE(6)/(10) of the whole logical unit; third-party and extent
    reservations are not supported; persistent registrations forbid it (SPC-4 5.12.3)."""
    cdb = cmd.cdb
    if cdb[1] & (0x1F if cdb[0] == op.RESERVE_6 else 0x12):
        raise invalid_field_in_cdb(1)
    res = st.res
    if res.registrations or res.pr_type:
        return _conflict()
    if res.spc2_holder is not None and res.spc2_holder != cmd.nexus:
        return _conflict()
    res.spc2_holder = cmd.nexus
    res.update()
    return _good()


async def release(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """RELEASE(6)/(10): releases the holder's reservation; from others it does nothing."""
    res = st.res
    if res.spc2_holder == cmd.nexus:
        res.spc2_holder = None
        res.update()
    return _good()
