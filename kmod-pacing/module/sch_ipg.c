// SPDX-License-Identifier: GPL-2.0
/*
 * sch_ipg: inter-packet gap pacing, the Data Reservoir "IPG widening" as a qdisc.
 *
 * The paper widened the gap the e1000 left between frames so each NIC sent an even
 * packet train below line rate. This qdisc does the same in software: a packet of
 * L bytes occupies (L + IPG_OVERHEAD) byte times of a line of `line_rate` bytes/s
 * (FCS, preamble/SFD and the standard gap: 24), and the next packet leaves no
 * earlier than the end of that plus `gap` byte times:
 *
 *   next = due + (L + IPG_OVERHEAD + gap) / line_rate
 *
 * where `due` is the time the packet was due (`next` of the packet before), or now
 * when the line was idle for longer than that slot: a timer that fires late does not
 * stretch the train, and an idle line does not save up credit.
 * so back-to-back frames of F bytes (FCS included) leave at
 * line_rate * (F + 20) / (F + 20 + gap) on the wire scale of design.md 3.3.
 * GSO packets are split into MTU-sized segments on enqueue (each is paced). Packets
 * wait in one FIFO of at most `limit` packets; beyond it they are dropped.
 *
 * Options (TCA_OPTIONS, nested): TCA_IPG_LINE_RATE (u64, bytes/s, required),
 * TCA_IPG_GAP (u32, byte times), TCA_IPG_LIMIT (u32, packets). Statistics: the
 * qdisc's packets, bytes, drops and backlog, and (xstats) struct tc_ipg_xstats:
 * packets that waited for their time, GSO packets split, and the packets whose
 * timer came more than a slot late, with the time the train lost to them.
 */

#include <linux/kernel.h>
#include <linux/ktime.h>
#include <linux/math64.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/skbuff.h>
#include <linux/version.h>
#include <net/netlink.h>
#include <net/pkt_sched.h>
#include <net/sch_generic.h>
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
#include <net/gso.h>
#endif

#define IPG_OVERHEAD 24 /* FCS 4 + preamble/SFD 8 + standard gap 12, byte times */
#define IPG_DEFAULT_LIMIT 1000

enum {
	TCA_IPG_UNSPEC,
	TCA_IPG_LINE_RATE, /* u64: bytes/s of the line the gap is counted on */
	TCA_IPG_GAP, /* u32: byte times added after each frame */
	TCA_IPG_LIMIT, /* u32: packets queued at most */
	TCA_IPG_PAD,
	__TCA_IPG_MAX,
};

#define TCA_IPG_MAX (__TCA_IPG_MAX - 1)

struct tc_ipg_xstats {
	__u64 delayed; /* packets that waited for their departure time */
	__u64 segmented; /* GSO packets split into segments */
	__u64 late; /* packets that waited, then left more than a slot after their time */
	__u64 late_ns; /* the time the train lost to them (it restarts from now) */
};

struct ipg_sched_data {
	u64 line_rate;
	u32 gap;
	u32 limit;
	u64 next_ns; /* the earliest departure of the next packet (CLOCK_MONOTONIC) */
	u64 delayed;
	u64 segmented;
	u64 late;
	u64 late_ns;
	bool waiting; /* the head packet waits for its time (the watchdog is set) */
	struct qdisc_watchdog watchdog;
};

static const struct nla_policy ipg_policy[TCA_IPG_MAX + 1] = {
	[TCA_IPG_LINE_RATE] = { .type = NLA_U64 },
	[TCA_IPG_GAP] = { .type = NLA_U32 },
	[TCA_IPG_LIMIT] = { .type = NLA_U32 },
};

static u64 ipg_slot_ns(const struct ipg_sched_data *q, unsigned int len)
{
	u64 byte_times = (u64)len + IPG_OVERHEAD + q->gap;

	return div64_u64(byte_times * NSEC_PER_SEC, q->line_rate);
}

static int ipg_enqueue_one(struct sk_buff *skb, struct Qdisc *sch,
			   struct sk_buff **to_free)
{
	struct ipg_sched_data *q = qdisc_priv(sch);

	if (unlikely(sch->q.qlen >= q->limit))
		return qdisc_drop(skb, sch, to_free);
	if (sch->q.qlen || ktime_get_ns() < q->next_ns)
		q->delayed++;
	return qdisc_enqueue_tail(skb, sch);
}

/* As sch_tbf does: a GSO packet becomes its segments, each queued and paced. */
static int ipg_segment(struct sk_buff *skb, struct Qdisc *sch,
		       struct sk_buff **to_free)
{
	struct ipg_sched_data *q = qdisc_priv(sch);
	netdev_features_t features = netif_skb_features(skb);
	unsigned int len = 0, prev_len = qdisc_pkt_len(skb);
	struct sk_buff *segs, *nskb;
	int queued = 0;

	segs = skb_gso_segment(skb, features & ~NETIF_F_GSO_MASK);
	if (IS_ERR_OR_NULL(segs))
		return qdisc_drop(skb, sch, to_free);
	q->segmented++;
	skb_list_walk_safe(segs, segs, nskb) {
		skb_mark_not_on_list(segs);
		qdisc_skb_cb(segs)->pkt_len = segs->len;
		len += segs->len;
		if (ipg_enqueue_one(segs, sch, to_free) == NET_XMIT_SUCCESS)
			queued++;
	}
	if (queued > 1)
		qdisc_tree_reduce_backlog(sch, 1 - queued, prev_len - len);
	consume_skb(skb);
	return queued > 0 ? NET_XMIT_SUCCESS : NET_XMIT_DROP;
}

static int ipg_enqueue(struct sk_buff *skb, struct Qdisc *sch,
		       struct sk_buff **to_free)
{
	if (skb_is_gso(skb))
		return ipg_segment(skb, sch, to_free);
	return ipg_enqueue_one(skb, sch, to_free);
}

