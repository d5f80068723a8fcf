"""CHAP (RFC 1994 as used by RFC 7143 §12.1.3): vectors, target and initiator sides."""

from __future__ import annotations

import hashlib

import pytest

from reservoir.agent.iscsi.chap import (
    CHAP_MD5,
    CHAP_SHA1,
    CHAP_SHA3_256,
    CHAP_SHA256,
    ChapAuthError,
    ChapError,
    ChapInitiator,
    ChapSecret,
    ChapTarget,
    chap_response,
    choose_algorithm,
    digest_size,
)
from reservoir.agent.iscsi.text import format_binary, parse_binary

INITIATOR = ChapSecret("host1", "initiator-secret")
TARGET = ChapSecret("vol1", "target-secret-1")

# ------------------------------------------------------------------ vectors

# H(id || secret || challenge); the hex values were computed once and checked
# with coreutils md5sum over the same bytes (printf '\x01secretsecret\x00...').
VECTORS = [
    (CHAP_MD5, 0x01, b"secretsecret", bytes(range(16)), "226dc576c33f04ff9c3a200ffe35f442"),
    (
        CHAP_MD5,
        0x2A,
        b"correct horse battery",
        bytes.fromhex("deadbeef" * 4),
        "c483dc8f9b753123253482fffd9aada5",
    ),
    (
        CHAP_SHA256,
        0xA5,
        b"0123456789abcdef",
        bytes(range(32)),
        "75a6a67d53f026357141a1d90fd17ee51437ac627200598f09cd1ac553f2741d",
    ),
]


@pytest.mark.parametrize(("algorithm", "identifier", "secret", "challenge", "expected"), VECTORS)
def test_fixed_vectors(
    algorithm: int, identifier: int, secret: bytes, challenge: bytes, expected: str
) -> None:
    assert chap_response(algorithm, identifier, secret, challenge).hex() == expected


@pytest.mark.parametrize(
    ("algorithm", "name"),
    [(CHAP_MD5, "md5"), (CHAP_SHA1, "sha1"), (CHAP_SHA256, "sha256"), (CHAP_SHA3_256, "sha3_256")],
)
def test_cross_check_with_hashlib(algorithm: int, name: str) -> None:
    challenge = bytes(range(7, 39))
    expected = hashlib.new(name, b"\x07" + b"some secret!" + challenge).digest()
    assert chap_response(algorithm, 7, "some secret!", challenge) == expected
    assert digest_size(algorithm) == len(expected)


def test_string_secret_is_utf8() -> None:
    assert chap_response(CHAP_MD5, 3, "sécret-sécret", b"c") == chap_response(
        CHAP_MD5, 3, "sécret-sécret".encode(), b"c"
    )


def test_response_argument_checks() -> None:
    with pytest.raises(ChapError):
        chap_response(CHAP_MD5, 256, "x", b"c")
    with pytest.raises(ChapError):
        chap_response(4, 1, "x", b"c")


# ------------------------------------------------------------------ configuration


@pytest.mark.parametrize("secret", ["", "short", "elevenchars"])
def test_short_secrets_are_refused(secret: str) -> None:
    with pytest.raises(ChapError, match="at least 12"):
        ChapSecret("user", secret)


def test_secret_limits() -> None:
    assert ChapSecret("user", "x" * 12).secret == "x" * 12
    ChapSecret("user", "x" * 255)
    with pytest.raises(ChapError):
        ChapSecret("user", "x" * 256)
    with pytest.raises(ChapError):
        ChapSecret("", "x" * 12)


def test_secret_not_in_repr() -> None:
    assert "initiator-secret" not in repr(INITIATOR)


@pytest.mark.parametrize(
    ("offer", "allowed", "chosen"),
    [
        ("5", (5,), 5),
        ("7,5", (5, 6, 7, 8), 7),  # the initiator's order wins
        ("5,7", (5, 6, 7, 8), 5),
        ("8,7,5", (5, 7), 7),
        ("0x7,5", (5, 7), 7),
        ("129,5", (5,), 5),  # unknown values are skipped
        ("junk,5", (5,), 5),
        ("7", (5,), None),
        ("", (5,), None),
        ("4", (4, 5), None),  # not an algorithm we implement
    ],
)
def test_choose_algorithm(offer: str, allowed: tuple[int, ...], chosen: int | None) -> None:
    assert choose_algorithm(offer, allowed) == chosen


