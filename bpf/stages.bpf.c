// SPDX-License-Identifier: GPL-2.0-only
/*
 * In-kernel aggregation for `tenge-trace stages`: no record per packet.
 * Each hook stamps the skb it keeps in a table slot; the next hook of the
 * same skb turns the stamp into one sample of the stage between them (count,
 * sum, max and a log-linear histogram, per CPU), and every hook counts the
 * packets and bytes it kept. A GSO skb is its gso_segs packets, as in the
 * report's paths: counted so, and its stages weigh that many samples. User space reads the per-CPU
 * arrays when it likes. Filters (port, address, netns: .rodata, as in tenge.bpf.c) are applied at
 * every hook that can read the packet, before anything is counted; the task filter's flows are
 * marked where their tasks write and read.
 */
#include "tenge_common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/*
 * The last hook that kept an skb, and when: one slot of a direct-mapped
 * table indexed by a hash of the skb's address. A hash map would keep every
 * skb, but its insert (bucket lock, LRU list) cost more than the rest of a
 * hop; a slot costs a load. Two skbs in flight on one slot: the later takes
 * it and the earlier counts as unmatched at its next hook.
 */
struct skb_stamp {
	__u64 skb; /* 0: free; also the slot's sequence word (stamp_of) */
	__u64 ts_ns;
	__u32 skb_len; /* for net_dev_xmit, which cannot read the skb */
	__u16 hook;    /* enum tt_stage_hook */
	__u16 segs;    /* the packets it is, read once at its first hook */
};

#define STAMP_SLOTS_LOG2 16

/*
 * One table per direction: on veth the same skb goes from start_xmit to the
 * peer's rx_entry before net_dev_xmit returns.
 */
#define SKB_STAMP_MAP(name)                                                                        \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                  \
		__uint(max_entries, 1 << STAMP_SLOTS_LOG2);                                        \
		__type(key, __u32);                                                                \
		__type(value, struct skb_stamp);                                                   \
	} name SEC(".maps")

SKB_STAMP_MAP(tx_stamps);
SKB_STAMP_MAP(rx_stamps);

/*
 * Sampling by time: the window the programs count in (bpf_ktime_get_ns),
 * set by user space once they are all attached, from the traced slice's
 * start to its end, and closed from before the first of them leaves until
 * all are back. So every hook counts over the same time, the one user
 * space scales by, and not while the programs come and go one by one. A
 * stamp from before `since` was left before a pause, and the address it
 * names may be another skb's by now. Leaving: since COUNTING_OFF and until
 * 0, so that a half-written window is one no time is in.
 */
#define COUNTING_OFF (~0ULL)

struct counting_window {
	__u64 since;
	__u64 until;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counting_window);
} counting_window SEC(".maps");

/* Set when sampling by time: otherwise the verifier drops the gate's load. */
const volatile __u8 time_sliced = 0;

/* Since when the programs count, or COUNTING_OFF if not at `now`. */
static __always_inline __u64 counting_from(__u64 now)
{
	struct counting_window *w;
	__u32 zero = 0;

	if (!time_sliced)
		return 0;
	w = bpf_map_lookup_elem(&counting_window, &zero);
	if (!w)
		return 0;
	return now >= w->since && now < w->until ? w->since : COUNTING_OFF;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} addr_scratch SEC(".maps");

/*
 * The address of `skb` as a number, 0 if none. The verifier allows no
 * arithmetic on a trusted pointer, but what a map value holds is a number.
 */
static __always_inline __u64 addr_of(const struct sk_buff *skb)
{
	__u32 zero = 0;
	__u64 *scratch = bpf_map_lookup_elem(&addr_scratch, &zero);

	if (!scratch)
		return 0;
	*(volatile __u64 *)scratch = (unsigned long)skb;
	return *(volatile __u64 *)scratch;
}

/* Fibonacci hashing: skbs come from a slab, at multiples of 256 bytes. */
static __always_inline struct skb_stamp *slot_of(void *stamps, __u64 skb)
{
	__u32 index = (skb * 0x9E3779B97F4A7C15ULL) >> (64 - STAMP_SLOTS_LOG2);

	return bpf_map_lookup_elem(stamps, &index);
}

