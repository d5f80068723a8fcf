"""CHAP authentication for iSCSI (RFC 1994 as used by RFC 7143 §12.1.3).

Exchange, initiator (I) and target (T), all in the security stage::

    I: AuthMethod=CHAP,...           T: AuthMethod=CHAP
    I: CHAP_A=<A1,A2,...>            T: CHAP_A=<A> CHAP_I=<I> CHAP_C=<C>
    I: CHAP_N=<N> CHAP_R=<R>         (one-way: T checks R and is done)
       [CHAP_I=<I'> CHAP_C=<C'>]     T: CHAP_N=<N'> CHAP_R=<R'>  (mutual)

The response is ``H(I || secret || C)`` with ``I`` one byte.  Algorithms
(CHAP_A, IANA "PPP Authentication Algorithms"): 5 MD5 (the one RFC 7143
requires), 6 SHA-1, 7 SHA-256, 8 SHA3-256 (accepted by Linux LIO and
open-iscsi since 2021).  The responder picks the first algorithm of the
offerer's list that it allows.

Rules applied here (RFC 7143 §12.1.3 and §9.2.1):

* challenges are random, at least 16 bytes (the digest size for SHA-*), hex;
* a challenge received for mutual authentication must be 16..1024 bytes and
  must differ from the one we sent (reflection);
* a CHAP response equal to the one we would compute ourselves for the same
  challenge (the same secret used in both directions) is a failure;
* secrets must be 12..255 bytes: RFC 7143 requires IPsec below 96 random
  bits, and Reservoir does not do IPsec, so shorter secrets are refused when
  a :class:`ChapSecret` is made.

No secret, challenge or response ever appears in an exception message.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reservoir.agent.iscsi.errors import IscsiError
from reservoir.agent.iscsi.text import (
    TextError,
    format_binary,
    format_numerical,
    parse_binary,
    parse_list,
    parse_numerical,
)

CHAP_MD5 = 5
CHAP_SHA1 = 6
CHAP_SHA256 = 7
CHAP_SHA3_256 = 8

_HASHES: dict[int, str] = {
    CHAP_MD5: "md5",
    CHAP_SHA1: "sha1",
    CHAP_SHA256: "sha256",
    CHAP_SHA3_256: "sha3_256",
}
ALGORITHM_NAMES = {
    CHAP_MD5: "MD5",
    CHAP_SHA1: "SHA-1",
    CHAP_SHA256: "SHA-256",
    CHAP_SHA3_256: "SHA3-256",
}
SUPPORTED_ALGORITHMS: tuple[int, ...] = (CHAP_SHA3_256, CHAP_SHA256, CHAP_SHA1, CHAP_MD5)
# Preference of our initiator side (strongest first; MD5 is always offered, RFC 7143).
DEFAULT_INITIATOR_ALGORITHMS: tuple[int, ...] = (CHAP_SHA256, CHAP_MD5)

MIN_SECRET_BYTES = 12
MAX_SECRET_BYTES = 255
MAX_NAME_BYTES = 255
MIN_CHALLENGE_BYTES = 16
MAX_CHALLENGE_BYTES = 1024


class ChapError(IscsiError):
    """A bad CHAP configuration value (e.g. a secret that is too short)."""


class ChapAuthError(IscsiError):
    """Authentication failed; the message names the reason, never a secret."""


@dataclass(frozen=True)
class ChapSecret:
    """A CHAP name and secret.  The secret is kept out of ``repr``."""

    user: str
    secret: str = field(repr=False)

    def __post_init__(self) -> None:
        check_name(self.user)
        check_secret(self.secret)


def check_name(user: str) -> None:
    size = len(user.encode("utf-8"))
    if not 1 <= size <= MAX_NAME_BYTES or "\x00" in user:
        raise ChapError(f"CHAP name must be 1..{MAX_NAME_BYTES} bytes without NUL")


def check_secret(secret: str) -> None:
    size = len(secret.encode("utf-8"))
    if size < MIN_SECRET_BYTES:
        raise ChapError(f"CHAP secret is {size} bytes; at least {MIN_SECRET_BYTES} are required")
    if size > MAX_SECRET_BYTES:
        raise ChapError(f"CHAP secret longer than {MAX_SECRET_BYTES} bytes")


def digest_size(algorithm: int) -> int:
    return hashlib.new(_hash_name(algorithm), usedforsecurity=False).digest_size


def _hash_name(algorithm: int) -> str:
    try:
        return _HASHES[algorithm]
    except KeyError:
        raise ChapError(f"unsupported CHAP algorithm {algorithm}") from None


def chap_response(algorithm: int, identifier: int, secret: str | bytes, challenge: bytes) -> bytes:
    """``H(identifier || secret || challenge)`` (RFC 1994 §4.1)."""
    if not 0 <= identifier <= 255:
        raise ChapError("CHAP identifier must be 0..255")
    raw_secret = secret.encode("utf-8") if isinstance(secret, str) else secret
    # usedforsecurity=False keeps MD5 available on FIPS builds; CHAP needs it.
    hasher = hashlib.new(_hash_name(algorithm), usedforsecurity=False)
    hasher.update(bytes([identifier]) + raw_secret + challenge)
    return hasher.digest()


def choose_algorithm(offer: str, allowed: Sequence[int]) -> int | None:
    """The first algorithm of the offerer's list that is in ``allowed``."""
    try:
        items = parse_list(offer)
    except TextError:
        return None
    for item in items:
        try:
            number = parse_numerical(item, 0, 255)
        except TextError:
            continue  # unknown values are simply not chosen
        if number in allowed and number in _HASHES:
            return number
    return None


