#!/usr/bin/env bash
# The demo: a real transfer between two hosts through an emulated long fat network.
#
# A lab from config/lab/demo-lfn.toml: hosts "src" and "dst" (network namespaces)
# joined by two links of 200 Mbit/s with 25 ms one way each (50 ms RTT), each
# through a delay line. Host dst serves a 256 MiB LUN on both link addresses;
# host src looks at it with libiscsi's tools, then copies 256 MiB of random
# data into it with 8 streams spread over both paths; the LUN file is hashed
# against the source. Everything (target, delay lines, namespaces) is taken
# down on exit. Interactive: keeps serving until Ctrl-C. Otherwise exits after
# the summary.
set -euo pipefail
cd "$(dirname "$0")/.."

spec=config/lab/demo-lfn.toml
# The addresses of config/lab/demo-lfn.toml: link l1, link l2.
src_l1=10.203.1.1 dst_l1=10.203.1.2
src_l2=10.203.2.1 dst_l2=10.203.2.2
iqn=iqn.2026-11.org.reservoir:demo
size=256M
reservoir=.venv/bin/reservoir

work=$(mktemp -d /tmp/reservoir-demo.XXXXXX)
lun=$work/lun.img
source_file=$work/source.img
pid=""
lab_up=""

cleanup() {
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [[ -n $lab_up ]]; then
        "$reservoir" lab down "$spec" || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }
handshake='
import socket, sys, time
times = []
for _ in range(3):
    start = time.monotonic()
    socket.create_connection((sys.argv[1], 3260), timeout=5).close()
    times.append((time.monotonic() - start) * 1e3)
print(f"{sys.argv[1]}:3260  " + ", ".join(f"{t:.1f}" for t in times) + " ms (the first with ARP)")'
on_src() { bold "src\$ $*"; ip netns exec "$ns_src" "$@"; }

# A lab left behind by an interrupted earlier demo (recorded in its state file) goes first.
"$reservoir" lab down "$spec" >/dev/null 2>&1 || true

bold "\$ reservoir lab up $spec"
lab_up=yes
up=$("$reservoir" lab up "$spec")
echo "$up"
prefix=$(sed -n 's/^lab \([^ ]*\) up:.*/\1/p' <<<"$up")
ns_src=$prefix-src
ns_dst=$prefix-dst

truncate -s "$size" "$lun"
bold "dst\$ reservoir target serve --portal $dst_l1:3260 --portal $dst_l2:3260 --iqn $iqn --lun $lun"
ip netns exec "$ns_dst" "$reservoir" target serve --portal "$dst_l1:3260" \
    --portal "$dst_l2:3260" --iqn "$iqn" --lun "$lun" >"$work/target.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    grep -q '^ready' "$work/target.log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/target.log"; exit 1; }
    sleep 0.1
done
grep -q '^ready' "$work/target.log" || { cat "$work/target.log"; exit 1; }

url="iscsi://$dst_l1:3260/$iqn/0"
bold "# round trip on each link, from src: a TCP handshake with each portal (no ping here)"
for addr in "$dst_l1" "$dst_l2"; do
    ip netns exec "$ns_src" .venv/bin/python -c "$handshake" "$addr"
done
on_src iscsi-ls -s "iscsi://$dst_l1:3260"
on_src iscsi-inq "$url"

bold "# $size of random data as the source file"
head -c "$size" /dev/urandom >"$source_file"

on_src "$reservoir" copy "$source_file" "$url" --streams 8 \
    --path "$src_l1=$dst_l1:3260" --path "$src_l2=$dst_l2:3260" \
    --checkpoint "$work/checkpoint.json"

bold "# verify: the LUN's backing file in dst against the source in src"
src_hash=$(sha256sum <"$source_file" | cut -d' ' -f1)
lun_hash=$(sha256sum <"$lun" | cut -d' ' -f1)
echo "source  sha256 $src_hash"
echo "LUN     sha256 $lun_hash"
if [[ $src_hash != "$lun_hash" ]]; then
    echo "MISMATCH: the LUN differs from the source"
    exit 1
fi
echo "equal"

bold "target log (logins):"
grep -E '^ready|login:' "$work/target.log"
echo
echo "The dashboard (live per-stream and per-path figures) comes with a later issue."
if [[ -t 0 ]]; then
    printf '\nServing %s in %s on %s:3260 and %s:3260; Ctrl-C to stop.\n' \
        "$iqn" "$ns_dst" "$dst_l1" "$dst_l2"
    wait "$pid"
fi