#define barrier() asm volatile("" ::: "memory")

/*
 * The stamp `hook` left on `skb`, copied into `out`, or false. Writers clear
 * `skb` before rewriting a slot and set it last, so a copy that still shows
 * the skb after it was taken is whole (x86 keeps stores, and loads, in
 * order; the barriers keep the compiler from reordering them). A CPU that
 * reorders them (arm64) may, rarely, time one skb by another's stamp: a
 * wrong sample, never a fault.
 */
static __always_inline bool stamp_of(struct skb_stamp *slot, __u64 skb, __u32 hook, __u64 since,
				     struct skb_stamp *out)
{
	if (!slot || *(volatile __u64 *)&slot->skb != skb)
		return false;
	barrier();
	out->ts_ns = slot->ts_ns;
	out->skb_len = slot->skb_len;
	out->hook = slot->hook;
	out->segs = slot->segs;
	barrier();
	return *(volatile __u64 *)&slot->skb == skb && out->hook == hook && out->ts_ns >= since;
}

static __always_inline void stamp(struct skb_stamp *slot, __u64 skb, __u64 now, __u32 len,
				  __u32 hook, __u16 segs)
{
	if (!slot)
		return;
	*(volatile __u64 *)&slot->skb = 0;
	barrier();
	slot->ts_ns = now;
	slot->skb_len = len;
	slot->hook = hook;
	slot->segs = segs;
	barrier();
	*(volatile __u64 *)&slot->skb = skb;
}

/* The skb's journey ends here (or it was not kept): its stamp goes. */
static __always_inline void unstamp(struct skb_stamp *slot, __u64 skb)
{
	if (slot && *(volatile __u64 *)&slot->skb == skb)
		*(volatile __u64 *)&slot->skb = 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TT_STAGE_MAX);
	__type(key, __u32);
	__type(value, struct tt_stage_stats);
} tt_stage_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TT_HOOK_MAX);
	__type(key, __u32);
	__type(value, struct tt_hook_counts);
} tt_hook_counts SEC(".maps");

/* floor(log2(v)) for v > 0, without loops. */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;

#define LOG2_STEP(bits)                                                                            \
	if (v >> (bits)) {                                                                         \
		v >>= (bits);                                                                      \
		r += (bits);                                                                       \
	}
	LOG2_STEP(32)
	LOG2_STEP(16)
	LOG2_STEP(8)
	LOG2_STEP(4)
	LOG2_STEP(2)
	LOG2_STEP(1)
#undef LOG2_STEP
	return r;
}

/* The histogram bucket of `ns` (see TT_HIST_SUB_BITS in tenge_abi.h). */
/*
 * 64-bit throughout: a 32-bit bucket is zero-extended into a copy for the
 * index, and verifiers before 6.x do not carry the clamp's bound to it.
 */
static __always_inline __u64 hist_bucket(__u64 ns)
{
	const __u64 sub = 1U << TT_HIST_SUB_BITS;

	if (ns < sub)
		return ns;
	__u64 e = log2_u64(ns);
	__u64 b = (e - TT_HIST_SUB_BITS + 1) * sub + ((ns >> (e - TT_HIST_SUB_BITS)) & (sub - 1));

	return b < TT_HIST_BUCKETS ? b : TT_HIST_BUCKETS - 1;
}

static __always_inline void count_hook(__u32 hook, __u32 bytes, __u16 segs)
{
	struct tt_hook_counts *c = bpf_map_lookup_elem(&tt_hook_counts, &hook);

	if (c) {
		c->packets += segs;
		c->bytes += bytes;
	}
}

/* The packets `skb` is: gso_segs, or 1 for one that is not GSO. */
static __always_inline __u16 segs_of(const struct sk_buff *skb)
{
	__u16 segs = gso_of(skb, true).segs;

	return segs ? segs : 1;
}

