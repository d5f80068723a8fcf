"""iSCSI protocol (RFC 7143): PDUs and digests, text keys, login negotiation, CHAP."""

from reservoir.agent.iscsi.chap import ChapAuthError, ChapError, ChapSecret
from reservoir.agent.iscsi.login import (
    LoginDirectory,
    LoginNegotiator,
    LoginReply,
    LoginRequestView,
    LoginStatus,
    TargetPolicy,
)
from reservoir.agent.iscsi.negotiation import ConnectionParams, SessionParams, TargetLimits
from reservoir.agent.iscsi.text import TextAssembler, TextError, encode_text, parse_text

__all__ = [
    "ChapAuthError",
    "ChapError",
    "ChapSecret",
    "ConnectionParams",
    "LoginDirectory",
    "LoginNegotiator",
    "LoginReply",
    "LoginRequestView",
    "LoginStatus",
    "SessionParams",
    "TargetLimits",
    "TargetPolicy",
    "TextAssembler",
    "TextError",
    "encode_text",
    "parse_text",
]
