"""``reservoir copy``'s own entry (``python -m reservoir.agent.transfer.cli``), and
``--max-rate``: the rate parsed, and every stream paced at its part."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from reservoir.agent.transfer import CopyOptions, cli, copy
from reservoir.agent.transfer._errors import CopyError, RemoteUnreachableError
from reservoir.agent.transfer._progress import Progress


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="reservoir")
    cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["copy", "/tmp/src", *argv])


@pytest.mark.parametrize(
    ("text", "bps"),
    [("800M", 800_000_000), ("2.5G", 2_500_000_000), ("64k", 64_000), ("100000000", 10**8),
     ("1g", 10**9), (" 10M ", 10_000_000)],
)  # fmt: skip
def test_rates_take_decimal_units(text: str, bps: int) -> None:
    assert cli.parse_rate(text) == bps


@pytest.mark.parametrize("text", ["", "M", "fast", "-5M", "0", "1e30", "10 Mbit", "nan"])
def test_what_is_not_a_rate_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"not a rate in bit/s \(e\.g\. 800M"):
        cli.parse_rate(text)


def test_each_stream_of_every_destination_gets_its_part() -> None:
    args = parse("/tmp/d1", "/tmp/d2", "--streams", "4", "--max-rate", "64M")
    caps = cli.options_from(args).stream_caps
    assert caps is not None
    assert caps.pacing == dict.fromkeys(range(8), 1_000_000)  # bytes/s: 8 Mbit/s each
    assert caps.cwnd == {}


def test_without_max_rate_nothing_is_paced() -> None:
    assert cli.options_from(parse("/tmp/d1")).stream_caps is None


def test_a_rate_too_small_for_the_streams_is_refused() -> None:
    args = parse("/tmp/d1", "--streams", "16", "--max-rate", "64k")
    with pytest.raises(CopyError, match="below 8000 bit/s a stream"):
        cli.options_from(args)


def test_the_copy_s_own_entry_copies_and_says_what_went_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = tmp_path / "src.img", tmp_path / "dst.img"
    src.write_bytes(os.urandom(3 << 20))
    assert cli.run([str(src), str(dst), "--streams", "2", "--extent-size", str(1 << 20)]) == 0
    assert dst.read_bytes() == src.read_bytes()
    assert "equal to the source" in capsys.readouterr().out
    assert cli.run([str(tmp_path / "none.img"), str(dst)]) == 1
    assert "none.img does not exist" in capsys.readouterr().err


# ---------------------------------------------------------------- CHAP secrets off the command line

SECRET = "initiator-secret"


def _secret_file(tmp_path: Path, secret: str, mode: int = 0o600) -> Path:
    path = tmp_path / f"secret-{mode:o}"
    path.write_text(secret + "\n")
    path.chmod(mode)
    return path


def test_the_chap_secret_is_read_from_a_file_and_the_mutual_one_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("COPY_MUTUAL_SECRET", "target-secret")
    args = parse(
        *("/tmp/d1", "--chap", "iqn.2026-11.org.example:h1"),
        *("--chap-secret-file", str(_secret_file(tmp_path, SECRET))),
        *("--mutual-chap", "target", "--mutual-chap-secret-env", "COPY_MUTUAL_SECRET"),
    )
    options = cli.options_from(args)
    assert options.chap == ("iqn.2026-11.org.example:h1", SECRET)  # the user keeps its colon
    assert options.mutual_chap == ("target", "target-secret")
    assert "command line" not in caplog.text


def test_a_secret_on_the_command_line_is_taken_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = cli.options_from(parse("/tmp/d1", "--chap", f"h1:{SECRET}"))
    assert options.chap == ("h1", SECRET)
    assert "the --chap secret is on the command line" in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--chap", "h1", "--chap-secret-file", "{file644}"], "chmod 600"),
        (["--chap", "h1", "--chap-secret-file", "{missing}"], "No such file"),
        (["--chap", "h1", "--chap-secret-env", "NO_SUCH_SECRET"], "NO_SUCH_SECRET holds no"),
        (["--chap-secret-file", "{file600}"], "need --chap USER"),
        (["--chap", "h1", "--chap-secret-file", "{file600}", "--chap-secret-env", "X"], "not both"),
        (["--chap", "h1"], "expected USER:SECRET, or USER with --chap-secret-file"),
    ],
)
def test_a_secret_that_cannot_be_had_is_refused_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.delenv("NO_SUCH_SECRET", raising=False)
    files = {
        "{file644}": str(_secret_file(tmp_path, SECRET, 0o644)),
        "{file600}": str(_secret_file(tmp_path, SECRET)),
        "{missing}": str(tmp_path / "none"),
    }
    args = parse("/tmp/d1", *(files.get(a, a) for a in argv))
    with pytest.raises(CopyError, match=message):
        cli.options_from(args)


@pytest.mark.parametrize("size", ["1000", "4096", "63K"])
def test_an_extent_too_small_to_pay_for_itself_is_refused(
    size: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--extent-size 1000`` was rounded to 1 KiB blocks: a 256 MiB copy of 262144
    extents crawled at 10 MB/s on a whole core."""
    with pytest.raises(SystemExit):
        parse("/tmp/d1", "--extent-size", size)
    assert f"argument --extent-size: '{size}': at least 64KiB" in capsys.readouterr().err
    assert cli.options_from(parse("/tmp/d1", "--extent-size", "64K")).extent_size == 64 << 10


def test_the_engine_refuses_a_tiny_extent_from_any_caller(tmp_path: Path) -> None:
    src = tmp_path / "src.img"
    src.write_bytes(bytes(1 << 20))
    opts = CopyOptions(extent_size=4096, checkpoint=tmp_path / "ck.json")
    with pytest.raises(CopyError, match="extent size 4096: at least 65536 bytes"):
        asyncio.run(copy(str(src), str(tmp_path / "dst.img"), opts))
    assert not (tmp_path / "dst.img").exists()


def test_a_target_lost_mid_copy_is_said_with_how_to_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine (stood in for here) made progress, then lost every stream: the user is
    told the checkpoint is kept and --resume goes on; a target never reached is not."""
    progressed = True

    async def lost(source: str, dest: object, options: object, *, progress: Any) -> None:
        if progressed:
            progress(Progress(8 << 20, 64 << 20, 8 << 20, 1.0, 8, 64, 0, 2, 0, 1))
        raise RemoteUnreachableError(
            "every stream failed with 56 extents left (streams 0, 1: lost)"
        )

    monkeypatch.setattr(cli, "copy", lost)
    argv = [str(tmp_path / "src.img"), "iscsi://127.0.0.1:3260/iqn.2026-11.org.x:t/0"]
    assert cli.run(argv) == 1
    err = capsys.readouterr().err
    assert "reservoir copy: every stream failed with 56 extents left" in err
    assert "kept in the checkpoint: once the target answers again, the same command with " \
        "--resume goes on from there" in err  # fmt: skip
    progressed = False
    assert cli.run(argv) == 1
    assert "--resume" not in capsys.readouterr().err
