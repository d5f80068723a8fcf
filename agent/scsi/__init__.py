"""The SCSI command set of a disk (SPC-4 / SBC-3), independent of the transport.

The iSCSI target hands every SCSI Command PDU to :meth:`LunTable.execute` as a
:class:`ScsiCommand` and sends back the :class:`ScsiResult`'s Data-In, status and
sense. Logical units run over a :class:`Backend` (reservoir.agent.storage).
"""

from ._cdb import DATA_READS, DATA_WRITES
from ._change_mark import CHANGE_MARK_PAGE, decode_change_mark
from ._hash_range import (
    ALG_READ_BACK,
    ALG_RECEIPT,
    ALG_XXH3_128,
    HASH_RANGE_OPCODE,
    MAX_HASH_BYTES,
)
from ._lu import LogicalUnit
from ._lun_table import LunTable
from ._luns import decode_lun, encode_lun
from ._receipts import receipt_digest
from ._sense import SenseKey, build_sense, decode_sense, sense_information
from ._sense_names import describe_sense, describe_status
from ._state import derive_naa
from ._types import Backend, Hasher, Nexus, ScsiCommand, ScsiResult, Status

__all__ = [
    "ALG_READ_BACK",
    "ALG_RECEIPT",
    "ALG_XXH3_128",
    "CHANGE_MARK_PAGE",
    "DATA_READS",
    "DATA_WRITES",
    "HASH_RANGE_OPCODE",
    "MAX_HASH_BYTES",
    "Backend",
    "Hasher",
    "LogicalUnit",
    "LunTable",
    "Nexus",
    "ScsiCommand",
    "ScsiResult",
    "SenseKey",
    "Status",
    "build_sense",
    "decode_change_mark",
    "decode_lun",
    "decode_sense",
    "derive_naa",
    "describe_sense",
    "describe_status",
    "encode_lun",
    "receipt_digest",
    "sense_information",
]
