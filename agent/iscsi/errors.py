"""The iSCSI wire protocol's errors: what a PDU, a text segment, a negotiation or a
CHAP exchange can refuse. The target turns each into a Reject or a Login status; the
initiator into a failed login or a lost connection; the copy engine into a
:class:`~reservoir.agent.transfer.CopyError`.

::

    IscsiError
     +-- PduError           a PDU that cannot be accepted (pdu.py): Reject reason, fatal?
     +-- SpanError          a data segment's file gave fewer bytes (pdu.py; an OSError)
     +-- TextError          malformed text data, key or value (text.py)
     +-- NegotiationError   the login must fail with this status (negotiation.py)
     +-- ChapError          a bad CHAP configuration value (chap.py)
     +-- ChapAuthError      CHAP authentication failed (chap.py)
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["IscsiError"]


class IscsiError(ReservoirError):
    """The root of the iSCSI protocol's errors."""
