"""``reservoir copy`` on loopback: rate, CPU per GB, iperf3 baseline, into tgt too.

    python -m reservoir.lab.bench_copy [--size 4G] [--streams 8] [--tgt-size 1G] [--seconds 10]

1. A SIZE source file of incompressible data (a 64 MiB random block repeated,
   each MiB stamped with its own counter so no two extents are alike; fsynced)
   copied by ``reservoir copy --streams N`` (verified) into a LUN file of the
   same size served by ``reservoir target serve``, once with ``--direct``
   (O_DIRECT: what a LUN receiving copies should use) and once through the page
   cache. Figures: seconds, MB/s, CPU
   seconds per GB of the copy process, of the target process and both; the
   LUN file's xxh3-128 against the source's.
2. iperf3 on 127.0.0.1 with as many streams, for ``--seconds``: the copy's
   rate as a share of what TCP alone moves on this machine.
3. The first TGT_SIZE bytes of the source copied into a tgtd file LUN; MB/s
   and the tgt backing file's hash against the source's.

A benchmark, not a test: it prints figures and exits 0 unless a peer failed
(1) or a copy differs from its source (2).
No emulation: loopback only, no namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import xxhash

from reservoir.common import sizes
from reservoir.lab.peers import (
    LOCALHOST,
    PeerError,
    ReservoirTarget,
    Tgtd,
    free_port,
    reservoir_command,
    stop_process,
)

BLOCK = 64 << 20
STAMP_EVERY = 1 << 20
READ_CHUNK = 8 << 20
_SUMMARY_RATE = re.compile(r"^copied \d+ bytes in ([\d.]+) s \(([\d.]+) MB/s\)", re.MULTILINE)


def parse_size(text: str) -> int:
    """``4G``, ``512M``, ``1048576``: binary units (:mod:`reservoir.common.sizes`), a
    positive multiple of 512 bytes."""
    try:
        return sizes.parse_size(text, multiple=512)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass
class Source:
    path: Path
    size: int
    digest: str  # xxh3-128 of the whole file
    prefix: int
    prefix_digest: str  # xxh3-128 of its first ``prefix`` bytes


def write_source(path: Path, size: int, prefix: int) -> Source:
    """Writes ``size`` bytes, hashing them (and their first ``prefix``) on the way."""
    pattern = bytearray(os.urandom(BLOCK))
    whole, head = xxhash.xxh3_128(), xxhash.xxh3_128()
    written = 0
    with open(path, "wb") as f:
        while written < size:
            for at in range(0, BLOCK, STAMP_EVERY):
                pattern[at : at + 8] = (written + at).to_bytes(8, "little")
            piece = memoryview(pattern)[: min(BLOCK, size - written)]
            f.write(piece)
            whole.update(piece)
            if written < prefix:
                head.update(piece[: prefix - written])
            written += len(piece)
        f.flush()
        os.fsync(f.fileno())
    return Source(path, size, whole.hexdigest(), prefix, head.hexdigest())


def file_digest(path: Path, length: int | None = None) -> str:
    """xxh3-128 of the file (or its first ``length`` bytes), read in 8 MiB chunks."""
    h = xxhash.xxh3_128()
    left = os.path.getsize(path) if length is None else length
    with open(path, "rb", buffering=0) as f:
        while left > 0:
            chunk = f.read(min(READ_CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def make_lun(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class CopyRun:
    seconds: float
    nbytes: int
    copy_cpu: float
    target_cpu: float
    output: str

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def reported(self) -> str:
        """The copy's own figure (from login to the end, without process start-up)."""
        m = _SUMMARY_RATE.search(self.output)
        return f"{m.group(1)} s, {m.group(2)} MB/s" if m else "none"

    def cpu_per_gb(self, cpu: float) -> float:
        return cpu / (self.nbytes / 1e9)


def run_copy(
    source: Path,
    url: str,
    nbytes: int,
    *,
    streams: int,
    work: Path,
    target_pid: int,
    extra: tuple[str, ...] = (),
) -> CopyRun:
    """``reservoir copy`` as a child; its CPU from RUSAGE_CHILDREN, the target's from /proc."""
    cmd = [*reservoir_command(), "copy", str(source), url, "--streams", str(streams)]
    cmd += ["--checkpoint", str(work / f"checkpoint-{time.monotonic_ns()}.json"), *extra]
    children, target = children_cpu_seconds(), proc_cpu_seconds(target_pid)
    start = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - start
    target = proc_cpu_seconds(target_pid) - target
    children = children_cpu_seconds() - children
    output = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        raise PeerError(f"reservoir copy failed ({done.returncode}): {output[-800:]}")
    return CopyRun(seconds, nbytes, children, target, output)


