#!/usr/bin/env bash
# Installs what Reservoir needs on Debian 12: system packages, a virtual
# environment at .venv with reservoir (and its C extension) installed in it.
# Idempotent: packages already present are not reinstalled.
#
#   scripts/install.sh [--profile agent|coordinator|dev] [--with-bpf] [--list]
#
# agent: what a storage node needs to serve iSCSI and copy; coordinator: the REST API,
# its database drivers and the dashboard; dev (the default, what `make install` runs):
# both, and every peer, tool and test dependency of the test suite and the benches.
# --with-bpf adds the BPF toolchain (clang, llvm, libbpf-dev, bpftool) to the agent,
# for its cwnd clamp; without it the agent applies cwnd caps as SO_MAX_PACING_RATE.
# Python packages are installed at the versions pinned in constraints.txt
# (scripts/constraints.sh writes it). --list prints the profile's Debian packages and
# pip extras, and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages of each profile (tests/unit/test_install_profiles.py checks what
# --list prints for each).
APT_AGENT=(
    build-essential pkg-config python3-dev python3-venv  # the venv, the C extension
    liburing-dev          # io_uring storage engine (C extension)
    iproute2 procps       # links, addresses and processes
    ethtool               # interrupt coalescing of tuning profiles (reservoir agent tune)
    iperf3                # link probes the agent runs for the coordinator
)
APT_BPF=(
    clang llvm libbpf-dev bpftool  # the BPF sock_ops program of the pacing component
)
APT_COORDINATOR=(
    python3-venv          # the venv (the coordinator's packages are all wheels)
    nodejs npm            # the dashboard (web/), built into web/dist
)
APT_DEV=(
    tgt libiscsi-bin      # peers: reference target and libiscsi tools/conformance suite
    globus-gridftp-server-progs globus-gass-copy-progs  # peers: GridFTP server and client
    xrootd-server xrootd-client  # peers: XRootD server and xrootd-client
    chromium              # the dashboard's browser tests (Playwright drives it; no download)
    qemu-system-x86 qemu-utils mmdebstrap e2fsprogs  # the VM lab: guests with Debian's kernel
    postgresql            # the coordinator's tests against a PostgreSQL server of their own
    prometheus            # promtool: the metrics checked by Prometheus' own parser
)
# The extras of pyproject.toml each profile installs (comma-separated).
PIP_EXTRAS_AGENT=""
PIP_EXTRAS_COORDINATOR="coordinator"
PIP_EXTRAS_DEV="coordinator,lio,dev"

usage() {
    echo "usage: scripts/install.sh [--profile agent|coordinator|dev] [--with-bpf] [--list]" >&2
    exit 2
}

profile=dev
with_bpf=0
list=0
while (($#)); do
    case $1 in
        --profile) (($# > 1)) || usage; profile=$2; shift 2 ;;
        --profile=*) profile=${1#--profile=}; shift ;;
        --with-bpf) with_bpf=1; shift ;;
        --list) list=1; shift ;;
        *) usage ;;
    esac
done
case $profile in
    agent)
        apt_packages=("${APT_AGENT[@]}")
        if ((with_bpf)); then apt_packages+=("${APT_BPF[@]}"); fi
        extras=$PIP_EXTRAS_AGENT ;;
    coordinator)
        apt_packages=("${APT_COORDINATOR[@]}")
        extras=$PIP_EXTRAS_COORDINATOR ;;
    dev)
        apt_packages=("${APT_AGENT[@]}" "${APT_BPF[@]}" "${APT_COORDINATOR[@]}" "${APT_DEV[@]}")
        extras=$PIP_EXTRAS_DEV ;;
    *) usage ;;
esac
if ((list)); then
    echo "apt: ${apt_packages[*]}"
    echo "extras: $extras"
    exit 0
fi
echo "install: profile $profile"

