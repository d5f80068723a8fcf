"""CRC32C header and data digests (RFC 7143 §13.1, appendix B of RFC 3720).

The digest is CRC32C (Castagnoli) over the bytes it covers, transmitted
least-significant byte first: 32 zero bytes give ``aa 36 91 8a``.
"""

from __future__ import annotations

import crc32c as _crc32c

DIGEST_LEN = 4


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC32C of ``data``, continuing from ``value`` (0 to start)."""
    return int(_crc32c.crc32c(data, value))


def digest(*parts: bytes | bytearray | memoryview) -> bytes:
    """The 4 wire bytes of the digest over the concatenation of ``parts``."""
    value = 0
    for part in parts:
        value = crc32c(part, value)
    return value.to_bytes(4, "little")