def iperf3_mb_per_s(streams: int, seconds: int) -> float:
    """iperf3 -P ``streams`` for ``seconds`` on loopback: received MB/s."""
    port = free_port()
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-B", LOCALHOST, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, server)  # not by connecting: that would use up -1
        client = ["iperf3", "-c", LOCALHOST, "-p", str(port), "-P", str(streams)]
        client += ["-t", str(seconds), "-J"]
        done = subprocess.run(client, capture_output=True, text=True, check=False)
        try:
            result = json.loads(done.stdout)
            bits = float(result["end"]["sum_received"]["bits_per_second"])
        except (ValueError, KeyError) as exc:
            raise PeerError(f"iperf3 client failed: {(done.stdout + done.stderr)[-400:]}") from exc
        return bits / 8 / 1e6
    finally:
        stop_process(server)


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Waits until something listens on ``port`` (read from ``ss``, no connection made)."""
    deadline = time.monotonic() + timeout
    while not subprocess.run(
        ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=False
    ).stdout.strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise PeerError(f"iperf3 server did not listen on port {port}")
        time.sleep(0.05)


def print_copy(label: str, run: CopyRun) -> None:
    print(
        f"  {label}: {run.nbytes / (1 << 30):.2f} GiB in {run.seconds:.2f} s,"
        f" {run.mb_per_s:.0f} MB/s (whole process; its own summary: {run.reported()})",
        flush=True,
    )


def bench_reservoir(
    src: Source, args: argparse.Namespace, work: Path, *, direct: bool
) -> tuple[CopyRun, str]:
    lun = make_lun(work / "reservoir-lun.img", src.size)
    extra = ["--direct"] if direct else []
    target = ReservoirTarget([lun], log_path=work / "target.log", extra=extra, open_access=True)
    with target:
        assert target.proc is not None
        run = run_copy(
            src.path,
            target.url(),
            src.size,
            streams=args.streams,
            work=work,
            target_pid=target.proc.pid,
        )
    how = " (LUN with O_DIRECT)" if direct else " (LUN through the page cache)"
    print_copy(f"reservoir copy --streams {args.streams} into reservoir target{how}", run)
    total = run.copy_cpu + run.target_cpu
    print(
        f"  CPU seconds per GB: copy {run.cpu_per_gb(run.copy_cpu):.2f},"
        f" target {run.cpu_per_gb(run.target_cpu):.2f}, total {run.cpu_per_gb(total):.2f}"
        f"  (copy {run.copy_cpu:.1f} s, target {run.target_cpu:.1f} s)",
        flush=True,
    )
    digest = file_digest(lun)
    print(f"  LUN file xxh3-128 {digest} {_same(digest, src.digest)}", flush=True)
    lun.unlink()
    return run, digest


def bench_tgt(src: Source, args: argparse.Namespace, work: Path) -> tuple[CopyRun, str]:
    backing = make_lun(work / "tgt-lun.img", src.prefix)
    with Tgtd(backing) as tgt:
        assert tgt.proc is not None
        extra = ("--range", f"0:{src.prefix}")
        run = run_copy(
            src.path,
            tgt.url(),
            src.prefix,
            streams=args.streams,
            work=work,
            target_pid=tgt.proc.pid,
            extra=extra,
        )
    print_copy(f"reservoir copy --streams {args.streams} into tgtd", run)
    print(
        f"  CPU seconds per GB: copy {run.cpu_per_gb(run.copy_cpu):.2f},"
        f" tgtd {run.cpu_per_gb(run.target_cpu):.2f}",
        flush=True,
    )
    digest = file_digest(backing)
    print(f"  tgt backing file xxh3-128 {digest} {_same(digest, src.prefix_digest)}", flush=True)
    backing.unlink()
    return run, digest


def _same(digest: str, expected: str) -> str:
    return "== source" if digest == expected else f"!= source {expected} (MISMATCH)"


def run_all(args: argparse.Namespace, work: Path) -> int:
    tgt_size = min(args.tgt_size, args.size)
    print(f"source: {args.size / (1 << 30):.2f} GiB of random data", flush=True)
    start = time.monotonic()
    src = write_source(work / "source.img", args.size, tgt_size)
    print(f"  written and fsynced in {time.monotonic() - start:.1f} s, xxh3-128 {src.digest}")
    print("\n1. into the reservoir target (loopback, no emulation)", flush=True)
    direct, direct_digest = bench_reservoir(src, args, work, direct=True)
    cached, cached_digest = bench_reservoir(src, args, work, direct=False)
    print(f"\n2. iperf3 -P {args.streams} -t {args.seconds} on 127.0.0.1", flush=True)
    tcp = iperf3_mb_per_s(args.streams, args.seconds)
    print(
        f"  iperf3 {tcp:.0f} MB/s; reservoir copy / iperf3 = {direct.mb_per_s / tcp:.2f}"
        f" (O_DIRECT LUN), {cached.mb_per_s / tcp:.2f} (page-cache LUN)"
    )
    same = direct_digest == cached_digest == src.digest
    if not args.skip_tgt:
        print(f"\n3. into tgtd ({tgt_size / (1 << 30):.2f} GiB)", flush=True)
        theirs, tgt_digest = bench_tgt(src, args, work)
        same = same and tgt_digest == src.prefix_digest
        print(
            f"\nsummary: into reservoir {direct.mb_per_s:.0f} MB/s (O_DIRECT LUN),"
            f" {cached.mb_per_s:.0f} MB/s (page-cache LUN), into tgtd"
            f" {theirs.mb_per_s:.0f} MB/s, iperf3 {tcp:.0f} MB/s"
        )
    print(f"data: {'every copy equal to its source' if same else 'A COPY DIFFERS FROM ITS SOURCE'}")
    return 0 if same else 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size", type=parse_size, default=4 << 30, help="default 4G")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--tgt-size", type=parse_size, default=1 << 30, help="default 1G")
    parser.add_argument("--seconds", type=int, default=10, help="iperf3 duration")
    parser.add_argument("--skip-tgt", action="store_true")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="reservoir-bench-copy.", dir=args.dir) as tmp:
        try:
            return run_all(args, Path(tmp))
        except PeerError as e:
            print(f"bench_copy: {e}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
