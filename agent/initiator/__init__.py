"""The asyncio iSCSI initiator (RFC 7143): discovery, sessions, SCSI reads and writes.

>>> async with await Session.open(host, port, iqn, initiator_name=me) as session:
...     blocks, size = await session.capacity(0)
...     data = await session.read(0, 0, 8)
"""

from reservoir.agent.initiator._commands import ScsiReply, WriteData
from reservoir.agent.initiator._discovery import DiscoveredTarget, Portal, discover
from reservoir.agent.initiator._errors import (
    CommandTimeout,
    ConnectionLostError,
    InitiatorError,
    LoginError,
    ProtocolError,
    ScsiError,
)
from reservoir.agent.initiator._hash_range import (
    arm_receipts,
    hash_range,
    hash_read_back,
    hash_receipts,
    supports_hash_range,
)
from reservoir.agent.initiator._identity import change_mark, device_designator, write_protected
from reservoir.agent.initiator._jump import ANY_LOCAL, Starter, jump_connector
from reservoir.agent.initiator._login import Negotiated
from reservoir.agent.initiator._pool import (
    PoolSettings,
    PoolStats,
    SessionKey,
    SessionPool,
    chap_identity,
)
from reservoir.agent.initiator._reservation import (
    WRITE_EXCLUSIVE_REGISTRANTS_ONLY,
    pr_clear,
    pr_read_keys,
    pr_read_reservation,
    pr_register,
    pr_release,
    pr_reserve,
    pr_unregister,
)
from reservoir.agent.initiator._session import RecoveryPolicy, Session
from reservoir.agent.initiator._transport import (
    Connector,
    PduSink,
    PduTransport,
    TcpTransport,
    mptcp_connect,
    tcp_connect,
    with_congestion,
)

__all__ = [
    "ANY_LOCAL",
    "WRITE_EXCLUSIVE_REGISTRANTS_ONLY",
    "CommandTimeout",
    "ConnectionLostError",
    "Connector",
    "DiscoveredTarget",
    "InitiatorError",
    "LoginError",
    "Negotiated",
    "PduSink",
    "PduTransport",
    "PoolSettings",
    "PoolStats",
    "Portal",
    "ProtocolError",
    "RecoveryPolicy",
    "ScsiError",
    "ScsiReply",
    "Session",
    "SessionKey",
    "SessionPool",
    "Starter",
    "TcpTransport",
    "WriteData",
    "arm_receipts",
    "change_mark",
    "chap_identity",
    "device_designator",
    "discover",
    "hash_range",
    "hash_read_back",
    "hash_receipts",
    "jump_connector",
    "mptcp_connect",
    "pr_clear",
    "pr_read_keys",
    "pr_read_reservation",
    "pr_register",
    "pr_release",
    "pr_reserve",
    "pr_unregister",
    "supports_hash_range",
    "tcp_connect",
    "with_congestion",
    "write_protected",
]
