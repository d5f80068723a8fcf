// SPDX-License-Identifier: GPL-2.0
/*
 * Per-connection cwnd caps (the Data Reservoir stream equalizer, design 3.2).
 *
 * A sock_ops program attached to a cgroup v2 directory. For every TCP
 * connection established by a socket of that cgroup it turns on the RTT
 * (every ACK that yields an RTT sample) and state-change callbacks. On
 * establishment and on every RTT callback it looks the connection's 4-tuple up
 * in the hash map `caps` (filled from user space) and, when the cap differs
 * from the one last applied to this socket, calls
 * bpf_setsockopt(SOL_TCP, TCP_BPF_SNDCWND_CLAMP). The last applied cap lives in
 * per-socket storage (`applied`), so the clamp (which also resets ssthresh) is
 * set once per change, not on every ACK; the presence of that storage tells
 * user space that the program covers a socket. When the connection closes its
 * `caps` entry is deleted, so a later connection reusing the tuple starts
 * uncapped.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -c
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define SOL_TCP 6
#define AF_INET 2
#define AF_INET6 10
/* Largest clamp bpf_setsockopt accepts (an int > 0): "no cap". */
#define UNCAPPED 0x7fffffff
/* A jump start below the kernel's own initial window is none; above MAX_IW
 * segments (about 95 MB at 1448 bytes) it is held there. */
#define MIN_IW 10
#define MAX_IW 65535

/* The connection, as user space packs it (44 bytes, no padding). */
struct cap_key {
	__u32 family;         /* AF_INET or AF_INET6 (host byte order) */
	__u32 local_port;     /* host byte order */
	__u32 remote_port;    /* host byte order */
	__u32 local_addr[4];  /* network byte order; IPv4 in [0], the rest 0 */
	__u32 remote_addr[4]; /* network byte order; IPv4 in [0], the rest 0 */
};

/* Per-socket state: the cap (segments) last applied, 0 = none. */
struct applied_cap {
	__u32 cap;
	__u32 iw; /* initial window set by a jump start, 0 = none */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct cap_key);
	__type(value, __u32); /* cwnd cap in segments, 0 = none */
} caps SEC(".maps");

/* Connections to jump-start: key with local_addr 0 -> bytes per second. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct cap_key);
	__type(value, __u64);
} starts SEC(".maps");

/* Listening ports (host byte order) -> initial receive window in segments. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} windows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct applied_cap);
} applied SEC(".maps");

static __always_inline void key_of(struct bpf_sock_ops *skops, struct cap_key *key)
{
	key->family = skops->family;
	key->local_port = skops->local_port;
	key->remote_port = bpf_ntohl(skops->remote_port);
	if (skops->family == AF_INET) {
		key->local_addr[0] = skops->local_ip4;
		key->remote_addr[0] = skops->remote_ip4;
		return;
	}
	key->local_addr[0] = skops->local_ip6[0];
	key->local_addr[1] = skops->local_ip6[1];
	key->local_addr[2] = skops->local_ip6[2];
	key->local_addr[3] = skops->local_ip6[3];
	key->remote_addr[0] = skops->remote_ip6[0];
	key->remote_addr[1] = skops->remote_ip6[1];
	key->remote_addr[2] = skops->remote_ip6[2];
	key->remote_addr[3] = skops->remote_ip6[3];
}

/* Apply the connection's cap if it changed since the last time. */
static __always_inline void apply_cap(struct bpf_sock_ops *skops, struct applied_cap *st)
{
	struct cap_key key = {};
	__u32 *value;
	__u32 cap;
	int clamp;

	key_of(skops, &key);
	value = bpf_map_lookup_elem(&caps, &key);
	cap = value ? *value : 0;
	if (cap == st->cap)
		return;
	clamp = cap ? (int)cap : UNCAPPED;
	if (cap > UNCAPPED)
		clamp = UNCAPPED;
	if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &clamp, sizeof(clamp)) == 0)
		st->cap = cap;
}

/* The window that carries the announced rate for one round trip, if announced. */
static __always_inline void jump_start(struct bpf_sock_ops *skops, struct applied_cap *st)
{
	struct cap_key key = {};
	__u64 *rate, srtt_us, iw;
	int value;

	key_of(skops, &key);
	key.local_addr[0] = key.local_addr[1] = key.local_addr[2] = key.local_addr[3] = 0;
	rate = bpf_map_lookup_elem(&starts, &key);
	if (!rate)
		return;
	srtt_us = skops->srtt_us >> 3;
	iw = skops->mss_cache ? *rate * srtt_us / 1000000 / skops->mss_cache : 0;
	bpf_map_delete_elem(&starts, &key);
	if (iw <= MIN_IW)
		return;
	value = iw > MAX_IW ? MAX_IW : (int)iw;
	if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_IW, &value, sizeof(value)) == 0)
		st->iw = value;
}

SEC("sockops")
int cwnd_clamp(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct applied_cap *st;
	struct cap_key key = {};
	__u32 port, *window;

	if (skops->family != AF_INET && skops->family != AF_INET6)
		return 1;
	if (skops->op == BPF_SOCK_OPS_RWND_INIT) {
		/* A SYN to a listening port in `windows` (a request socket: no sk). */
		port = skops->local_port;
		window = bpf_map_lookup_elem(&windows, &port);
		skops->reply = window ? (int)*window : 0;
		return 1;
	}
	if (!sk)
		return 1;
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		/* Mark the socket as covered, ask for RTT and state callbacks. */
		st = bpf_sk_storage_get(&applied, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!st)
			return 1;
		if (skops->op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)
			jump_start(skops, st);
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
						 BPF_SOCK_OPS_RTT_CB_FLAG |
						 BPF_SOCK_OPS_STATE_CB_FLAG);
		apply_cap(skops, st);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		st = bpf_sk_storage_get(&applied, sk, 0, 0);
		if (st)
			apply_cap(skops, st);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		/* args[1] is the new state: forget the tuple once closed. */
		if (skops->args[1] == BPF_TCP_CLOSE) {
			key_of(skops, &key);
			bpf_map_delete_elem(&caps, &key);
		}
		break;
	}
	return 1;
}

char _license[] SEC("license") = "GPL";