def _parse_identifier(value: str) -> int:
    try:
        return parse_numerical(value, 0, 255)
    except TextError as exc:
        raise ChapAuthError(f"invalid CHAP_I ({exc})") from None


def _parse_binary(key: str, value: str) -> bytes:
    try:
        return parse_binary(value, MAX_CHALLENGE_BYTES)
    except TextError as exc:
        raise ChapAuthError(f"invalid {key} ({exc})") from None


def _check_received_challenge(challenge: bytes, ours: bytes | None) -> None:
    if len(challenge) < MIN_CHALLENGE_BYTES:
        raise ChapAuthError(
            f"CHAP challenge of {len(challenge)} bytes is shorter than {MIN_CHALLENGE_BYTES}"
        )
    if ours is not None and hmac.compare_digest(challenge, ours):
        raise ChapAuthError("mutual CHAP challenge reflects our own challenge")


def _new_challenge(algorithm: int, size: int | None) -> bytes:
    length = max(MIN_CHALLENGE_BYTES, size or digest_size(algorithm))
    return secrets.token_bytes(length)


# ----------------------------------------------------------------------------
# target side


class ChapTarget:
    """The target (authenticator) side of one CHAP exchange.

    ``offer(chap_a)`` answers the initiator's CHAP_A list; ``verify(keys)``
    checks CHAP_N/CHAP_R and, when the initiator sent CHAP_I/CHAP_C, returns
    the target's CHAP_N/CHAP_R for mutual authentication.  Both raise
    :class:`ChapAuthError`.
    """

    def __init__(
        self,
        credentials: ChapSecret,
        mutual: ChapSecret | None = None,
        *,
        allowed: Sequence[int] = SUPPORTED_ALGORITHMS,
        challenge_bytes: int | None = None,
    ) -> None:
        self._credentials = credentials
        self._mutual = mutual
        self._allowed = tuple(allowed)
        self._challenge_bytes = challenge_bytes
        self._algorithm: int | None = None
        self._identifier = 0
        self._challenge = b""
        self.authenticated_user: str | None = None

    @property
    def algorithm(self) -> int | None:
        return self._algorithm

    def offer(self, chap_a: str) -> list[tuple[str, str]]:
        if self._algorithm is not None:
            raise ChapAuthError("CHAP_A sent twice")
        algorithm = choose_algorithm(chap_a, self._allowed)
        if algorithm is None:
            raise ChapAuthError(f"no acceptable CHAP algorithm in CHAP_A={chap_a[:60]}")
        self._algorithm = algorithm
        self._identifier = secrets.randbelow(256)
        self._challenge = _new_challenge(algorithm, self._challenge_bytes)
        return [
            ("CHAP_A", format_numerical(algorithm)),
            ("CHAP_I", format_numerical(self._identifier)),
            ("CHAP_C", format_binary(self._challenge)),
        ]

    def verify(self, keys: Mapping[str, str]) -> list[tuple[str, str]]:
        if self._algorithm is None:
            raise ChapAuthError("CHAP_N/CHAP_R before CHAP_A")
        if "CHAP_N" not in keys or "CHAP_R" not in keys:
            raise ChapAuthError("CHAP_N and CHAP_R are both required")
        self._check_response(keys["CHAP_N"], _parse_binary("CHAP_R", keys["CHAP_R"]))
        mutual = "CHAP_I" in keys or "CHAP_C" in keys
        replies = self._mutual_answer(keys) if mutual else []
        self.authenticated_user = keys["CHAP_N"]
        return replies

    def _check_response(self, user: str, response: bytes) -> None:
        assert self._algorithm is not None
        name_ok = hmac.compare_digest(user.encode("utf-8"), self._credentials.user.encode("utf-8"))
        if not name_ok:
            raise ChapAuthError(f"unknown CHAP user {user[:80]!r}")
        expected = chap_response(
            self._algorithm, self._identifier, self._credentials.secret, self._challenge
        )
        if not hmac.compare_digest(expected, response):
            raise ChapAuthError(f"wrong CHAP response for user {user[:80]!r}")
        if self._mutual is not None:
            ours = chap_response(
                self._algorithm, self._identifier, self._mutual.secret, self._challenge
            )
            if hmac.compare_digest(ours, response):
                raise ChapAuthError("CHAP secret is the same in both directions")

    def _mutual_answer(self, keys: Mapping[str, str]) -> list[tuple[str, str]]:
        assert self._algorithm is not None
        if self._mutual is None:
            raise ChapAuthError("initiator asks for mutual CHAP, which is not configured")
        if "CHAP_I" not in keys or "CHAP_C" not in keys:
            raise ChapAuthError("mutual CHAP needs both CHAP_I and CHAP_C")
        identifier = _parse_identifier(keys["CHAP_I"])
        challenge = _parse_binary("CHAP_C", keys["CHAP_C"])
        _check_received_challenge(challenge, self._challenge)
        response = chap_response(self._algorithm, identifier, self._mutual.secret, challenge)
        return [("CHAP_N", self._mutual.user), ("CHAP_R", format_binary(response))]


