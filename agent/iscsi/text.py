"""iSCSI text key=value encoding (RFC 7143 §6.1, §6.2).

A text data segment is a sequence of ``key=value`` pairs, each followed by
one NUL byte.  Keys are ASCII (letters, digits and ``.-+@_``, starting with a
capital letter, at most 63 bytes); values are UTF-8 without NUL.  A simple
value is at most 255 bytes; each element of a list is at most 255 bytes; the
binary CHAP values may be up to 1024 bytes once decoded, i.e. a bit more than
2 KiB of text; no value is accepted above :data:`MAX_LONG_VALUE_BYTES`.

Besides parsing and encoding, this module has the value helpers of RFC 7143
§6.1: numerical values (decimal or ``0x`` hex), binary values (``0x`` hex or
``0b`` base64), booleans, lists and ranges, plus :class:`TextAssembler` for
text that spans several PDUs with the C (continue) bit.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence

from reservoir.agent.iscsi.errors import IscsiError

MAX_KEY_BYTES = 63
MAX_SIMPLE_VALUE_BYTES = 255
MAX_BINARY_BYTES = 1024
MAX_LONG_VALUE_BYTES = 8192
# RFC 7143 §6.2: at least 8192 bytes of key=value data must be accepted in a
# negotiation sequence, 64 KiB when long authentication items are in use.
DEFAULT_MAX_TEXT_BYTES = 65536

REJECT = "Reject"
IRRELEVANT = "Irrelevant"
NOT_UNDERSTOOD = "NotUnderstood"
YES = "Yes"
NO = "No"
NONE = "None"
RESERVED_VALUES = frozenset({REJECT, IRRELEVANT, NOT_UNDERSTOOD})

# Keys whose values are binary and may be longer than a simple value.
LONG_VALUE_KEYS = frozenset({"CHAP_C", "CHAP_R"})
# Keys whose values are lists (RFC 7143 §6.1 list-of-values).
LIST_KEYS = frozenset({"AuthMethod", "HeaderDigest", "DataDigest", "CHAP_A"})

_KEY_RE = re.compile(r"(?:[A-Z][A-Za-z0-9.\-+@_]*|X#[A-Za-z0-9.\-+@_]+|iSCSIProtocolLevel)")
_DECIMAL_RE = re.compile(r"(?:0|[1-9][0-9]*)")
_HEX_RE = re.compile(r"0[xX][0-9a-fA-F]+")
_BASE64_RE = re.compile(r"0[bB][A-Za-z0-9+/=]+")
_U64_MAX = 2**64 - 1


class TextError(IscsiError):
    """Malformed iSCSI text data or value."""


# ----------------------------------------------------------------------------
# keys and values


def check_key(key: str) -> None:
    """Raise :class:`TextError` unless ``key`` is a well-formed key name."""
    if not key:
        raise TextError("empty key name")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise TextError(f"key name longer than {MAX_KEY_BYTES} bytes: {key[:70]!r}")
    if not _KEY_RE.fullmatch(key):
        raise TextError(f"invalid key name {key!r}")


def max_value_bytes(key: str) -> int:
    """The longest encoded value accepted for ``key``."""
    return MAX_LONG_VALUE_BYTES if key in LONG_VALUE_KEYS else MAX_SIMPLE_VALUE_BYTES


def check_value(key: str, value: str) -> None:
    """Raise :class:`TextError` unless ``value`` is acceptable for ``key``."""
    if "\x00" in value:
        raise TextError(f"value of {key} contains a NUL byte")
    size = len(value.encode("utf-8"))
    if key in LIST_KEYS:
        if size > MAX_LONG_VALUE_BYTES:
            raise TextError(f"value list of {key} longer than {MAX_LONG_VALUE_BYTES} bytes")
        for item in value.split(","):
            if len(item.encode("utf-8")) > MAX_SIMPLE_VALUE_BYTES:
                raise TextError(f"a value of {key} is longer than {MAX_SIMPLE_VALUE_BYTES} bytes")
        return
    limit = max_value_bytes(key)
    if size > limit:
        raise TextError(f"value of {key} is {size} bytes, more than {limit}")


# ----------------------------------------------------------------------------
# parse and encode


def _decode_pair(raw: bytes) -> tuple[str, str]:
    key_raw, sep, value_raw = raw.partition(b"=")
    if not sep:
        raise TextError(f"key=value pair without '=': {raw[:80]!r}")
    try:
        key = key_raw.decode("ascii")
    except UnicodeDecodeError:
        raise TextError(f"key name is not ASCII: {key_raw[:80]!r}") from None
    check_key(key)
    try:
        value = value_raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TextError(f"value of {key} is not valid UTF-8") from None
    check_value(key, value)
    return key, value


def _split_pairs(data: bytes) -> list[bytes]:
    if not data:
        return []
    if not data.endswith(b"\x00"):
        raise TextError("text data does not end with a NUL byte")
    body = data.rstrip(b"\x00")
    if not body:
        return []
    parts = body.split(b"\x00")
    if any(not part for part in parts):
        raise TextError("empty key=value pair (two NUL bytes in a row)")
    return parts


def parse_text(
    data: bytes, *, repeatable: Iterable[str] = (), allow_duplicates: bool = False
) -> list[tuple[str, str]]:
    """Parse a complete text data segment into ``(key, value)`` pairs, in order.

    Trailing NUL padding is accepted.  A key may appear once only (RFC 7143
    §6.1) unless it is in ``repeatable`` (e.g. ``TargetName`` and
    ``TargetAddress`` in a SendTargets response) or ``allow_duplicates``.
    """
    again = frozenset(repeatable)
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for raw in _split_pairs(bytes(data)):
        key, value = _decode_pair(raw)
        if key in seen and key not in again and not allow_duplicates:
            raise TextError(f"key {key} appears more than once")
        seen.add(key)
        pairs.append((key, value))
    return pairs


def encode_text(pairs: Iterable[tuple[str, str]]) -> bytes:
    """Encode ``(key, value)`` pairs, each followed by a NUL byte."""
    out = bytearray()
    for key, value in pairs:
        check_key(key)
        check_value(key, value)
        out += key.encode("ascii") + b"=" + value.encode("utf-8") + b"\x00"
    return bytes(out)


def split_text(data: bytes, max_len: int) -> list[bytes]:
    """Cut encoded text into chunks of at most ``max_len`` bytes (C-bit PDUs).

    A key=value pair may span PDU boundaries (RFC 7143 §6.1), so the cut is at
    any byte.  Empty text gives one empty chunk.
    """
    if max_len <= 0:
        raise ValueError("max_len must be positive")
    if not data:
        return [b""]
    return [data[i : i + max_len] for i in range(0, len(data), max_len)]


class TextAssembler:
    """Collects the text of a sequence of PDUs joined by the C (continue) bit.

    ``feed(data, cont)`` returns ``None`` while more PDUs are expected and the
    parsed pairs once a PDU with C=0 ends the sequence.  The total size is
    bounded by ``max_bytes``; an oversized or malformed sequence raises
    :class:`TextError` and leaves the assembler empty.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_TEXT_BYTES) -> None:
        self._max_bytes = max_bytes
        self._buffer = bytearray()

    @property
    def pending(self) -> bool:
        """True when part of a sequence has been received."""
        return bool(self._buffer)

    def reset(self) -> None:
        self._buffer.clear()

    def feed(self, data: bytes, cont: bool) -> list[tuple[str, str]] | None:
        if len(self._buffer) + len(data) > self._max_bytes:
            self.reset()
            raise TextError(f"text data longer than {self._max_bytes} bytes")
        self._buffer += data
        if cont:
            return None
        whole = bytes(self._buffer)
        self.reset()
        return parse_text(whole)


