"""Our target seen through libiscsi's command-line tools (real initiator, real sockets)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from reservoir.lab import loopdev
from reservoir.lab.peers import ReservoirTarget

from .conftest import IQN, LUN_SIZE, need_tool
from .rawclient import RawClient, read16, write16

pytestmark = pytest.mark.integration


def _run(*cmd: str) -> str:
    need_tool(cmd[0])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{cmd[0]} failed: {done.stdout}{done.stderr}"
    return done.stdout


def test_iscsi_ls_discovers_the_target_and_its_lun(target: ReservoirTarget) -> None:
    out = _run("iscsi-ls", "-s", f"iscsi://{target.host}:{target.port}")
    assert f"Target:{IQN} Portal:{target.host}:{target.port},1" in out
    assert "Lun:0" in out and "DIRECT_ACCESS" in out


def test_iscsi_inq_reads_standard_inquiry(target: ReservoirTarget) -> None:
    out = _run("iscsi-inq", target.url())
    assert "Peripheral Device Type:DIRECT_ACCESS" in out or "Direct Access" in out
    assert "Vendor:" in out


def test_iscsi_inq_reads_serial_number_page(target: ReservoirTarget) -> None:
    out = _run("iscsi-inq", "-e", "1", "-c", "128", target.url())
    assert "Unit Serial Number:" in out


def test_iscsi_readcapacity16_reports_the_file_size(target: ReservoirTarget) -> None:
    out = _run("iscsi-readcapacity16", target.url())
    assert f"Total size:{LUN_SIZE}" in out


def test_file_lun_written_and_read_back_compares_by_hash(
    target: ReservoirTarget, lun_file: Path
) -> None:
    payload = os.urandom(4 << 20)
    blocks = len(payload) // 512
    with RawClient(target.host, target.port) as client:
        client.login(IQN)
        client.clear_unit_attention()
        written = client.scsi(write16(2048, blocks), data=payload, immediate=65536)
        assert written.status == 0
        read = client.scsi(read16(2048, blocks), read=len(payload))
        assert read.status == 0
        client.logout()
    assert hashlib.sha256(read.data).digest() == hashlib.sha256(payload).digest()
    with open(lun_file, "rb") as f:
        f.seek(2048 * 512)
        on_disk = f.read(len(payload))
    assert hashlib.sha256(on_disk).digest() == hashlib.sha256(payload).digest()


def test_loop_device_lun_is_served_and_written_through(tmp_path: Path) -> None:
    image = tmp_path / "backing.img"
    with open(image, "wb") as f:
        f.truncate(32 << 20)
    try:
        with loopdev.loop_device(image, sector_size=4096) as dev:
            _serve_block_device(tmp_path, Path(dev))
    except loopdev.LoopUnavailable as exc:
        pytest.skip(str(exc))
    payload = image.read_bytes()[8 * 4096 : 8 * 4096 + 65536]
    assert payload == bytes(range(256)) * 256


def _serve_block_device(tmp_path: Path, dev: Path) -> None:
    with ReservoirTarget([dev], iqn=IQN, log_path=tmp_path / "t.log", open_access=True) as target:
        assert "BLOCK LENGTH IN BYTES:4096" in _run("iscsi-readcapacity16", target.url())
        with RawClient(target.host, target.port) as client:
            client.login(IQN)
            client.clear_unit_attention()
            data = bytes(range(256)) * 256
            assert client.scsi(write16(8, 16), data=data, immediate=len(data)).status == 0
            assert client.scsi(bytes([0x35]) + bytes(9)).status == 0  # SYNCHRONIZE CACHE(10)
            assert client.scsi(read16(8, 16), read=len(data)).data == data
