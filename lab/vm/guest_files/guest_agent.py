"""The command agent of a Reservoir lab guest (runs as PID 1, stdlib only).

It answers the host on the virtio-serial port named ``reservoir``, one JSON object a
line each way. It says ``{"ready": true, ...}`` once the port is open; then each
request ``{"id": N, "argv": [...]}`` (or ``"sh": "..."``), with ``timeout`` seconds
and optional base64 ``input``, runs in a thread of its own and is answered by
``{"id": N, "rc": RC, "out": B64, "err": B64, "seconds": S}`` (rc -9 on a timeout:
the command's whole process group is killed). ``{"id": N, "op": "poweroff"}``
syncs and powers the guest off.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from typing import Any

PORT_NAME = "reservoir"
POWER_OFF = 0x4321FEDC  # LINUX_REBOOT_CMD_POWER_OFF
write_lock = threading.Lock()


def find_port() -> str:
    base = "/sys/class/virtio-ports"
    for _ in range(300):
        for entry in os.listdir(base) if os.path.isdir(base) else []:
            try:
                with open(f"{base}/{entry}/name") as f:
                    if f.read().strip() == PORT_NAME:
                        return f"/dev/{entry}"
            except OSError:
                pass
        time.sleep(0.1)
    raise SystemExit(f"no virtio-serial port named {PORT_NAME}")


def send(port: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    with write_lock:
        view = memoryview(data)
        while view:  # the port takes a large answer in parts
            view = view[os.write(port, view) :]


def b64(data: bytes | None) -> str:
    return base64.b64encode(data or b"").decode()


def run(port: int, req: dict[str, Any]) -> None:
    started = time.monotonic()
    argv = req.get("argv") or ["/bin/sh", "-c", req.get("sh", "")]
    data = base64.b64decode(req["input"]) if req.get("input") else None
    answer: dict[str, Any] = {"id": req.get("id")}
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        answer.update(rc=127, out="", err=b64(str(exc).encode()), seconds=0.0)
        send(port, answer)
        return
    try:
        out, err = proc.communicate(data, timeout=req.get("timeout") or None)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = -9
    answer.update(rc=rc, out=b64(out), err=b64(err), seconds=time.monotonic() - started)
    send(port, answer)


def power_off() -> None:
    os.sync()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.reboot(POWER_OFF)


def main() -> None:
    port = os.open(find_port(), os.O_RDWR)
    send(port, {"ready": True, "kernel": platform.release(), "python": sys.version.split()[0]})
    buffered = b""
    while True:
        chunk = os.read(port, 65536)
        if not chunk:
            time.sleep(0.05)  # the host is not connected
            continue
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            try:
                req = json.loads(line)
            except ValueError:
                continue
            if req.get("op") == "poweroff":
                send(port, {"id": req.get("id"), "rc": 0, "out": "", "err": "", "seconds": 0.0})
                power_off()
            threading.Thread(target=run, args=(port, req), daemon=True).start()


if __name__ == "__main__":
    main()
