"""Our target against tgt, same machine, same run: conformance and speed.

    python -m reservoir.lab.compare_targets [--perf-seconds 10] [--skip-conformance]

1. ``iscsi-test-cu --dataloss --test=ALL`` against each target (two portals each,
   so the MultipathIO tests run on both), on fresh LUN files of the same size.
   A CUnit pass that printed ``[SKIPPED]`` counts as a skip.
2. ``iscsi-perf`` against each, on the same backing file: sequential 128 KiB
   and random 4 KiB reads, 32 in flight; ratios ours/tgt.

A benchmark, not a test: it prints figures and exits 0 unless a peer failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path

from reservoir.lab.peers import (
    PerfResult,
    ReservoirTarget,
    SuiteResult,
    Tgtd,
    run_iscsi_perf,
    run_test_cu,
)

CONFORMANCE_LUN = 256 << 20
# Small enough to stay in this machine's page cache (which the host trims to
# about 1.2 GiB): both targets are measured on their protocol path, not on
# which of them the host's reclaim happened to hit.
PERF_FILE = 256 << 20


@dataclass
class Figures:
    conformance: dict[str, dict[str, int]]
    perf: dict[str, dict[str, float]]


def _urls(target: ReservoirTarget | Tgtd) -> list[str]:
    return [target.url(portal=i) for i in range(len(target.ports))]


def _targets(
    backing: Path, log_dir: Path
) -> dict[str, AbstractContextManager[ReservoirTarget | Tgtd]]:
    return {
        "reservoir": ReservoirTarget(
            [backing], portals=2, open_access=True, log_path=log_dir / "reservoir.log"
        ),
        "tgt": Tgtd(backing, portals=2),
    }


def _reason(lines: list[str]) -> str:
    for line in lines:
        m = re.search(r"\[(?:SKIPPED|FAILED)\]\s*(.*)", line)
        if m:
            return m.group(1).strip()
    failed = [ln.strip() for ln in lines if re.match(r"\s*\d+\. ", ln)]
    return failed[0] if failed else ""


def conformance(work: Path, test: str = "ALL") -> dict[str, SuiteResult]:
    results: dict[str, SuiteResult] = {}
    for name in ("reservoir", "tgt"):
        lun = work / f"conf-{name}.img"
        with open(lun, "wb") as f:
            f.truncate(CONFORMANCE_LUN)
        with _targets(lun, work)[name] as target:
            results[name] = run_test_cu(_urls(target)[0], test, extra=_urls(target)[1:])
        print(f"  {name:10s} {results[name].summary()}", flush=True)
    return results


def perf(work: Path, seconds: int, rounds: int) -> dict[str, dict[str, PerfResult]]:
    """Each workload ``rounds`` times per target, the targets taking turns (the
    machine is noisy); the median round is kept."""
    backing = work / "perf.img"
    with open(backing, "wb") as f:
        for _ in range(PERF_FILE >> 20):
            f.write(bytes(range(256)) * 4096)
        f.flush()
        os.fsync(f.fileno())  # no writeback running under the measurement
    runs: dict[str, dict[str, list[PerfResult]]] = {"tgt": {}, "reservoir": {}}
    for _ in range(rounds):
        for name in ("tgt", "reservoir"):
            with _targets(backing, work)[name] as target:
                url = _urls(target)[0]
                seq = run_iscsi_perf(url, blocks=256, depth=32, seconds=seconds)
                rnd = run_iscsi_perf(url, blocks=8, depth=32, random=True, seconds=seconds)
            runs[name].setdefault("seq_128k_qd32", []).append(seq)
            runs[name].setdefault("rand_4k_qd32", []).append(rnd)
            print(
                f"  {name:10s} sequential 128 KiB: {seq.mb_per_s:7.0f} MB/s"
                f"   random 4 KiB: {rnd.iops:8.0f} IOPS",
                flush=True,
            )
    return {
        name: {
            "seq_128k_qd32": _median(m["seq_128k_qd32"], lambda r: r.mb_per_s),
            "rand_4k_qd32": _median(m["rand_4k_qd32"], lambda r: r.iops),
        }
        for name, m in runs.items()
    }


def _median(results: list[PerfResult], key: Callable[[PerfResult], float]) -> PerfResult:
    return sorted(results, key=key)[len(results) // 2]


def report_conformance(results: dict[str, SuiteResult]) -> None:
    ours, tgt = results["reservoir"], results["tgt"]
    print(f"\nreal passes: reservoir {len(ours.passed)}, tgt {len(tgt.passed)}")
    print(f"failures:    reservoir {len(ours.failed)}, tgt {len(tgt.failed)}")
    print(f"skips:       reservoir {len(ours.skipped)}, tgt {len(tgt.skipped)}")
    for label, names in (("failed", ours.failed), ("skipped", ours.skipped)):
        print(f"\nreservoir {label} ({len(names)}):")
        for name in names:
            print(f"  {name:45s} {_reason(ours.details[name])[:100]}")
    print(f"\ntgt failed ({len(tgt.failed)}): {', '.join(tgt.failed)}")


def report_perf(out: dict[str, dict[str, PerfResult]]) -> None:
    ours, tgt = out["reservoir"], out["tgt"]
    seq = ours["seq_128k_qd32"].mb_per_s / max(tgt["seq_128k_qd32"].mb_per_s, 1e-9)
    rnd = ours["rand_4k_qd32"].iops / max(tgt["rand_4k_qd32"].iops, 1e-9)
    print(
        f"\nmedian ratio reservoir/tgt: sequential 128 KiB x32 {seq:.2f},"
        f" random 4 KiB x32 {rnd:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--perf-seconds", type=int, default=10)
    parser.add_argument("--perf-rounds", type=int, default=3)
    parser.add_argument("--skip-conformance", action="store_true")
    parser.add_argument("--skip-perf", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="reservoir-compare.") as tmp:
        work = Path(tmp)
        figures = Figures({}, {})
        if not args.skip_conformance:
            print("iscsi-test-cu --dataloss --test=ALL (two portals each):", flush=True)
            results = conformance(work)
            report_conformance(results)
            figures.conformance = {
                k: {"passed": len(r.passed), "failed": len(r.failed), "skipped": len(r.skipped)}
                for k, r in results.items()
            }
        if not args.skip_perf:
            print("\niscsi-perf, same 256 MiB backing file, targets taking turns:", flush=True)
            out = perf(work, args.perf_seconds, args.perf_rounds)
            report_perf(out)
            figures.perf = {
                k: {m: r.mb_per_s if m.startswith("seq") else r.iops for m, r in v.items()}
                for k, v in out.items()
            }
    if args.json:
        args.json.write_text(json.dumps(asdict(figures), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