# ------------------------------------------------------------------ target side


def _challenge(target: ChapTarget, offer: str = "5") -> dict[str, str]:
    return dict(target.offer(offer))


def test_target_one_way_md5() -> None:
    target = ChapTarget(INITIATOR)
    sent = _challenge(target)
    assert sent["CHAP_A"] == "5"
    assert 0 <= int(sent["CHAP_I"]) <= 255
    challenge = parse_binary(sent["CHAP_C"])
    assert len(challenge) >= 16
    assert sent["CHAP_C"].startswith("0x")
    response = hashlib.md5(bytes([int(sent["CHAP_I"])]) + b"initiator-secret" + challenge)
    assert target.verify({"CHAP_N": "host1", "CHAP_R": "0x" + response.hexdigest()}) == []
    assert target.authenticated_user == "host1"


def test_target_accepts_base64_response() -> None:
    target = ChapTarget(INITIATOR)
    sent = _challenge(target)
    digest = chap_response(5, int(sent["CHAP_I"]), "initiator-secret", parse_binary(sent["CHAP_C"]))
    assert (
        target.verify({"CHAP_N": "host1", "CHAP_R": format_binary(digest, use_base64=True)}) == []
    )


def test_challenges_are_fresh_and_sized_by_digest() -> None:
    first = parse_binary(_challenge(ChapTarget(INITIATOR))["CHAP_C"])
    second = parse_binary(_challenge(ChapTarget(INITIATOR))["CHAP_C"])
    assert first != second
    sha = parse_binary(_challenge(ChapTarget(INITIATOR), "7")["CHAP_C"])
    assert len(sha) == 32


def test_wrong_secret() -> None:
    target = ChapTarget(INITIATOR)
    sent = _challenge(target)
    digest = chap_response(5, int(sent["CHAP_I"]), "not-the-secret", parse_binary(sent["CHAP_C"]))
    with pytest.raises(ChapAuthError, match="wrong CHAP response for user 'host1'") as info:
        target.verify({"CHAP_N": "host1", "CHAP_R": format_binary(digest)})
    assert "not-the-secret" not in str(info.value)
    assert "initiator-secret" not in str(info.value)
    assert target.authenticated_user is None


def test_unknown_user() -> None:
    target = ChapTarget(INITIATOR)
    _challenge(target)
    with pytest.raises(ChapAuthError, match="unknown CHAP user 'mallory'"):
        target.verify({"CHAP_N": "mallory", "CHAP_R": "0x" + "00" * 16})


@pytest.mark.parametrize(
    "keys",
    [{"CHAP_N": "host1"}, {"CHAP_R": "0x00"}, {"CHAP_N": "host1", "CHAP_R": "nothex"}],
)
def test_incomplete_or_malformed_response(keys: dict[str, str]) -> None:
    target = ChapTarget(INITIATOR)
    _challenge(target)
    with pytest.raises(ChapAuthError):
        target.verify(keys)


def test_protocol_order() -> None:
    target = ChapTarget(INITIATOR)
    with pytest.raises(ChapAuthError, match="before CHAP_A"):
        target.verify({"CHAP_N": "host1", "CHAP_R": "0x00"})
    _challenge(target)
    with pytest.raises(ChapAuthError, match="twice"):
        target.offer("5")


def test_no_common_algorithm() -> None:
    with pytest.raises(ChapAuthError, match="no acceptable CHAP algorithm"):
        ChapTarget(INITIATOR, allowed=(5,)).offer("7,8")


# ------------------------------------------------------------------ both sides


@pytest.mark.parametrize("algorithm", [CHAP_MD5, CHAP_SHA1, CHAP_SHA256, CHAP_SHA3_256])
def test_mutual_exchange(algorithm: int) -> None:
    initiator = ChapInitiator(INITIATOR, TARGET, algorithms=(algorithm, CHAP_MD5))
    target = ChapTarget(INITIATOR, TARGET)
    challenge = target.offer(initiator.algorithms_offer())
    assert dict(challenge)["CHAP_A"] == str(algorithm)
    answer = initiator.respond(dict(challenge))
    assert {key for key, _ in answer} == {"CHAP_N", "CHAP_R", "CHAP_I", "CHAP_C"}
    target_answer = target.verify(dict(answer))
    assert dict(target_answer)["CHAP_N"] == "vol1"
    initiator.verify_target(dict(target_answer))
    assert target.authenticated_user == "host1"