# Names of the installed packages and of the ones they provide (a nodejs that
# brings its own npm provides npm): one a line.
installed_names() {
    dpkg-query -W -f='${db:Status-Abbrev}|${Package}|${Provides}\n' 2>/dev/null \
        | awk -F'|' 'substr($1, 2, 1) == "i" {  # the state column: installed
            print $2
            n = split($3, provided, ", ")
            for (i = 1; i <= n; i++) { sub(/ .*/, "", provided[i]); print provided[i] }
        }'
}

install_apt() {
    local have missing=() p
    have=$(installed_names)
    for p in "$@"; do
        grep -qxF -- "$p" <<<"$have" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    echo "install: apt packages: ${missing[*]}"
    if [[ $(id -u) -ne 0 ]]; then
        echo "install: need root to install ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_venv() {
    # A Python >= 3.11 for the venv: $PYTHON, else python3.
    local py=${PYTHON:-python3} target=.
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "install: $py is older than 3.11" >&2
        exit 1
    fi
    if [[ ! -x .venv/bin/python ]]; then
        echo "install: creating .venv with $($py --version)"
        "$py" -m venv .venv
    fi
    if [[ -n $1 ]]; then target=".[$1]"; fi
    .venv/bin/python -m pip install -q --upgrade pip setuptools wheel
    .venv/bin/python -m pip install -q -c constraints.txt -e "$target"
    # Bytecode for the project's own modules (an editable install compiles none): every
    # process start (an agent, a copy) then skips compiling them, 0.15-0.35 s here, and
    # more where PYTHONDONTWRITEBYTECODE keeps Python from caching it by itself.
    .venv/bin/python -m compileall -q agent lab server kmod-pacing campaigns reservoir >/dev/null
}

build_bpf() {
    .venv/bin/python -c 'from reservoir.pacing._build import build; print("install: cwnd clamp BPF program:", build())' \
        || echo "install: warning: the cwnd clamp BPF program was not built; cwnd caps will use SO_MAX_PACING_RATE"
}

# The dashboard (web/): uPlot from the committed package-lock.json, then web/dist, the
# folder the coordinator serves at / (no network needed at run time).
build_dashboard() {
    if ! command -v npm >/dev/null; then
        echo "install: npm is missing after installing nodejs and npm: the dashboard cannot be built" >&2
        exit 1
    fi
    (cd web && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
}

# The ipg qdisc kernel module: built where this kernel's headers are installed and
# modules can be loaded; elsewhere the VM lab builds it in a guest (tests/vm).
build_kernel_module() {
    if [[ -d /lib/modules/$(uname -r)/build ]]; then
        make -s -C kmod-pacing/module KDIR="/lib/modules/$(uname -r)/build" \
            && echo "install: the ipg kernel module: kmod-pacing/module/sch_ipg.ko (load it with insmod)" \
            || echo "install: warning: the ipg kernel module did not build (see the compiler's output)"
    else
        echo "install: the ipg kernel module: not built, no headers for kernel $(uname -r) here" \
             "(/lib/modules/$(uname -r)/build); the VM lab builds it against its guest's kernel"
    fi
}

install_apt "${apt_packages[@]}"
# .venv/.installed marks a complete dev install (the Makefile's targets depend on it).
rm -f .venv/.installed
install_venv "$extras"
case $profile in
    agent)
        .venv/bin/python -c 'import reservoir.agent.storage as s; print("install: storage engine backends:", ", ".join(s.available_backends()))'
        if ((with_bpf)); then
            build_bpf
        else
            echo "install: the cwnd clamp BPF program: not in the agent profile (no clang);" \
                 "cwnd caps will use SO_MAX_PACING_RATE (--with-bpf installs the BPF toolchain)"
        fi ;;
    coordinator)
        build_dashboard ;;
    dev)
        .venv/bin/python -c 'import reservoir.agent.storage as s; print("install: storage engine backends:", ", ".join(s.available_backends()))'
        .venv/bin/python -c 'from reservoir.lab.delayline import build; print("install: delay line:", build())'
        build_bpf
        build_dashboard
        touch .venv/.installed
        build_kernel_module ;;
esac
