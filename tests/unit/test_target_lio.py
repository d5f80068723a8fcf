"""What `reservoir target lio` refuses before it touches LIO, and the names it gives;
LIO itself is driven in tests/vm/test_lio_backend.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from reservoir.agent.target import lio
from reservoir.agent.target.config import Lun, Target, TargetConfig


def _config(*luns: Lun, **access: object) -> TargetConfig:
    target = Target("iqn.2026-11.org.reservoir:t1", luns=list(luns), **access)  # type: ignore[arg-type]
    return TargetConfig(portals=[("127.0.0.1", 3260)], targets=[target])


def test_backstores_are_named_after_the_alias_or_the_iqn_tail() -> None:
    lun = Lun(2, "/srv/x.img")
    assert lio.backstore_name(Target("iqn.2026-11.org.reservoir:vol 1"), lun) == "rsv-vol_1-2"
    assert lio.backstore_name(Target("iqn.x:y", alias="db"), lun) == "rsv-db-2"


def test_a_missing_volume_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.img"
    with pytest.raises(lio.LioError, match=f"LUN 0: {missing}: No such file"):
        lio._check_luns(_config(Lun(0, str(missing)), open=True))


def test_a_folder_is_not_a_volume(tmp_path: Path) -> None:
    with pytest.raises(lio.LioError, match="neither a file nor a block device"):
        lio._check_luns(_config(Lun(0, str(tmp_path)), open=True))


def test_mixed_read_only_luns_without_an_allow_list_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.img", tmp_path / "b.img"
    a.write_bytes(bytes(4096))
    b.write_bytes(bytes(4096))
    mixed = (Lun(0, str(a)), Lun(1, str(b), read_only=True))
    with pytest.raises(lio.LioError, match="all or none"):
        lio._check_luns(_config(*mixed, open=True))
    lio._check_luns(_config(*mixed, allow=["iqn.2026-11.org.example:h1"]))  # per ACL: fine


def test_without_lio_the_error_says_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lio, "DBROOT", Path("/proc/no-such-place/target"))
    with pytest.raises(lio.LioError, match="LIO is not available here"):
        lio.save(Path("/tmp/never-written.json"))