# ----------------------------------------------------------------------------
# initiator side


class ChapInitiator:
    """The initiator side: answer the target's challenge, check a mutual reply.

    ``algorithms_offer()`` is the CHAP_A value to send; ``respond(keys)``
    takes the target's CHAP_A/CHAP_I/CHAP_C and returns CHAP_N/CHAP_R (plus
    CHAP_I/CHAP_C when ``mutual`` is set); ``verify_target(keys)`` checks the
    target's CHAP_N/CHAP_R.
    """

    def __init__(
        self,
        credentials: ChapSecret,
        mutual: ChapSecret | None = None,
        *,
        algorithms: Sequence[int] = DEFAULT_INITIATOR_ALGORITHMS,
        challenge_bytes: int | None = None,
    ) -> None:
        self._credentials = credentials
        self._mutual = mutual
        self._algorithms = tuple(algorithms)
        self._challenge_bytes = challenge_bytes
        self._algorithm: int | None = None
        self._target_challenge = b""
        self._my_identifier = 0
        self._my_challenge = b""

    def algorithms_offer(self) -> str:
        return ",".join(str(number) for number in self._algorithms)

    def respond(self, keys: Mapping[str, str]) -> list[tuple[str, str]]:
        algorithm = self._accepted_algorithm(keys.get("CHAP_A", ""))
        identifier = _parse_identifier(keys.get("CHAP_I", ""))
        challenge = _parse_binary("CHAP_C", keys.get("CHAP_C", ""))
        _check_received_challenge(challenge, None)
        self._algorithm, self._target_challenge = algorithm, challenge
        response = chap_response(algorithm, identifier, self._credentials.secret, challenge)
        pairs = [("CHAP_N", self._credentials.user), ("CHAP_R", format_binary(response))]
        if self._mutual is not None:
            pairs += self._mutual_challenge(algorithm)
        return pairs

    def _accepted_algorithm(self, value: str) -> int:
        try:
            algorithm = parse_numerical(value, 0, 255)
        except TextError:
            raise ChapAuthError(f"target answered CHAP_A={value[:40]}") from None
        if algorithm not in self._algorithms or algorithm not in _HASHES:
            raise ChapAuthError(f"target chose CHAP algorithm {algorithm}, which we did not offer")
        return algorithm

    def _mutual_challenge(self, algorithm: int) -> list[tuple[str, str]]:
        self._my_identifier = secrets.randbelow(256)
        self._my_challenge = _new_challenge(algorithm, self._challenge_bytes)
        while hmac.compare_digest(self._my_challenge, self._target_challenge):
            self._my_challenge = _new_challenge(algorithm, self._challenge_bytes)
        return [
            ("CHAP_I", format_numerical(self._my_identifier)),
            ("CHAP_C", format_binary(self._my_challenge)),
        ]

    def verify_target(self, keys: Mapping[str, str]) -> None:
        if self._mutual is None or self._algorithm is None:
            raise ChapAuthError("no mutual CHAP exchange in progress")
        user = keys.get("CHAP_N", "")
        if not hmac.compare_digest(user.encode("utf-8"), self._mutual.user.encode("utf-8")):
            raise ChapAuthError(f"target answered as CHAP user {user[:80]!r}")
        response = _parse_binary("CHAP_R", keys.get("CHAP_R", ""))
        expected = chap_response(
            self._algorithm, self._my_identifier, self._mutual.secret, self._my_challenge
        )
        if not hmac.compare_digest(expected, response):
            raise ChapAuthError(f"wrong mutual CHAP response from target user {user[:80]!r}")
        mine = chap_response(
            self._algorithm, self._my_identifier, self._credentials.secret, self._my_challenge
        )
        if hmac.compare_digest(mine, response):
            raise ChapAuthError("CHAP secret is the same in both directions")
