"""A volume's identity names what the path reaches, not the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reservoir.agent.scsi import derive_naa
from reservoir.agent.storage import volume_identity


def test_a_symlink_and_a_hard_link_are_the_same_volume(tmp_path: Path) -> None:
    vol = tmp_path / "vol.img"
    vol.write_bytes(b"\0" * 4096)
    (tmp_path / "link").symlink_to(vol)
    os.link(vol, tmp_path / "hard")
    spellings = [vol, tmp_path / "link", tmp_path / "hard", tmp_path / "." / "vol.img"]
    assert len({volume_identity(p) for p in spellings}) == 1


def test_two_files_are_two_volumes_with_two_naas(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"x")
    b.write_bytes(b"x")
    assert volume_identity(a) != volume_identity(b)
    assert derive_naa(volume_identity(a)) != derive_naa(volume_identity(b))


def test_a_missing_volume_has_no_identity(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        volume_identity(tmp_path / "missing")