static struct sk_buff *ipg_dequeue(struct Qdisc *sch)
{
	struct ipg_sched_data *q = qdisc_priv(sch);
	struct sk_buff *skb;
	u64 now, slot, start;

	if (!qdisc_peek_head(sch))
		return NULL;
	now = ktime_get_ns();
	if (now < q->next_ns) {
		qdisc_watchdog_schedule_ns(&q->watchdog, q->next_ns);
		q->waiting = true;
		return NULL;
	}
	skb = qdisc_dequeue_head(sch);
	if (!skb)
		return NULL;
	slot = ipg_slot_ns(q, qdisc_pkt_len(skb));
	/*
	 * The packet's slot starts when it was due, not when the timer let us run:
	 * a late wake-up must not stretch every gap. After an idle line (or a wake-up
	 * later than a whole slot) the train starts again from now; a packet that was
	 * waiting for its time when that happened counts as late.
	 */
	start = q->next_ns;
	if (now > start + slot) {
		if (q->waiting) {
			q->late++;
			q->late_ns += now - start;
		}
		start = now;
	}
	q->waiting = false;
	q->next_ns = start + slot;
	return skb;
}

static int ipg_change(struct Qdisc *sch, struct nlattr *opt,
		      struct netlink_ext_ack *extack)
{
	struct ipg_sched_data *q = qdisc_priv(sch);
	struct nlattr *tb[TCA_IPG_MAX + 1];
	u64 line_rate = q->line_rate;
	int err;

	if (!opt) {
		NL_SET_ERR_MSG(extack, "ipg: options required (line_rate)");
		return -EINVAL;
	}
	err = nla_parse_nested_deprecated(tb, TCA_IPG_MAX, opt, ipg_policy, extack);
	if (err < 0)
		return err;
	if (tb[TCA_IPG_LINE_RATE])
		line_rate = nla_get_u64(tb[TCA_IPG_LINE_RATE]);
	if (!line_rate) {
		NL_SET_ERR_MSG(extack, "ipg: line_rate must be > 0 bytes/s");
		return -EINVAL;
	}
	if (tb[TCA_IPG_LIMIT] && !nla_get_u32(tb[TCA_IPG_LIMIT])) {
		NL_SET_ERR_MSG(extack, "ipg: limit must be > 0 packets");
		return -EINVAL;
	}
	sch_tree_lock(sch);
	q->line_rate = line_rate;
	if (tb[TCA_IPG_GAP])
		q->gap = nla_get_u32(tb[TCA_IPG_GAP]);
	if (tb[TCA_IPG_LIMIT])
		q->limit = nla_get_u32(tb[TCA_IPG_LIMIT]);
	sch_tree_unlock(sch);
	return 0;
}

static int ipg_init(struct Qdisc *sch, struct nlattr *opt,
		    struct netlink_ext_ack *extack)
{
	struct ipg_sched_data *q = qdisc_priv(sch);

	qdisc_watchdog_init(&q->watchdog, sch);
	q->limit = qdisc_dev(sch)->tx_queue_len ?: IPG_DEFAULT_LIMIT;
	return ipg_change(sch, opt, extack);
}

static void ipg_reset(struct Qdisc *sch)
{
	struct ipg_sched_data *q = qdisc_priv(sch);

	qdisc_reset_queue(sch);
	q->next_ns = 0;
	q->waiting = false;
	qdisc_watchdog_cancel(&q->watchdog);
}

static void ipg_destroy(struct Qdisc *sch)
{
	struct ipg_sched_data *q = qdisc_priv(sch);

	qdisc_watchdog_cancel(&q->watchdog);
}

static int ipg_dump(struct Qdisc *sch, struct sk_buff *skb)
{
	struct ipg_sched_data *q = qdisc_priv(sch);
	struct nlattr *opts = nla_nest_start_noflag(skb, TCA_OPTIONS);

	if (!opts)
		return -EMSGSIZE;
	if (nla_put_u64_64bit(skb, TCA_IPG_LINE_RATE, q->line_rate, TCA_IPG_PAD) ||
	    nla_put_u32(skb, TCA_IPG_GAP, q->gap) ||
	    nla_put_u32(skb, TCA_IPG_LIMIT, q->limit)) {
		nla_nest_cancel(skb, opts);
		return -EMSGSIZE;
	}
	return nla_nest_end(skb, opts);
}

static int ipg_dump_stats(struct Qdisc *sch, struct gnet_dump *d)
{
	struct ipg_sched_data *q = qdisc_priv(sch);
	struct tc_ipg_xstats st = {
		.delayed = q->delayed,
		.segmented = q->segmented,
		.late = q->late,
		.late_ns = q->late_ns,
	};

	return gnet_stats_copy_app(d, &st, sizeof(st));
}

static struct Qdisc_ops ipg_qdisc_ops __read_mostly = {
	.id = "ipg",
	.priv_size = sizeof(struct ipg_sched_data),
	.enqueue = ipg_enqueue,
	.dequeue = ipg_dequeue,
	.peek = qdisc_peek_head,
	.init = ipg_init,
	.reset = ipg_reset,
	.destroy = ipg_destroy,
	.change = ipg_change,
	.dump = ipg_dump,
	.dump_stats = ipg_dump_stats,
	.owner = THIS_MODULE,
};

static int __init ipg_module_init(void)
{
	return register_qdisc(&ipg_qdisc_ops);
}

static void __exit ipg_module_exit(void)
{
	unregister_qdisc(&ipg_qdisc_ops);
}

module_init(ipg_module_init);
module_exit(ipg_module_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("ipg: inter-packet gap pacing qdisc (Reservoir)");