# ----------------------------------------------------------------------------
# value helpers


def parse_numerical(value: str, lo: int = 0, hi: int = _U64_MAX) -> int:
    """A numerical value: decimal constant or ``0x`` hex constant, in [lo, hi]."""
    if _DECIMAL_RE.fullmatch(value):
        number = int(value)
    elif _HEX_RE.fullmatch(value):
        number = int(value[2:], 16)
    else:
        raise TextError(f"not a numerical value: {value[:40]!r}")
    if not lo <= number <= hi:
        raise TextError(f"value {number} outside {lo}..{hi}")
    return number


def format_numerical(number: int) -> str:
    if number < 0:
        raise ValueError("numerical values are unsigned")
    return str(number)


def parse_range(value: str, lo: int = 0, hi: int = _U64_MAX) -> tuple[int, int]:
    """A numeric range ``a~b`` with ``a <= b``."""
    left, sep, right = value.partition("~")
    if not sep:
        raise TextError(f"not a numeric range: {value[:40]!r}")
    first, last = parse_numerical(left, lo, hi), parse_numerical(right, lo, hi)
    if first > last:
        raise TextError(f"numeric range {value!r} is decreasing")
    return first, last


def _decode_hex(digits: str) -> bytes:
    if len(digits) % 2:
        digits = "0" + digits  # implicit byte length (n + 1) // 2
    return bytes.fromhex(digits)


def _decode_base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise TextError("invalid base64 constant") from None


def parse_binary(value: str, max_bytes: int = MAX_BINARY_BYTES) -> bytes:
    """A binary value given as ``0x`` hex or ``0b`` base64 (CHAP_C, CHAP_R)."""
    if _HEX_RE.fullmatch(value):
        raw = _decode_hex(value[2:])
    elif _BASE64_RE.fullmatch(value):
        raw = _decode_base64(value[2:])
    else:
        raise TextError("binary value must be 0x<hex> or 0b<base64>")
    if not raw:
        raise TextError("empty binary value")
    if len(raw) > max_bytes:
        raise TextError(f"binary value longer than {max_bytes} bytes")
    return raw


def format_binary(raw: bytes, *, use_base64: bool = False) -> str:
    if use_base64:
        return "0b" + base64.b64encode(raw).decode("ascii")
    return "0x" + raw.hex()


def parse_boolean(value: str) -> bool:
    if value == YES:
        return True
    if value == NO:
        return False
    raise TextError(f"not a boolean value (Yes/No): {value[:40]!r}")


def format_boolean(flag: bool) -> str:
    return YES if flag else NO


def parse_list(value: str) -> list[str]:
    """A comma-separated list of values, none of them empty."""
    items = value.split(",")
    if any(not item for item in items):
        raise TextError(f"empty element in list {value[:80]!r}")
    return items


def format_list(items: Sequence[str]) -> str:
    if not items or any(not item or "," in item for item in items):
        raise ValueError(f"cannot format list {items!r}")
    return ",".join(items)