/*
 * `segs` samples of `stage`, one per packet of the skb: the time since
 * `prev` (its earlier hook) stamped it; no stamp (NULL), or one from later
 * than now (a slot two CPUs wrote at once), counts as unmatched.
 */
static __always_inline void record_stage(__u32 stage, const struct skb_stamp *prev, __u64 now,
					 __u16 segs)
{
	struct tt_stage_stats *s = bpf_map_lookup_elem(&tt_stage_stats, &stage);

	if (!s)
		return;
	if (!prev || prev->ts_ns > now) {
		s->unmatched += segs;
		return;
	}
	__u64 ns = now - prev->ts_ns;
	__u64 b = hist_bucket(ns);

	s->count += segs;
	s->sum_ns += ns * segs;
	if (ns > s->max_ns)
		s->max_ns = ns;
	if (b < TT_HIST_BUCKETS)
		s->buckets[b] += segs;
}

/* The filters on a packet parsed from its headers, as tenge.bpf.c applies them. */
static __always_inline bool pkt_kept(const struct sk_buff *skb, bool tx)
{
	struct tt_hdr h = {};
	struct tcp_pkt p;

	if (!(tx ? parse_nh(&h, &p, skb, true, true) : parse_rx(&h, &p, skb, true)))
		return false;
	if (!port_wanted(&h) || !addr_wanted(&h))
		return false;
	h.netns = skb->dev->nd_net.net->ns.inum;
	return netns_wanted(&h) && task_wanted(&h);
}

/* A first hook (net_dev_queue, driver entry): a kept skb is counted and stamped. */
static __always_inline void first_hop(void *stamps, const struct sk_buff *skb, bool tx, __u32 hook)
{
	__u64 key = addr_of(skb);
	struct skb_stamp *slot = slot_of(stamps, key);

	/* The stamp is taken past the filters, so read the clock here only when sliced. */
	if (time_sliced && counting_from(bpf_ktime_get_ns()) == COUNTING_OFF)
		return;
	if (!pkt_kept(skb, tx)) {
		/* A reused address must not carry the stamp of the skb it was. */
		unstamp(slot, key);
		return;
	}
	__u16 segs = segs_of(skb);

	count_hook(hook, skb->len, segs);
	stamp(slot, key, bpf_ktime_get_ns(), skb->len, hook, segs);
}

/*
 * A later hook: an skb `prev_hook` stamped was kept there, so it is timed
 * without reading its headers again; any other is filtered here and, when
 * kept, counted as unmatched. Either way it is stamped for the next hook.
 */
static __always_inline void next_hop(void *stamps, const struct sk_buff *skb, bool tx, __u32 hook,
				     __u32 stage, __u32 prev_hook)
{
	__u64 key = addr_of(skb), now = bpf_ktime_get_ns();
	struct skb_stamp *slot = slot_of(stamps, key);
	struct skb_stamp prev;
	__u32 len = skb->len;
	__u64 since = counting_from(now);

	if (since == COUNTING_OFF)
		return;

	if (stamp_of(slot, key, prev_hook, since, &prev)) {
		record_stage(stage, &prev, now, prev.segs);
	} else if (pkt_kept(skb, tx)) {
		prev.segs = segs_of(skb);
		record_stage(stage, NULL, now, prev.segs);
	} else {
		unstamp(slot, key);
		return;
	}
	count_hook(hook, len, prev.segs);
	stamp(slot, key, now, len, hook, prev.segs);
}

/* ---- the task filter's marks: attached only with --pid/--comm/--cgroup --- */

/*
 * Where a socket's own task writes or reads it, a task the filter keeps
 * marks the flow (mark_task_flow, in sock_flow after the other filters);
 * from then on pkt_kept and tcp_probe keep its packets.
 */
