"""Loader of the cwnd-clamp sock_ops program, and its map, through bpftool and bpf(2).

Setup (:meth:`ClampProgram.open`), each step undone by :meth:`ClampProgram.close` in
reverse order, and also when a later step fails:

1. bpffs: a private folder in a mounted bpffs, or, when none is mounted, a bpffs mounted
   at ``/run/reservoir/bpffs-<pid>-<token>`` (unmounted on close; only if mounted here).
2. cgroup v2: the mounted hierarchy, or one mounted privately (``ip netns exec`` hides
   ``/sys/fs/cgroup`` in its own mount namespace).
3. The cgroup: by default a dedicated child ``reservoir-cwnd-<pid>-<token>`` of the
   process's current cgroup v2 directory, into which the process is moved (moved back and
   the directory removed on close). A sock_ops program sees the sockets *created* in its
   cgroup (or below) and established after the attach; so the program runs for this
   process's connections only, not for every connection of the parent cgroup (which is
   the root cgroup, i.e. the whole machine, on the CI machine). Sockets created before
   :meth:`open` stay in the old cgroup and are not covered (:meth:`covers` tells).
   Passing ``cgroup=`` attaches to that existing directory instead, without moving.
4. ``bpftool prog load OBJ DIR/prog type sockops pinmaps DIR/maps``, then
   ``bpftool cgroup attach CGROUP sock_ops pinned DIR/prog multi`` (BPF_F_ALLOW_MULTI, so
   other programs on that cgroup keep working).
5. The pinned maps are opened with BPF_OBJ_GET; caps are written with
   BPF_MAP_UPDATE_ELEM / BPF_MAP_DELETE_ELEM (bpf(2) through ctypes).

Errors of the setup are :class:`BpfUnavailable` (the reason is the message); errors of
the bpf(2) calls are :class:`OSError` with the errno and the command.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from reservoir.pacing.errors import PacingError

__all__ = [
    "KEY_SIZE",
    "BpfUnavailable",
    "ClampProgram",
    "key_of",
    "map_delete",
    "map_lookup",
    "map_update",
    "obj_get",
    "pack_key",
]

NR_BPF = 321  # x86_64
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_OBJ_GET = 7
_CMD_NAMES = {1: "BPF_MAP_LOOKUP_ELEM", 2: "BPF_MAP_UPDATE_ELEM", 3: "BPF_MAP_DELETE_ELEM"}
_CMD_NAMES[BPF_OBJ_GET] = "BPF_OBJ_GET"
BPF_ANY = 0

RUN_ROOT = Path("/run/reservoir")
CGROUP_PREFIX = "reservoir-cwnd-"

# struct cap_key of cwnd_clamp.bpf.c: u32 family, local_port, remote_port (host order),
# then local and remote address, 16 bytes each (network order, IPv4 in the first 4).
_KEY = struct.Struct("=III16s16s")
KEY_SIZE = _KEY.size  # 44
# struct applied_cap: the cap last applied, the initial window of a jump start.
_STATE = struct.Struct("=II")


# ------------------------------------------------------------ bpf(2)


class _ObjAttr(ctypes.Structure):
    _fields_ = (
        ("pathname", ctypes.c_uint64),
        ("bpf_fd", ctypes.c_uint32),
        ("file_flags", ctypes.c_uint32),
        ("path_fd", ctypes.c_int32),
    )


class _ElemAttr(ctypes.Structure):
    _fields_ = (
        ("map_fd", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    )


class _BpfAttr(ctypes.Union):
    """The members of ``union bpf_attr`` used here; the rest stays zero, as the kernel wants."""

    _fields_ = (("obj", _ObjAttr), ("elem", _ElemAttr), ("_size", ctypes.c_uint8 * 128))


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr: _BpfAttr) -> int:
    ret = int(_libc.syscall(NR_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{os.strerror(err)} (originated from bpf({_CMD_NAMES[cmd]}))")
    return ret


def obj_get(path: Path) -> int:
    """A file descriptor of the object pinned at ``path`` (BPF_OBJ_GET)."""
    name = ctypes.create_string_buffer(os.fsencode(path))
    attr = _BpfAttr()
    attr.obj.pathname = ctypes.addressof(name)
    return _bpf(BPF_OBJ_GET, attr)


def _elem(
    map_fd: int, key: ctypes.Array[ctypes.c_char], value: ctypes.Array[ctypes.c_char] | None
) -> _BpfAttr:
    attr = _BpfAttr()
    attr.elem.map_fd = map_fd
    attr.elem.key = ctypes.addressof(key)
    if value is not None:
        attr.elem.value = ctypes.addressof(value)
    return attr


def map_update(map_fd: int, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    """Set ``key`` to ``value`` (BPF_MAP_UPDATE_ELEM)."""
    kbuf, vbuf = (
        ctypes.create_string_buffer(key, len(key)),
        ctypes.create_string_buffer(value, len(value)),
    )
    attr = _elem(map_fd, kbuf, vbuf)
    attr.elem.flags = flags
    _bpf(BPF_MAP_UPDATE_ELEM, attr)


def map_delete(map_fd: int, key: bytes) -> bool:
    """Delete ``key`` (BPF_MAP_DELETE_ELEM); False if it was not there."""
    kbuf = ctypes.create_string_buffer(key, len(key))
    try:
        _bpf(BPF_MAP_DELETE_ELEM, _elem(map_fd, kbuf, None))
    except OSError as e:
        if e.errno == errno.ENOENT:
            return False
        raise
    return True


def map_lookup(map_fd: int, key: bytes, value_size: int) -> bytes | None:
    """The value of ``key`` (BPF_MAP_LOOKUP_ELEM), or None if it is not there."""
    kbuf, vbuf = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(value_size)
    try:
        _bpf(BPF_MAP_LOOKUP_ELEM, _elem(map_fd, kbuf, vbuf))
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise
    return vbuf.raw


# ------------------------------------------------------------ keys


def pack_key(
    family: int, local_addr: str, local_port: int, remote_addr: str, remote_port: int
) -> bytes:
    """The ``struct cap_key`` bytes of a connection (addresses as text, ports as ints)."""
    if family not in (socket.AF_INET, socket.AF_INET6):
        raise ValueError(f"not an IP address family: {family}")
    local = socket.inet_pton(family, local_addr.split("%", 1)[0])
    remote = socket.inet_pton(family, remote_addr.split("%", 1)[0])
    return _KEY.pack(family, local_port, remote_port, local, remote)


def key_of(sock: socket.socket) -> bytes:
    """The key of a connected TCP socket (OSError if it is not connected)."""
    local, remote = sock.getsockname(), sock.getpeername()
    return pack_key(sock.family, local[0], local[1], remote[0], remote[1])


# ------------------------------------------------------------ setup


class BpfUnavailable(PacingError):  # noqa: N818 (names a state, not a failure)
    """The program cannot be loaded or attached here; the message says why."""


def _mounts() -> list[tuple[str, Path, str]]:
    """(root inside the filesystem, mount point, fs type) of every mount, from mountinfo."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        mnt_root, mnt_point = fields[3], fields[4].replace("\\040", " ")
        found.append((mnt_root, Path(mnt_point), right.split()[0]))
    return found


