#!/usr/bin/env bash
# Installs what Reservoir needs on Debian 12: system packages, a virtual
# environment at .venv with reservoir (and its C extension) installed in it.
# Idempotent: packages already present are not reinstalled.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
    build-essential pkg-config python3-dev python3-venv
    liburing-dev          # io_uring storage engine (C extension)
    tgt libiscsi-bin      # peers: reference target and libiscsi tools/conformance suite
    iperf3                # memory-to-memory baselines
    globus-gridftp-server-progs globus-gass-copy-progs  # peers: GridFTP server and client
    xrootd-server xrootd-client  # peers: XRootD server and xrdcp
    iproute2 procps       # namespaces, links, process control in tests
    ethtool               # interrupt coalescing of tuning profiles (reservoir agent tune)
    clang llvm libbpf-dev bpftool  # the BPF sock_ops program of the pacing component
    chromium              # the dashboard's browser tests (Playwright drives it; no download)
    qemu-system-x86 qemu-utils mmdebstrap e2fsprogs  # the VM lab: guests with Debian's kernel
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "install: apt packages: ${missing[*]}"
    if [[ $(id -u) -ne 0 ]]; then
        echo "install: need root to install ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# A Python >= 3.11 for the venv: $PYTHON, else python3.
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "install: $PY is older than 3.11" >&2
    exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
    echo "install: creating .venv with $($PY --version)"
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
.venv/bin/python -m pip install -q -e '.[dev,lio]'
# Bytecode for the project's own modules (an editable install compiles none): every
# process start (an agent, a copy) then skips compiling them, 0.15-0.35 s here, and
# more where PYTHONDONTWRITEBYTECODE keeps Python from caching it by itself.
.venv/bin/python -m compileall -q agent lab server kmod-pacing campaigns reservoir >/dev/null
.venv/bin/python -c 'import reservoir.agent.storage as s; print("install: storage engine backends:", ", ".join(s.available_backends()))'
.venv/bin/python -c 'from reservoir.lab.delayline import build; print("install: delay line:", build())'
.venv/bin/python -c 'from reservoir.pacing._build import build; print("install: cwnd clamp BPF program:", build())' \
    || echo "install: warning: the cwnd clamp BPF program was not built; cwnd caps will use SO_MAX_PACING_RATE"
# The dashboard (web/): uPlot from the committed package-lock.json, then web/dist, the
# folder the coordinator serves at / (no network needed at run time).
if command -v npm >/dev/null; then
    (cd web && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
else
    echo "install: warning: npm not found; the dashboard is not built (the coordinator's / answers 503)"
fi
touch .venv/.installed
# The ipg qdisc kernel module: built where this kernel's headers are installed and
# modules can be loaded; elsewhere the VM lab builds it in a guest (tests/vm).
if [[ -d /lib/modules/$(uname -r)/build ]]; then
    make -s -C kmod-pacing/module KDIR="/lib/modules/$(uname -r)/build" \
        && echo "install: the ipg kernel module: kmod-pacing/module/sch_ipg.ko (load it with insmod)" \
        || echo "install: warning: the ipg kernel module did not build (see the compiler's output)"
else
    echo "install: the ipg kernel module: not built, no headers for kernel $(uname -r) here" \
         "(/lib/modules/$(uname -r)/build); the VM lab builds it against its guest's kernel"
fi