static __always_inline int mark_flow_of(const struct sock *sk, bool btf, bool trusted)
{
	struct tt_hdr h = {};

	if (is_tcp(sk, btf))
		sock_flow(&h, sk, btf, trusted, true);
	return 0;
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(sendmsg_btf, struct sock *sk)
{
	return mark_flow_of(sk, true, true);
}

/* Kernels before the tracepoint (6.1, 6.12) have the function. */
SEC("fentry/tcp_sendmsg_locked")
int BPF_PROG(sendmsg_fentry, struct sock *sk)
{
	return mark_flow_of(sk, true, true);
}

SEC("kprobe/tcp_sendmsg_locked")
int BPF_KPROBE(sendmsg_kprobe, struct sock *sk)
{
	return mark_flow_of(sk, false, false);
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(copy_datagram_btf, struct sk_buff *skb)
{
	return mark_flow_of(skb->sk, true, false);
}

/* ---- TX: net_dev_queue -> net_dev_start_xmit -> net_dev_xmit ------------- */

SEC("tp_btf/net_dev_queue")
int BPF_PROG(dev_queue_btf, struct sk_buff *skb)
{
	first_hop(&tx_stamps, skb, true, TT_HOOK_DEV_QUEUE);
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(dev_start_xmit_btf, struct sk_buff *skb)
{
	next_hop(&tx_stamps, skb, true, TT_HOOK_DEV_START_XMIT, TT_STAGE_QDISC, TT_HOOK_DEV_QUEUE);
	return 0;
}

/*
 * The driver may have freed the skb: only its address is used, and the
 * filter's word is start_xmit's (whose stamp carries the length). An skb
 * without that stamp is not counted, so the driver stage has no unmatched.
 */
SEC("tp_btf/net_dev_xmit")
int BPF_PROG(dev_xmit_btf, struct sk_buff *skb, int rc)
{
	__u64 key = addr_of(skb);
	struct skb_stamp *slot = slot_of(&tx_stamps, key);
	struct skb_stamp prev;
	__u64 now = bpf_ktime_get_ns(), since = counting_from(now);

	if (since == COUNTING_OFF || !stamp_of(slot, key, TT_HOOK_DEV_START_XMIT, since, &prev))
		return 0;
	unstamp(slot, key);
	count_hook(TT_HOOK_DEV_XMIT, prev.skb_len, prev.segs);
	record_stage(TT_STAGE_DRIVER, &prev, now, prev.segs);
	return 0;
}

/* ---- RX: driver entry -> netif_receive_skb -> tcp_probe ------------------ */

#define RX_ENTRY(name, tp)                                                                         \
	SEC("tp_btf/" #tp)                                                                         \
	int BPF_PROG(name##_btf, struct sk_buff *skb)                                              \
	{                                                                                          \
		first_hop(&rx_stamps, skb, false, TT_HOOK_RX_ENTRY);                               \
		return 0;                                                                          \
	}

RX_ENTRY(rx_gro, napi_gro_receive_entry)
RX_ENTRY(rx_netif_recv, netif_receive_skb_entry)
RX_ENTRY(rx_netif_rx, netif_rx_entry)

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(netif_receive_btf, struct sk_buff *skb)
{
	next_hop(&rx_stamps, skb, false, TT_HOOK_NETIF_RECEIVE, TT_STAGE_NAPI, TT_HOOK_RX_ENTRY);
	return 0;
}

/*
 * TCP takes the segment (tcp_rcv_established), the last hook: the stamp
 * goes. skb->data is past the IP header now, so an unstamped skb is
 * filtered on the socket's ends.
 */
SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_rcv_btf, struct sock *sk, struct sk_buff *skb)
{
	__u64 key = addr_of(skb), now = bpf_ktime_get_ns();
	struct skb_stamp *slot = slot_of(&rx_stamps, key);
	struct skb_stamp prev;
	struct tt_hdr h = {};
	__u64 since = counting_from(now);

	if (since == COUNTING_OFF)
		return 0;
	bool matched = stamp_of(slot, key, TT_HOOK_NETIF_RECEIVE, since, &prev);

	if (matched) {
		unstamp(slot, key);
	} else if (sock_flow(&h, sk, true, false, false)) {
		prev.segs = segs_of(skb);
	} else {
		return 0;
	}
	record_stage(TT_STAGE_IP_TCP, matched ? &prev : NULL, now, prev.segs);
	count_hook(TT_HOOK_TCP_RCV, skb->len, prev.segs);
	return 0;
}