def _current_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise BpfUnavailable("the process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)")


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError as e:
        raise BpfUnavailable(f"{what} failed: {argv[0]} is not installed") from e
    if proc.returncode != 0:
        detail = proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}"
        raise BpfUnavailable(f"{what} failed: {detail}")


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _rmdir_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):  # not empty: another instance uses it
        path.rmdir()


def _rmdir_retry(path: Path) -> None:
    # A cgroup just emptied can be busy for a moment while its tasks finish moving.
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            time.sleep(0.02)
    path.rmdir()


class ClampProgram:
    """The attached program and its pinned maps; :meth:`close` undoes everything."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self.token = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.pin_dir = Path()
        self.cgroup = Path()
        self.caps_fd = -1
        self.applied_fd = -1
        self.starts_fd = -1
        self.windows_fd = -1

    @classmethod
    def open(cls, obj: Path, cgroup: Path | None = None) -> ClampProgram:
        """Load ``obj``, attach it to ``cgroup`` (default: a dedicated child, see module doc)."""
        prog = cls()
        try:
            prog._setup(obj, cgroup)
        except BaseException:
            prog.close()
            raise
        return prog

    def _setup(self, obj: Path, cgroup: Path | None) -> None:
        self.pin_dir = self._pin_dir()
        self.cgroup = cgroup if cgroup is not None else self._own_cgroup()
        pinned = self.pin_dir / "prog"
        maps = self.pin_dir / "maps"
        load = ["bpftool", "prog", "load", str(obj), str(pinned), "type", "sockops"]
        self._undo.append(lambda: self._unpin(pinned, maps))
        _run([*load, "pinmaps", str(maps)], "bpftool prog load")
        attach = ["bpftool", "cgroup", "attach", str(self.cgroup), "sock_ops", "pinned"]
        _run([*attach, str(pinned), "multi"], "bpftool cgroup attach")
        detach = ["bpftool", "cgroup", "detach", str(self.cgroup), "sock_ops", "pinned"]
        self._undo.append(lambda: _run([*detach, str(pinned)], "bpftool cgroup detach"))
        self.caps_fd = obj_get(maps / "caps")
        self._undo.append(lambda: os.close(self.caps_fd))
        self.applied_fd = obj_get(maps / "applied")
        self._undo.append(lambda: os.close(self.applied_fd))
        self.starts_fd = obj_get(maps / "starts")
        self._undo.append(lambda: os.close(self.starts_fd))
        self.windows_fd = obj_get(maps / "windows")
        self._undo.append(lambda: os.close(self.windows_fd))

    def _pin_dir(self) -> Path:
        bpffs = [point for _, point, fstype in _mounts() if fstype == "bpf"]
        if bpffs:
            base = bpffs[0] / f"reservoir-{self.token}"
            base.mkdir()
            self._undo.append(base.rmdir)
            return base
        base = self._private_dir(f"bpffs-{self.token}")
        _run(["mount", "-t", "bpf", "bpf", str(base)], "mount -t bpf")
        self._undo.append(lambda: _run(["umount", str(base)], "umount bpffs"))
        return base

    def _private_dir(self, name: str) -> Path:
        """A new mount point under RUN_ROOT (RUN_ROOT too is removed if made here)."""
        if not RUN_ROOT.exists():
            RUN_ROOT.mkdir(parents=True, exist_ok=True)
            self._undo.append(lambda: _rmdir_if_empty(RUN_ROOT))
        path = RUN_ROOT / name
        path.mkdir()
        self._undo.append(path.rmdir)
        return path

    def _cgroup_root(self) -> tuple[str, Path]:
        """(root inside the hierarchy, mount point) of a cgroup v2 mount, mounted if none."""
        for mnt_root, point, fstype in _mounts():
            if fstype == "cgroup2":
                return mnt_root, point
        point = self._private_dir(f"cgroup2-{self.token}")
        _run(["mount", "-t", "cgroup2", "none", str(point)], "mount -t cgroup2")
        self._undo.append(lambda: _run(["umount", str(point)], "umount cgroup2"))
        return "/", point

    def _own_cgroup(self) -> Path:
        mnt_root, point = self._cgroup_root()
        current = _current_cgroup()
        rel = os.path.relpath(current, mnt_root)
        if rel.startswith(".."):
            raise BpfUnavailable(f"the process's cgroup {current} is outside the cgroup2 mount")
        home = (point / rel).resolve()
        child = home / f"{CGROUP_PREFIX}{self.token}"
        try:
            child.mkdir()
        except OSError as e:
            raise BpfUnavailable(f"cannot create the cgroup {child}: {e.strerror}") from e
        self._undo.append(lambda: _rmdir_retry(child))
        pid = str(os.getpid())
        try:
            (child / "cgroup.procs").write_text(pid)
        except OSError as e:
            raise BpfUnavailable(f"cannot move the process into {child}: {e.strerror}") from e
        self._undo.append(lambda: _write(home / "cgroup.procs", pid))
        return child

    @staticmethod
    def _unpin(pinned: Path, maps: Path) -> None:
        for path in (*sorted(maps.glob("*")), maps, pinned):
            with contextlib.suppress(FileNotFoundError):
                path.rmdir() if path.is_dir() else path.unlink()

    def covers(self, sock: socket.socket) -> bool:
        """Whether the program saw ``sock`` established (it then applies caps to it)."""
        return self._state(sock) is not None

    def applied(self, sock: socket.socket) -> int | None:
        """The cap (segments, 0 = none) last applied to ``sock``; None if not covered."""
        state = self._state(sock)
        return None if state is None else state[0]

    def jumped(self, sock: socket.socket) -> int | None:
        """The initial window (segments) a jump start gave ``sock``: 0 for none; None if
        the program did not see it established."""
        state = self._state(sock)
        return None if state is None else state[1]

    def _state(self, sock: socket.socket) -> tuple[int, int] | None:
        raw = map_lookup(self.applied_fd, struct.pack("=i", sock.fileno()), _STATE.size)
        return None if raw is None else _STATE.unpack(raw)

    def start(self, sock: socket.socket, remote: tuple[str, int], rate: int) -> bytes:
        """Announce that ``sock`` (bound to its local port, not yet connected) connects
        to ``remote`` paced at ``rate`` bytes per second: it starts with the window that
        carries that rate for a round trip. The key, for :meth:`unstart`."""
        any_address = "::" if sock.family == socket.AF_INET6 else "0.0.0.0"
        port = sock.getsockname()[1]
        key = pack_key(sock.family, any_address, port, remote[0], remote[1])
        map_update(self.starts_fd, key, struct.pack("=Q", rate))
        return key

    def unstart(self, key: bytes) -> None:
        """Withdraw an announcement (nothing if the connection already consumed it)."""
        map_delete(self.starts_fd, key)

    def open_window(self, port: int, segments: int) -> None:
        """Connections accepted on the listening ``port`` from now on are offered a
        receive window of ``segments`` from the start (0: the kernel's)."""
        key = struct.pack("=I", port)
        if segments:
            map_update(self.windows_fd, key, struct.pack("=I", segments))
        else:
            map_delete(self.windows_fd, key)

    def set(self, sock: socket.socket, segments: int) -> None:
        map_update(self.caps_fd, key_of(sock), struct.pack("=I", segments))

    def clear(self, sock: socket.socket) -> None:
        """Drop the cap; the program restores the clamp (and an infinite ssthresh, i.e.
        slow start) on the next ACK. Nothing for a closed socket: the program already
        dropped its entry when the connection closed."""
        try:
            key = key_of(sock)
        except OSError:
            return
        map_delete(self.caps_fd, key)

    def close(self) -> None:
        """Undo every step of the setup, last first; raise the first error at the end."""
        first: BaseException | None = None
        while self._undo:
            step = self._undo.pop()
            try:
                step()
            except (OSError, BpfUnavailable) as e:
                first = first or e
        self.caps_fd = self.applied_fd = self.starts_fd = self.windows_fd = -1
        if first is not None:
            raise first
