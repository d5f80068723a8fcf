"""Guest images built from Debian's packages, cached by what they hold.

:func:`ensure_image` returns a :class:`GuestImage` (an ext4 root file system image,
the kernel and its initrd), building it the first time: ``mmdebstrap`` makes a
bookworm root with the packages asked for, the guest's init and command agent are
written into it (``guest_files/``), the kernel and initrd are taken out of its ``/boot``,
and ``mkfs.ext4 -d`` turns the folder into an image without a loop device or a
mount. The cache folder is named after a digest of the suite, the mirror, the
package list and the guest files, so a change to any of them builds a new image;
it is written under a temporary name and renamed when complete. Guests never write
to it: each boots on a copy-on-write overlay of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from reservoir.common.build_cache import cache_dir
from reservoir.lab.errors import LabError

__all__ = [
    "BASE_PACKAGES",
    "LAB_PACKAGES",
    "MODULE_BUILD_PACKAGES",
    "GuestImage",
    "VmUnavailable",
    "ensure_image",
    "image_key",
]

SUITE = "bookworm"
MIRROR = os.environ.get("RESERVOIR_VM_MIRROR", "http://deb.debian.org/debian")
# what every guest needs: a kernel with its modules and initrd, the agent's Python,
# the tools the lab drives (links, file systems, modules, processes)
BASE_PACKAGES = (
    "linux-image-amd64",
    "initramfs-tools",
    "python3",
    "iproute2",
    "kmod",
    "e2fsprogs",
    "procps",
    "open-iscsi",
    "targetcli-fb",
    "dmsetup",  # dm-multipath tables over two iSCSI sessions
    "iperf3",
    "ethtool",
    "liburing2",  # the storage extension of the host's Reservoir, run in a guest
)
# what building an out-of-tree module for the guest's kernel needs (kmod-pacing's
# ipg qdisc), and its tc plugin's netlink library; the VM tests use one image with both
MODULE_BUILD_PACKAGES = ("linux-headers-amd64", "gcc", "make", "libc6-dev", "python3-pyroute2")
LAB_PACKAGES = BASE_PACKAGES + MODULE_BUILD_PACKAGES
"""The one image the VM tests, the benches and ``reservoir lab vm`` boot (cached once)."""
IMAGE_BYTES = 3 << 30  # sparse; the root holds about 1 GiB
BUILD_TIMEOUT = 1800.0
GUEST_FILES = {  # file in guest_files/ -> where it goes in the guest, and its mode
    "init.sh": ("usr/local/sbin/reservoir-guest-init", 0o755),
    "guest_agent.py": ("usr/local/lib/reservoir/guest_agent.py", 0o644),
}


class VmUnavailable(LabError):  # noqa: N818 - reads as a condition, like LoopUnavailable
    """Guests cannot be built or booted here (a tool or the image is missing); the
    message says what to install, so a test can skip with it."""


@dataclass(frozen=True, slots=True)
class GuestImage:
    folder: Path
    root: Path  # the ext4 image of the root file system (read-only base)
    kernel: Path
    initrd: Path
    packages: tuple[str, ...]


def _guest_file(name: str) -> bytes:
    return (resources.files("reservoir.lab.vm") / "guest_files" / name).read_bytes()


def image_key(packages: Sequence[str]) -> str:
    """The digest naming an image: suite, mirror, packages, the guest files."""
    h = hashlib.sha256(json.dumps([SUITE, MIRROR, sorted(set(packages))]).encode())
    for name in sorted(GUEST_FILES):
        h.update(_guest_file(name))
    return h.hexdigest()[:16]


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise VmUnavailable(
            f"{', '.join(missing)} not installed (apt install mmdebstrap qemu-system-x86 "
            "qemu-utils e2fsprogs; make install does)"
        )


def _run(argv: Sequence[str], what: str, timeout: float = BUILD_TIMEOUT) -> None:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise LabError(f"{what} failed: no end after {timeout:.0f} s") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise LabError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _load(folder: Path) -> GuestImage | None:
    meta = folder / "image.json"
    if not meta.exists():
        return None
    data = json.loads(meta.read_text())
    image = GuestImage(
        folder,
        folder / "root.ext4",
        folder / "vmlinuz",
        folder / "initrd.img",
        tuple(data["packages"]),
    )
    if not all(p.exists() for p in (image.root, image.kernel, image.initrd)):
        return None
    return image


def ensure_image(
    packages: Sequence[str] = LAB_PACKAGES,
    *,
    cache: Path | None = None,
    say: Callable[[str], None] = print,
) -> GuestImage:
    """The cached image holding ``packages`` (and :data:`BASE_PACKAGES`), built if
    missing; its build time is said through ``say``."""
    wanted = tuple(sorted(set(BASE_PACKAGES) | set(packages)))
    folder = (cache or cache_dir() / "vm") / f"{SUITE}-{image_key(wanted)}"
    found = _load(folder)
    if found is not None:
        return found
    _need("mmdebstrap", "mkfs.ext4")
    folder.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say(f"vm: building a {SUITE} guest image with {len(wanted)} packages into {folder}")
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as tmp:
        work = Path(tmp)
        root = work / "root"
        _bootstrap(root, wanted)
        _install_guest_files(root)
        out = work / "image"
        out.mkdir()
        _take_boot_files(root, out)
        _run(
            ["mkfs.ext4", "-q", "-L", "reservoir", "-d", str(root), str(out / "root.ext4"),
             f"{IMAGE_BYTES // (1 << 20)}M"],
            "mkfs.ext4 -d",
        )  # fmt: skip
        (out / "image.json").write_text(json.dumps({"suite": SUITE, "packages": wanted}))
        shutil.rmtree(folder, ignore_errors=True)
        out.rename(folder)
    say(f"vm: image built in {time.monotonic() - started:.0f} s")
    image = _load(folder)
    assert image is not None
    _prune_older(image)
    return image


def _prune_older(image: GuestImage) -> None:
    """Removes the images with the same packages built from older guest files."""
    for other in image.folder.parent.glob(f"{SUITE}-*"):
        found = _load(other) if other != image.folder else None
        if found is not None and found.packages == image.packages:
            shutil.rmtree(other, ignore_errors=True)


def _bootstrap(root: Path, packages: Sequence[str]) -> None:
    _run(
        [
            "mmdebstrap",
            "--quiet",
            "--variant=minbase",
            "--mode=root",
            f"--include={','.join(packages)}",
            "--customize-hook=echo reservoir-guest > $1/etc/hostname",
            "--customize-hook=rm -f $1/var/cache/apt/archives/*.deb",
            SUITE,
            str(root),
            MIRROR,
        ],
        "mmdebstrap",
    )


def _install_guest_files(root: Path) -> None:
    for name, (target, mode) in GUEST_FILES.items():
        path = root / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_guest_file(name))
        path.chmod(mode)
    (root / "etc/fstab").write_text("LABEL=reservoir / ext4 rw 0 1\n")


def _take_boot_files(root: Path, out: Path) -> None:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    initrds = sorted((root / "boot").glob("initrd.img-*"))
    if not kernels or not initrds:
        raise LabError(f"the guest root has no kernel or initrd in {root / 'boot'}")
    shutil.copyfile(kernels[-1], out / "vmlinuz")
    shutil.copyfile(initrds[-1], out / "initrd.img")
