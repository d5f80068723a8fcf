"""Sizes with units, as every command takes them."""

from __future__ import annotations

import argparse

import pytest

from reservoir.common.sizes import parse_rate, parse_size, size_arg


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        ("8MiB", 8 << 20),
        ("8M", 8 << 20),
        ("8mb", 8 << 20),
        ("512k", 512 << 10),
        ("512 KiB", 512 << 10),
        ("1.5G", 3 << 29),
        ("2T", 2 << 40),
        ("0x1000", 4096),
    ],
)
def test_a_size_reads_with_binary_units_or_bytes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "8x", "M", "-1", "8 MiBs", "0xZZ", "1..5G"])
def test_what_is_not_a_size_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a size \(e.g. 8MiB, 512K, 4096\)"):
        parse_size(text)


def test_bounds_and_multiples_are_said_in_words() -> None:
    with pytest.raises(ValueError, match="at least 1 bytes"):
        parse_size("0")
    assert parse_size("0", minimum=0) == 0
    with pytest.raises(ValueError, match="a multiple of 512 bytes"):
        parse_size("1000", multiple=512)
    with pytest.raises(ValueError, match="not a whole number of bytes"):
        parse_size("0.3K")


def test_as_an_argparse_type_a_bad_size_is_a_usage_error() -> None:
    assert size_arg("1MiB") == 1 << 20
    with pytest.raises(argparse.ArgumentTypeError, match="'eight' is not a size"):
        size_arg("eight")


@pytest.mark.parametrize(
    ("text", "bps"),
    [("10G", 10**10), ("25Gbit", 25 * 10**9), ("400Mbps", 4 * 10**8), ("1.5g", 15 * 10**8),
     ("10 Gbit/s", 10**10), ("1000", 1000), ("100M", 10**8)],
)  # fmt: skip
def test_rates_are_bits_per_second_with_decimal_units(text: str, bps: int) -> None:
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text", ["", "fast", "10GiB", "-1G", "0", "10 G bit"])
def test_what_is_not_a_rate_is_refused_in_words(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)
