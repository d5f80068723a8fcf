"""Basic Header Segments declared once (RFC 7143 §11.2): where each field of a PDU sits.

Each PDU class of :mod:`reservoir.agent.iscsi.pdu` declares its 48-byte BHS as a
:class:`Header` (as LIO's ``include/scsi/iscsi_proto.h`` declares each header once),
and :func:`compile_header` generates the class's ``encode_header`` and ``_from`` from
that declaration, the way :mod:`dataclasses` generates ``__init__``: straight-line
code, as fast as a hand-written codec, with the layout said in one place.

The BHS: byte 0 the opcode (and the I bit), byte 1 flags, bytes 2 and 3, the word at 4
(TotalAHSLength, DataSegmentLength; the codec fills both), bytes 8-15, and eight words
at 16-44. A declaration names:

- ``flags``: byte 1 as ``(attribute, mask)``; a one-bit mask is a bool, a wider one an
  int shifted down to the mask's lowest bit. ``fixed``: bits always set (the F bit of
  PDUs that are always final).
- ``byte2``, ``byte3``: an attribute, or None for zero.
- ``b8``: bytes 8-15 as ``(attribute, width)`` parts in order, each bytes (``lun``,
  ``isid``) or a big-endian int (``tsih``); empty for zeros.
- ``words``: the words at 16, 20, ..., each an attribute, None (zero), an int constant,
  or ``(attribute, shift, width)`` parts packed into the word. With ``cdb`` the last
  four words are the 16 bytes of the CDB (SCSI Command) and ``words`` lists four.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

__all__ = ["Header", "Part", "Word", "compile_header"]

Part = tuple[str, int, int]  # (attribute, shift, width) inside one word
Word = str | int | tuple[Part, ...] | None


@dataclass(frozen=True)
class Header:
    flags: tuple[tuple[str, int], ...] = ()
    fixed: int = 0
    byte2: str | None = None
    byte3: str | None = None
    b8: tuple[tuple[str, int], ...] = ()
    words: tuple[Word, ...] = (None,) * 8
    cdb: bool = False
    int_b8: frozenset[str] = frozenset()  # b8 parts that are ints, not bytes

    def __post_init__(self) -> None:
        if len(self.words) != (4 if self.cdb else 8):
            raise ValueError("a BHS has 8 words at 16-44 (4 before a CDB)")
        if self.b8 and sum(width for _, width in self.b8) != 8:
            raise ValueError("bytes 8-15 are 8 bytes")

    def struct_format(self) -> str:
        return ">BBBBI8s4I16s" if self.cdb else ">BBBBI8s8I"


def _shift(mask: int) -> int:
    return (mask & -mask).bit_length() - 1


def _flag_encode(attr: str, mask: int) -> str:
    if mask & (mask - 1) == 0:
        return f"(0x{mask:x} if self.{attr} else 0)"
    shift = _shift(mask)
    return f"((self.{attr} & 0x{mask >> shift:x}) << {shift})"


def _flag_decode(attr: str, mask: int) -> str:
    if mask & (mask - 1) == 0:
        return f"{attr}=bool(b1 & 0x{mask:x})"
    shift = _shift(mask)
    return f"{attr}=(b1 >> {shift}) & 0x{mask >> shift:x}"


def _b8_encode(h: Header) -> str:
    if not h.b8:
        return "_ZERO8"
    parts = [
        f"self.{attr}.to_bytes({width}, 'big')" if attr in h.int_b8 else f"self.{attr}"
        for attr, width in h.b8
    ]
    return " + ".join(parts)


def _b8_decode(h: Header) -> list[str]:
    out, at = [], 0
    for attr, width in h.b8:
        piece = f"b8[{at}:{at + width}]" if width != 8 else "b8"
        if attr in h.int_b8:
            out.append(f"{attr}=int.from_bytes({piece}, 'big')")
        else:
            out.append(f"{attr}=bytes({piece})")
        at += width
    return out


def _word_encode(word: Word) -> str:
    if word is None:
        return "0"
    if isinstance(word, int):
        return str(word)
    if isinstance(word, str):
        return f"self.{word}"
    return " | ".join(f"((self.{a} & 0x{(1 << w) - 1:x}) << {s})" for a, s, w in word)


def _word_decode(index: int, word: Word) -> list[str]:
    if word is None or isinstance(word, int):
        return []
    if isinstance(word, str):
        return [f"{word}=w[{index}]"]
    return [f"{a}=(w[{index}] >> {s}) & 0x{(1 << w) - 1:x}" for a, s, w in word]


def _encoder_source(h: Header) -> str:
    b1 = " | ".join([f"0x{h.fixed:x}", *(_flag_encode(a, m) for a, m in h.flags)])
    fields = [
        "OPCODE | (0x40 if self.immediate else 0)",
        b1,
        f"self.{h.byte2}" if h.byte2 else "0",
        f"self.{h.byte3}" if h.byte3 else "0",
        "(len(ahs) >> 2) << 24 | self.data_length()",
        _b8_encode(h),
        *(_word_encode(w) for w in h.words),
    ]
    if h.cdb:
        fields.append("self.cdb[:16].ljust(16, b'\\0')")
    return (
        "def encode_header(self):\n"
        "    ahs = self.wire_ahs()\n"
        "    if len(ahs) & 3:\n"
        "        raise ValueError('AHS must be padded to 4 bytes')\n"
        f"    return PACK({', '.join(fields)}) + ahs\n"
    )


def _decoder_source(h: Header) -> str:
    args = [
        *(_flag_decode(a, m) for a, m in h.flags),
        *([f"{h.byte2}=b2"] if h.byte2 else []),
        *([f"{h.byte3}=b3"] if h.byte3 else []),
        *_b8_decode(h),
        *(arg for i, w in enumerate(h.words) for arg in _word_decode(i, w)),
    ]
    return f"def _from(cls, b1, b2, b3, b8, w):\n    return cls({', '.join(args)})\n"


def compile_header(cls: Any) -> Any:
    """Installs ``encode_header`` and ``_from`` generated from ``cls.HEADER`` (a class
    decorator, applied after :func:`dataclasses.dataclass`)."""
    h: Header = cls.HEADER
    scope: dict[str, Any] = {
        "PACK": struct.Struct(h.struct_format()).pack,
        "OPCODE": int(cls.OPCODE),
        "_ZERO8": bytes(8),
    }
    exec(_encoder_source(h), scope)
    exec(_decoder_source(h), scope)
    encode = scope["encode_header"]
    encode.__qualname__ = f"{cls.__qualname__}.encode_header"
    decode = scope["_from"]
    decode.__qualname__ = f"{cls.__qualname__}._from"
    if "encode_header" not in cls.__dict__:  # a class may keep a faster encoder of its own
        cls.encode_header = encode
    cls.declared_header = encode
    cls._from = classmethod(decode)
    return cls
