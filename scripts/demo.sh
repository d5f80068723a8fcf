#!/usr/bin/env bash
# The demo: serve a target from a file LUN, and show it with libiscsi's tools.
# (The transfer demo between two agents arrives with the transfer engine.)
# Interactive: keeps serving until Ctrl-C. Not on a terminal: stops after the tour.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d /tmp/reservoir-demo.XXXXXX)
port=${DEMO_PORT:-3260}
iqn=iqn.2026-11.org.reservoir:demo
lun=$work/demo.img
truncate -s 1G "$lun"

.venv/bin/reservoir target serve --portal "127.0.0.1:$port" --iqn "$iqn" --lun "$lun" \
    >"$work/target.log" 2>&1 &
pid=$!
cleanup() {
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

for _ in $(seq 100); do
    grep -q '^ready' "$work/target.log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/target.log"; exit 1; }
    sleep 0.1
done
url="iscsi://127.0.0.1:$port/$iqn/0"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
step iscsi-ls -s "iscsi://127.0.0.1:$port"
step iscsi-inq "$url"
step iscsi-inq -e 1 -c 131 "$url"
step iscsi-readcapacity16 "$url"
printf '\n\033[1m$ iscsi-perf -b 256 -m 32 %s   (5 s)\033[0m\n' "$url"
timeout -s INT 5 iscsi-perf -b 256 -m 32 "$url" | tail -n 3 || true
printf '\n\033[1mtarget log:\033[0m\n'
cat "$work/target.log"
if [[ -t 0 ]]; then
    printf '\nServing %s on 127.0.0.1:%s; Ctrl-C to stop.\n' "$iqn" "$port"
    wait "$pid"
fi
