"""iSCSI text key=value encoding (RFC 7143 §6.1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reservoir.agent.iscsi.errors import IscsiError
from reservoir.agent.iscsi.text import (
    MAX_KEY_BYTES,
    TextAssembler,
    TextError,
    encode_text,
    format_binary,
    format_boolean,
    format_list,
    format_numerical,
    parse_binary,
    parse_boolean,
    parse_list,
    parse_numerical,
    parse_range,
    parse_text,
    split_text,
)

# ------------------------------------------------------------------ parse_text


def test_parse_simple_pairs_in_order() -> None:
    data = b"InitiatorName=iqn.2024-01.org.example:host\x00SessionType=Normal\x00"
    assert parse_text(data) == [
        ("InitiatorName", "iqn.2024-01.org.example:host"),
        ("SessionType", "Normal"),
    ]


def test_parse_accepts_trailing_padding() -> None:
    assert parse_text(b"A=1\x00\x00\x00\x00") == [("A", "1")]


def test_parse_empty_and_padding_only() -> None:
    assert parse_text(b"") == []
    assert parse_text(b"\x00\x00") == []


def test_value_may_be_empty_and_contain_equals() -> None:
    assert parse_text(b"A=\x00B=x=y\x00") == [("A", ""), ("B", "x=y")]


def test_utf8_alias_value() -> None:
    alias = "Disque de données ☃"
    assert parse_text(encode_text([("InitiatorAlias", alias)])) == [("InitiatorAlias", alias)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"A=1", "does not end with a NUL"),
        (b"A=1\x00\x00B=2\x00", "empty key=value pair"),
        (b"NoEquals\x00", "without '='"),
        (b"=value\x00", "empty key"),
        (b"lower=1\x00", "invalid key name"),
        (b"Bad Key=1\x00", "invalid key name"),
        (b"A*=1\x00", "invalid key name"),
        (b"K\xc3\xa9=1\x00", "not ASCII"),
        (b"A=\xff\xfe\x00", "not valid UTF-8"),
        (b"A=1\x00A=2\x00", "appears more than once"),
        (b"K" + b"x" * MAX_KEY_BYTES + b"=1\x00", "longer than 63"),
        (b"A=" + b"v" * 256 + b"\x00", "more than 255"),
        (b"HeaderDigest=" + b"v" * 256 + b",None\x00", "longer than 255"),
        (b"CHAP_C=0x" + b"a" * 8200 + b"\x00", "more than 8192"),
    ],
)
def test_parse_rejects(data: bytes, message: str) -> None:
    with pytest.raises(TextError, match=message):
        parse_text(data)


def test_text_error_is_the_protocols_not_a_value_error() -> None:
    assert issubclass(TextError, IscsiError) and not issubclass(TextError, ValueError)


def test_key_limits_and_special_keys() -> None:
    longest = "K" * MAX_KEY_BYTES
    assert parse_text(f"{longest}=1\x00".encode()) == [(longest, "1")]
    data = b"iSCSIProtocolLevel=1\x00X-com.example.Foo=1\x00X#org.example=1\x00"
    assert [key for key, _ in parse_text(data)] == [
        "iSCSIProtocolLevel",
        "X-com.example.Foo",
        "X#org.example",
    ]


def test_value_limits() -> None:
    assert parse_text(b"A=" + b"v" * 255 + b"\x00")[0][1] == "v" * 255
    challenge = "0x" + "ab" * 1024
    assert parse_text(f"CHAP_C={challenge}\x00".encode()) == [("CHAP_C", challenge)]


def test_repeatable_keys_for_send_targets() -> None:
    data = b"TargetName=iqn.a\x00TargetAddress=h:3260,1\x00TargetName=iqn.b\x00"
    with pytest.raises(TextError):
        parse_text(data)
    assert len(parse_text(data, repeatable={"TargetName", "TargetAddress"})) == 3
    assert len(parse_text(data, allow_duplicates=True)) == 3


# ------------------------------------------------------------------ encode_text


def test_encode_terminates_every_pair() -> None:
    assert encode_text([("A", "1"), ("B", "")]) == b"A=1\x00B=\x00"


@pytest.mark.parametrize(
    ("key", "value"),
    [("bad", "1"), ("A", "nul\x00inside"), ("A", "v" * 256), ("", "1")],
)
def test_encode_rejects(key: str, value: str) -> None:
    with pytest.raises(TextError):
        encode_text([(key, value)])


def test_split_text() -> None:
    assert split_text(b"", 10) == [b""]
    assert split_text(b"abcdefg", 3) == [b"abc", b"def", b"g"]
    with pytest.raises(ValueError):
        split_text(b"x", 0)


# ------------------------------------------------------------------ assembler


def test_assembler_joins_pairs_split_anywhere() -> None:
    data = encode_text([("InitiatorName", "iqn.2024-01.org.example:h"), ("SessionType", "Normal")])
    assembler = TextAssembler()
    assert assembler.feed(data[:5], cont=True) is None
    assert assembler.pending
    assert assembler.feed(data[5:17], cont=True) is None
    assert assembler.feed(data[17:], cont=False) == parse_text(data)
    assert not assembler.pending


def test_assembler_limit() -> None:
    assembler = TextAssembler(max_bytes=16)
    assert assembler.feed(b"A=1234567\x00", cont=True) is None
    with pytest.raises(TextError, match="longer than 16"):
        assembler.feed(b"B=1234567\x00", cont=False)
    assert not assembler.pending
    assert assembler.feed(b"A=1\x00", cont=False) == [("A", "1")]


def test_assembler_detects_duplicates_across_pdus() -> None:
    assembler = TextAssembler()
    assembler.feed(b"A=1\x00", cont=True)
    with pytest.raises(TextError, match="more than once"):
        assembler.feed(b"A=1\x00", cont=False)


# ------------------------------------------------------------------ values


@pytest.mark.parametrize(
    ("text", "number"),
    [("0", 0), ("8192", 8192), ("0x2000", 8192), ("0X1f", 31), ("18446744073709551615", 2**64 - 1)],
)
def test_parse_numerical(text: str, number: int) -> None:
    assert parse_numerical(text) == number


@pytest.mark.parametrize(
    "text", ["", "012", "-1", "1.5", "0x", "abc", " 1", "18446744073709551616"]
)
def test_parse_numerical_rejects(text: str) -> None:
    with pytest.raises(TextError):
        parse_numerical(text)


def test_parse_numerical_range_check() -> None:
    assert parse_numerical("512", 512, 1024) == 512
    with pytest.raises(TextError, match="outside"):
        parse_numerical("511", 512, 1024)


def test_numeric_range() -> None:
    assert parse_range("1~5") == (1, 5)
    with pytest.raises(TextError):
        parse_range("5~1")
    with pytest.raises(TextError):
        parse_range("5")


def test_format_numerical() -> None:
    assert format_numerical(65536) == "65536"
    with pytest.raises(ValueError):
        format_numerical(-1)


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        ("0x00ff", b"\x00\xff"),
        ("0XABC", b"\x0a\xbc"),  # odd digit count: implicit leading zero
        ("0bAAEC", b"\x00\x01\x02"),
        ("0BAP8=", b"\x00\xff"),
    ],
)
def test_parse_binary(text: str, raw: bytes) -> None:
    assert parse_binary(text) == raw


@pytest.mark.parametrize("text", ["00ff", "0x", "0xgg", "0b", "0b@@@@", "0bAAE", "1234"])
def test_parse_binary_rejects(text: str) -> None:
    with pytest.raises(TextError):
        parse_binary(text)


def test_parse_binary_length_limit() -> None:
    assert len(parse_binary("0x" + "11" * 1024)) == 1024
    with pytest.raises(TextError, match="longer than"):
        parse_binary("0x" + "11" * 1025)


def test_format_binary() -> None:
    assert format_binary(b"\x01\xab") == "0x01ab"
    assert format_binary(b"\x00\xff", use_base64=True) == "0bAP8="


def test_booleans() -> None:
    assert parse_boolean("Yes") is True
    assert parse_boolean("No") is False
    assert format_boolean(True) == "Yes"
    assert format_boolean(False) == "No"
    for bad in ("yes", "NO", "1", ""):
        with pytest.raises(TextError):
            parse_boolean(bad)


def test_lists() -> None:
    assert parse_list("CRC32C,None") == ["CRC32C", "None"]
    assert parse_list("None") == ["None"]
    with pytest.raises(TextError):
        parse_list("CRC32C,,None")
    assert format_list(["CHAP", "None"]) == "CHAP,None"
    with pytest.raises(ValueError):
        format_list([])


# ------------------------------------------------------------------ properties

_KEY_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-+@_"
keys = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    st.text(_KEY_CHARS, max_size=MAX_KEY_BYTES - 1),
)
values = st.text(st.characters(codec="utf-8", exclude_characters="\x00")).filter(
    lambda v: len(v.encode("utf-8")) <= 255
)
pair_lists = st.dictionaries(keys, values, max_size=20).map(lambda d: list(d.items()))


@settings(max_examples=200)
@given(pair_lists)
def test_round_trip(pairs: list[tuple[str, str]]) -> None:
    assert parse_text(encode_text(pairs)) == pairs


@settings(max_examples=200)
@given(pair_lists, st.lists(st.integers(1, 64), max_size=8))
def test_round_trip_through_assembler(pairs: list[tuple[str, str]], cuts: list[int]) -> None:
    data = encode_text(pairs)
    assembler = TextAssembler()
    position = 0
    for cut in cuts:
        assert assembler.feed(data[position : position + cut], cont=True) is None
        position += cut
    assert assembler.feed(data[position:], cont=False) == pairs


@settings(max_examples=300)
@given(st.binary(max_size=600))
def test_parse_never_fails_otherwise(data: bytes) -> None:
    try:
        pairs = parse_text(data)
    except TextError:
        return
    assert parse_text(encode_text(pairs)) == pairs
