"""A guest booted under qemu, and the commands run in it.

::

    image = ensure_image()
    with Guest(image, "g1", netns="rsv-vm", taps=["rsvtap0"]) as g:   # boots; stops on exit
        g.check("ip addr add 10.99.0.2/24 dev eth0 && ip link set eth0 up")
        print(g.check(["iscsiadm", "-m", "discovery", "-t", "st", "-p", "10.99.0.1"]))

qemu boots the image's kernel and initrd directly, on a copy-on-write overlay of the
image (deleted with the guest), with KVM where the host's CPU offers virtualisation
to it and TCG otherwise (``$RESERVOIR_VM_ACCEL`` overrides). The guest's NICs are
virtio-net on taps the lab made in a network namespace (qemu runs inside it), named
``eth0``, ``eth1``... in the guest in that order. Commands travel over a
virtio-serial port to the guest's agent (``guest_files/guest_agent.py``), each with its
own timeout; the console goes to ``console.log`` in the guest's folder, whose last
lines every error quotes. The project can be shared read-only over 9p
(``project=``, mounted at ``/mnt/project``), and any folders of the host at their
own paths (``shares=``: :mod:`.host_python` names those that run this Python).
:meth:`Guest.stop` powers the guest off, kills qemu by its PID if it does not end,
and removes the folder: also when a test fails, as the context manager calls it.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from reservoir.lab.errors import LabError
from reservoir.lab.netns import exec_argv
from reservoir.lab.netns import run as run_here
from reservoir.lab.vm.image import GuestImage, VmUnavailable

__all__ = ["Guest", "GuestCommandError", "Result", "accelerator"]

BOOT_TIMEOUT = 300.0  # seconds from qemu's start to the agent's hello, under TCG
STOP_TIMEOUT = 30.0
CONSOLE_TAIL = 25


class GuestCommandError(LabError):
    """A command in a guest ended with a non-zero status, or timed out."""


@dataclass(frozen=True, slots=True)
class Result:
    rc: int
    out: str
    err: str
    seconds: float


def accelerator() -> str:
    """``kvm`` where /dev/kvm opens and the CPU shows vmx or svm, else ``tcg``."""
    chosen = os.environ.get("RESERVOIR_VM_ACCEL")
    if chosen:
        return chosen
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "tcg"
    usable = os.access("/dev/kvm", os.R_OK | os.W_OK)
    return "kvm" if usable and (" vmx" in flags or " svm" in flags) else "tcg"


class _Channel:
    """The host end of the agent's port: requests out, answers matched by id."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.answers: dict[int, dict[str, Any]] = {}
        self.arrived = threading.Condition()
        self.hello: dict[str, Any] | None = None
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffered = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:  # a garbled line: its caller times out, others go on
                    continue
                self._deliver(message)
        with self.arrived:
            self.closed = True
            self.arrived.notify_all()

    def _deliver(self, message: dict[str, Any]) -> None:
        with self.arrived:
            if message.get("ready"):
                self.hello = message
            elif isinstance(message.get("id"), int):
                self.answers[message["id"]] = message
            self.arrived.notify_all()

    def wait_hello(self, timeout: float) -> dict[str, Any] | None:
        with self.arrived:
            self.arrived.wait_for(lambda: self.hello is not None or self.closed, timeout)
            return self.hello

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        ident = next(self.ids)
        data = (json.dumps({**request, "id": ident}) + "\n").encode()
        with self.lock:
            self.sock.sendall(data)
        with self.arrived:
            self.arrived.wait_for(lambda: ident in self.answers or self.closed, timeout)
            return self.answers.pop(ident, None)


