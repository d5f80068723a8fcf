"""libiscsi's conformance suite against our target: no failures, and nothing
skipped but the features this target deliberately leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest

from reservoir.lab.peers import ReservoirTarget, SuiteResult, run_test_cu

from .conftest import need_tool

pytestmark = pytest.mark.integration

# Skips with their reason: what the target does not offer, on purpose.
EXPECTED_SKIPS = {
    "ExtendedCopy": "EXTENDED COPY (third-party copy) is not implemented",
    "ReceiveCopyResults": "RECEIVE COPY RESULTS belongs to EXTENDED COPY",
    "PreventAllow": "the LU is not removable medium",
    "StartStopUnit.Simple": "the LU is not removable medium (LOEJ)",
    "ReadDefectData10": "no defect lists on a file or block device",
    "ReadDefectData12": "no defect lists on a file or block device",
    "ReadOnly.ReadOnlySBC": "the LU under test is writable",
    "Sanitize": "the suite runs SANITIZE only with --allow-sanitize",
    "WriteAtomic16": "WRITE ATOMIC cannot be guaranteed across a crash on a file",
    "WriteSame10.ZeroBlocks": "WSNZ=1: zero blocks would mean the whole rest of the LU",
    "WriteSame16.ZeroBlocks": "WSNZ=1: zero blocks would mean the whole rest of the LU",
    "CompareAndWrite.InvalidDataOutSize": "one logical block per physical block (LBPPB=1)",
    "WriteSame10.UnmapUnaligned": "one logical block per physical block (LBPPB=1)",
    "WriteSame10.InvalidDataOutSize": "one logical block per physical block (LBPPB=1)",
    "WriteSame16.UnmapUnaligned": "one logical block per physical block (LBPPB=1)",
    "WriteSame16.InvalidDataOutSize": "one logical block per physical block (LBPPB=1)",
}


def _expected_skip(name: str) -> bool:
    return name in EXPECTED_SKIPS or name.partition(".")[0] in EXPECTED_SKIPS


@pytest.fixture(scope="module")
def two_portal_target(tmp_path_factory: pytest.TempPathFactory) -> ReservoirTarget:
    need_tool("iscsi-test-cu")
    work = tmp_path_factory.mktemp("conformance")
    lun = work / "lun.img"
    with open(lun, "wb") as f:
        f.truncate(256 << 20)
    return ReservoirTarget([lun], portals=2, log_path=work / "target.log", open_access=True)


def _run(target: ReservoirTarget, family: str, tmp: Path) -> SuiteResult:
    with target:
        result = run_test_cu(target.url(), family, extra=[target.url(portal=1)], timeout=600)
        assert target.alive(), "the target died under the conformance suite"
    (tmp / f"{family}.log").write_text(result.output)
    return result


def _details(result: SuiteResult, names: list[str]) -> str:
    return "\n".join(line for name in names for line in result.details[name][:4])


def test_scsi_family_passes_with_only_expected_skips(
    two_portal_target: ReservoirTarget, tmp_path: Path
) -> None:
    result = _run(two_portal_target, "SCSI", tmp_path)
    assert result.passed, "no test ran"
    assert not result.failed, _details(result, result.failed)
    unexpected = [name for name in result.skipped if not _expected_skip(name)]
    assert not unexpected, _details(result, unexpected)


def test_iscsi_family_passes_every_test(two_portal_target: ReservoirTarget, tmp_path: Path) -> None:
    result = _run(two_portal_target, "iSCSI", tmp_path)
    assert result.passed, "no test ran"
    assert not result.failed, _details(result, result.failed)
    assert not result.skipped, _details(result, result.skipped)