def test_one_way_initiator_sends_no_challenge() -> None:
    initiator = ChapInitiator(INITIATOR)
    target = ChapTarget(INITIATOR, TARGET)
    answer = initiator.respond(dict(target.offer(initiator.algorithms_offer())))
    assert {key for key, _ in answer} == {"CHAP_N", "CHAP_R"}
    assert target.verify(dict(answer)) == []


def test_mutual_not_configured_on_target() -> None:
    initiator = ChapInitiator(INITIATOR, TARGET)
    target = ChapTarget(INITIATOR)
    answer = initiator.respond(dict(target.offer("5")))
    with pytest.raises(ChapAuthError, match="mutual CHAP, which is not configured"):
        target.verify(dict(answer))
    assert target.authenticated_user is None


def test_mutual_reflection_is_refused() -> None:
    target = ChapTarget(INITIATOR, TARGET)
    sent = dict(target.offer("5"))
    digest = chap_response(5, int(sent["CHAP_I"]), "initiator-secret", parse_binary(sent["CHAP_C"]))
    keys = {
        "CHAP_N": "host1",
        "CHAP_R": format_binary(digest),
        "CHAP_I": sent["CHAP_I"],
        "CHAP_C": sent["CHAP_C"],
    }
    with pytest.raises(ChapAuthError, match="reflects our own challenge"):
        target.verify(keys)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"CHAP_I": "1", "CHAP_C": "0x" + "11" * 15}, "shorter than 16"),
        ({"CHAP_I": "1"}, "both CHAP_I and CHAP_C"),
        ({"CHAP_C": "0x" + "11" * 16}, "both CHAP_I and CHAP_C"),
        ({"CHAP_I": "256", "CHAP_C": "0x" + "11" * 16}, "invalid CHAP_I"),
        ({"CHAP_I": "1", "CHAP_C": "0x" + "11" * 1025}, "invalid CHAP_C"),
    ],
)
def test_bad_mutual_challenges(extra: dict[str, str], message: str) -> None:
    target = ChapTarget(INITIATOR, TARGET)
    sent = dict(target.offer("5"))
    digest = chap_response(5, int(sent["CHAP_I"]), "initiator-secret", parse_binary(sent["CHAP_C"]))
    with pytest.raises(ChapAuthError, match=message):
        target.verify({"CHAP_N": "host1", "CHAP_R": format_binary(digest), **extra})


def test_same_secret_both_directions_is_refused() -> None:
    same = ChapSecret("vol1", INITIATOR.secret)
    target = ChapTarget(INITIATOR, same)
    initiator = ChapInitiator(INITIATOR, same)
    answer = initiator.respond(dict(target.offer("5")))
    with pytest.raises(ChapAuthError, match="same in both directions"):
        target.verify(dict(answer))


def test_initiator_checks_target() -> None:
    initiator = ChapInitiator(INITIATOR, TARGET)
    target = ChapTarget(INITIATOR, TARGET)
    target_answer = dict(target.verify(dict(initiator.respond(dict(target.offer("5"))))))
    with pytest.raises(ChapAuthError, match="wrong mutual CHAP response"):
        initiator.verify_target({**target_answer, "CHAP_R": "0x" + "00" * 16})
    with pytest.raises(ChapAuthError, match="target answered as CHAP user"):
        initiator.verify_target({**target_answer, "CHAP_N": "other"})


def test_initiator_refuses_bad_target_answers() -> None:
    initiator = ChapInitiator(INITIATOR, algorithms=(CHAP_MD5,))
    good = {"CHAP_A": "5", "CHAP_I": "1", "CHAP_C": "0x" + "22" * 16}
    with pytest.raises(ChapAuthError, match="did not offer"):
        initiator.respond({**good, "CHAP_A": "7"})
    with pytest.raises(ChapAuthError, match="shorter than 16"):
        initiator.respond({**good, "CHAP_C": "0x2222"})
    with pytest.raises(ChapAuthError):
        initiator.respond({**good, "CHAP_A": "Reject"})
    with pytest.raises(ChapAuthError, match="no mutual CHAP"):
        initiator.verify_target({})
    assert initiator.algorithms_offer() == "5"