class Guest:
    def __init__(
        self,
        image: GuestImage,
        name: str,
        *,
        netns: str | None = None,
        taps: Sequence[str] = (),
        memory_mib: int = 1024,
        cpus: int = 1,
        project: Path | None = None,
        shares: Sequence[Path] = (),
        disks: Sequence[Path] = (),
    ) -> None:
        self.image = image
        self.name = name
        self.netns = netns
        self.taps = list(taps)
        self.memory_mib = memory_mib
        self.cpus = cpus
        self.project = project
        self.shares = [Path(p).resolve() for p in shares]  # read-only, at the same path
        self.disks = list(disks)
        self.folder = Path(tempfile.mkdtemp(prefix=f"reservoir-vm-{name}-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: _Channel | None = None
        self.boot_seconds = 0.0
        self.kernel = ""

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Guest:
        try:
            self.boot()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def qemu_argv(self) -> list[str]:
        accel = accelerator()
        argv = [
            "qemu-system-x86_64",
            "-name", self.name,
            "-accel", "kvm" if accel == "kvm" else "tcg,thread=multi",
            "-cpu", "host" if accel == "kvm" else "max",
            "-m", str(self.memory_mib),
            "-smp", str(self.cpus),
            "-nodefaults", "-no-reboot", "-display", "none",
            "-kernel", str(self.image.kernel),
            "-initrd", str(self.image.initrd),
            "-append", "root=/dev/vda rw console=ttyS0 panic=-1 quiet net.ifnames=0 "
            "init=/usr/local/sbin/reservoir-guest-init",
            "-drive", f"file={self.folder / 'root.qcow2'},if=virtio,format=qcow2,index=0",
            "-serial", f"file:{self.folder / 'console.log'}",
            "-device", "virtio-serial-pci",
            "-chardev", f"socket,id=agent,path={self.folder / 'agent.sock'},server=on,wait=off",
            "-device", "virtserialport,chardev=agent,name=reservoir",
            "-device", "virtio-rng-pci",
        ]  # fmt: skip
        for i, disk in enumerate(self.disks):
            argv += [
                "-drive",
                f"file={disk},if=virtio,format=raw,cache=none,aio=threads,index={i + 1}",
            ]
        tag = zlib.crc32(self.name.encode()) & 0xFF
        for i, tap in enumerate(self.taps):
            mac = f"52:54:00:{tag:02x}:{i // 256:02x}:{i % 256 + 1:02x}"
            argv += [
                "-netdev", f"tap,id=n{i},ifname={tap},script=no,downscript=no",
                "-device", f"virtio-net-pci,netdev=n{i},mac={mac}",
            ]  # fmt: skip
        if self.project is not None:
            argv += [
                "-virtfs",
                f"local,path={self.project},mount_tag=project,security_model=none,readonly=on",
            ]
        for i, path in enumerate(self.shares):
            argv += [
                "-virtfs",
                f"local,path={path},mount_tag=share{i},security_model=none,readonly=on",
            ]
        return exec_argv(self.netns, argv) if self.netns else argv

    def boot(self, timeout: float = BOOT_TIMEOUT) -> float:
        """Starts qemu and waits for the agent's hello; the seconds it took."""
        for tool in ("qemu-system-x86_64", "qemu-img"):
            if shutil.which(tool) is None:
                raise VmUnavailable(
                    f"{tool} not installed (apt install qemu-system-x86 qemu-utils)"
                )
        overlay = self.folder / "root.qcow2"
        run_here(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(self.image.root),
             str(overlay)],
            "qemu-img create",
        )  # fmt: skip
        started = time.monotonic()
        with open(self.folder / "qemu.log", "wb") as log:
            self.proc = subprocess.Popen(
                self.qemu_argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.channel = _Channel(self._connect(started + timeout))
        hello = self.channel.wait_hello(max(0.0, started + timeout - time.monotonic()))
        if hello is None:
            raise LabError(f"guest {self.name} did not come up in {timeout:.0f} s{self._tail()}")
        self.boot_seconds = time.monotonic() - started
        self.kernel = str(hello.get("kernel", ""))
        if self.project is not None:
            self.check("mkdir -p /mnt/project && mount -t 9p -o "
                       "trans=virtio,version=9p2000.L,ro project /mnt/project")  # fmt: skip
        for i, path in enumerate(self.shares):
            options = "trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose"
            self.check(f"mkdir -p {path} && mount -t 9p -o {options} share{i} {path}")
        return self.boot_seconds

    def _connect(self, deadline: float) -> socket.socket:
        path = self.folder / "agent.sock"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise LabError(
                    f"qemu for {self.name} exited ({self.proc.returncode}){self._tail()}"
                )
            if path.exists():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(str(path))
                    return sock
                except OSError:
                    sock.close()
            time.sleep(0.1)
        raise LabError(f"qemu for {self.name} never opened its agent socket{self._tail()}")

    def stop(self) -> None:
        """Powers off (qemu killed by PID if it does not end); removes the folder."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if self.channel is not None and not self.channel.closed:
                with contextlib.suppress(OSError):
                    self.channel.call({"op": "poweroff"}, timeout=10.0)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.channel is not None:
            self.channel.sock.close()
            self.channel = None
        shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------ commands

    def run(
        self, command: str | Sequence[str], *, timeout: float = 120.0, input: bytes | None = None
    ) -> Result:
        """Runs ``command`` (a shell line, or an argv) in the guest."""
        if self.channel is None:
            raise LabError(f"guest {self.name} is not running")
        request: dict[str, Any] = {"timeout": timeout}
        if isinstance(command, str):
            request["sh"] = command
        else:
            request["argv"] = list(command)
        if input is not None:
            request["input"] = base64.b64encode(input).decode()
        answer = self.channel.call(request, timeout + 30.0)
        if answer is None:
            raise LabError(f"guest {self.name}: no answer to {command!r}{self._tail()}")
        return Result(
            int(answer["rc"]),
            base64.b64decode(answer["out"]).decode(errors="replace"),
            base64.b64decode(answer["err"]).decode(errors="replace"),
            float(answer["seconds"]),
        )

    def check(
        self, command: str | Sequence[str], *, timeout: float = 120.0, input: bytes | None = None
    ) -> str:
        """Runs ``command``; its stdout, or :class:`GuestCommandError` with its stderr."""
        r = self.run(command, timeout=timeout, input=input)
        if r.rc != 0:
            what = command if isinstance(command, str) else " ".join(command)
            why = "timed out" if r.rc == -9 else f"exit {r.rc}"
            detail = (r.err.strip() or r.out.strip())[-2000:]
            raise GuestCommandError(f"{self.name}: {what}: {why}: {detail}")
        return r.out

    def console(self) -> str:
        try:
            return (self.folder / "console.log").read_text(errors="replace")
        except OSError:
            return ""

    def _tail(self) -> str:
        lines = self.console().splitlines()[-CONSOLE_TAIL:]
        return ("\n--- console:\n" + "\n".join(lines)) if lines else ""
