#!/usr/bin/env bash
# The demo: a real transfer between agents through an emulated long fat network,
# with the dashboard up (python -m reservoir.lab.demo; options: --size, --streams,
# --spec, --listen).
#
# A lab from config/lab/lfn-2x500m-100ms.toml: hosts "src" and "dst" (network
# namespaces) joined by two links of 500 Mbit/s with 100 ms RTT, each through a delay
# line. In src: two source agents and the coordinator; in dst: two destination agents,
# each serving a LUN with its builtin iSCSI target. The coordinator's dashboard is
# forwarded to http://127.0.0.1:8470/ on this host (loopback only; over SSH:
# ssh -L 8470:127.0.0.1:8470 HOST); the demo prints the URL and the user token for
# the login form. Then a 2 GiB transfer of the source volume set to the destination
# set, 16 streams, equalizer and verify on, through the coordinator's API: progress
# every second, then seconds, MB/s, share of the 1 Gbit/s bottleneck, verification
# and the LUN hashes against the sources. Interactive: the lab and the dashboard stay
# up until Ctrl-C. Otherwise exits after the summary. Everything (processes,
# delay lines, namespaces) is taken down on exit, on Ctrl-C and on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m reservoir.lab.demo "$@"
