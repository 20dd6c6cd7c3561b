// SPDX-License-Identifier: GPL-2.0-only
/*
 * In-kernel aggregation for `tenge-trace stages`: no record per packet.
 * Each hook stamps the skb it keeps in a per-skb map; the next hook of the
 * same skb turns the stamp into one sample of the stage between them (count,
 * sum, max and a log-linear histogram, per CPU), and every hook counts the
 * packets and bytes it kept. User space reads the per-CPU arrays when it
 * likes. Filters (port, address, netns: .rodata, as in tenge.bpf.c) are
 * applied at every hook that can read the packet, before anything is counted.
 */
#include "tenge_common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* The last hook that kept an skb, and when. */
struct skb_stamp {
	__u64 ts_ns;
	__u32 skb_len; /* for net_dev_xmit, which cannot read the skb */
	__u32 hook;    /* enum tt_stage_hook */
};

/*
 * One map per direction: on veth the same skb goes from start_xmit to the
 * peer's rx_entry before net_dev_xmit returns. LRU, so that skbs freed
 * between two hooks (dropped, merged by GRO, segmented) cannot fill it.
 */
#define SKB_STAMP_MAP(name)                                                                        \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_LRU_HASH);                                               \
		__uint(max_entries, 65536);                                                        \
		__type(key, __u64);                                                                \
		__type(value, struct skb_stamp);                                                   \
	} name SEC(".maps")

SKB_STAMP_MAP(tx_stamps);
SKB_STAMP_MAP(rx_stamps);

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
static __always_inline __u32 hist_bucket(__u64 ns)
{
	const __u32 sub = 1U << TT_HIST_SUB_BITS;

	if (ns < sub)
		return ns;
	__u32 e = log2_u64(ns);
	__u32 b = (e - TT_HIST_SUB_BITS + 1) * sub + ((ns >> (e - TT_HIST_SUB_BITS)) & (sub - 1));

	return b < TT_HIST_BUCKETS ? b : TT_HIST_BUCKETS - 1;
}

static __always_inline void count_hook(__u32 hook, __u32 bytes)
{
	struct tt_hook_counts *c = bpf_map_lookup_elem(&tt_hook_counts, &hook);

	if (c) {
		c->packets += 1;
		c->bytes += bytes;
	}
}

/* One sample of `stage` from the stamp `prev` (NULL: none), or an unmatched skb. */
static __always_inline void sample_stage(__u32 stage, const struct skb_stamp *prev, __u32 prev_hook,
					 __u64 now)
{
	struct tt_stage_stats *s = bpf_map_lookup_elem(&tt_stage_stats, &stage);

	if (!s)
		return;
	/* A stamp of another hook is a reused address, not this skb's. */
	if (!prev || prev->hook != prev_hook) {
		s->unmatched += 1;
		return;
	}
	__u64 ns = now - prev->ts_ns;
	__u32 b = hist_bucket(ns);

	s->count += 1;
	s->sum_ns += ns;
	if (ns > s->max_ns)
		s->max_ns = ns;
	if (b < TT_HIST_BUCKETS)
		s->buckets[b] += 1;
}

/*
 * A kept skb at `hook`: counted, the stage from `prev_hook` sampled (when
 * `stage` is not TT_STAGE_MAX: a first hop, whose stamp replaces any other),
 * and stamped for the next hook, in place when it had a stamp.
 */
static __always_inline void hop(void *stamps, const struct sk_buff *skb, __u32 hook, __u32 stage,
				__u32 prev_hook)
{
	__u64 key = (unsigned long)skb;
	__u64 now = bpf_ktime_get_ns();
	__u32 len = skb->len;
	struct skb_stamp *stamp = NULL;

	count_hook(hook, len);
	if (stage < TT_STAGE_MAX) {
		stamp = bpf_map_lookup_elem(stamps, &key);
		sample_stage(stage, stamp, prev_hook, now);
	}
	if (stamp) {
		stamp->ts_ns = now;
		stamp->skb_len = len;
		stamp->hook = hook;
	} else {
		struct skb_stamp fresh = {.ts_ns = now, .skb_len = len, .hook = hook};

		bpf_map_update_elem(stamps, &key, &fresh, BPF_ANY);
	}
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
	return netns_wanted(&h);
}

/* ---- TX: net_dev_queue -> net_dev_start_xmit -> net_dev_xmit ------------- */

SEC("tp_btf/net_dev_queue")
int BPF_PROG(dev_queue_btf, struct sk_buff *skb)
{
	if (pkt_kept(skb, true))
		hop(&tx_stamps, skb, TT_HOOK_DEV_QUEUE, TT_STAGE_MAX, 0);
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(dev_start_xmit_btf, struct sk_buff *skb)
{
	if (pkt_kept(skb, true))
		hop(&tx_stamps, skb, TT_HOOK_DEV_START_XMIT, TT_STAGE_QDISC, TT_HOOK_DEV_QUEUE);
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
	__u64 key = (unsigned long)skb;
	struct skb_stamp *prev = bpf_map_lookup_elem(&tx_stamps, &key);

	if (!prev || prev->hook != TT_HOOK_DEV_START_XMIT)
		return 0;
	count_hook(TT_HOOK_DEV_XMIT, prev->skb_len);
	sample_stage(TT_STAGE_DRIVER, prev, TT_HOOK_DEV_START_XMIT, bpf_ktime_get_ns());
	bpf_map_delete_elem(&tx_stamps, &key);
	return 0;
}

/* ---- RX: driver entry -> netif_receive_skb -> tcp_probe ------------------ */

#define RX_ENTRY(name, tp)                                                                         \
	SEC("tp_btf/" #tp)                                                                         \
	int BPF_PROG(name##_btf, struct sk_buff *skb)                                              \
	{                                                                                          \
		if (pkt_kept(skb, false))                                                          \
			hop(&rx_stamps, skb, TT_HOOK_RX_ENTRY, TT_STAGE_MAX, 0);                   \
		return 0;                                                                          \
	}

RX_ENTRY(rx_gro, napi_gro_receive_entry)
RX_ENTRY(rx_netif_recv, netif_receive_skb_entry)
RX_ENTRY(rx_netif_rx, netif_rx_entry)

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(netif_receive_btf, struct sk_buff *skb)
{
	if (pkt_kept(skb, false))
		hop(&rx_stamps, skb, TT_HOOK_NETIF_RECEIVE, TT_STAGE_NAPI, TT_HOOK_RX_ENTRY);
	return 0;
}

/*
 * TCP takes the segment (tcp_rcv_established); skb->data is past the IP
 * header now, so the filters read the socket's ends instead. The last hop:
 * the stamp goes.
 */
SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_rcv_btf, struct sock *sk, struct sk_buff *skb)
{
	__u64 key = (unsigned long)skb;
	struct tt_hdr h = {};

	if (!sock_flow(&h, sk, true, false))
		return 0;
	count_hook(TT_HOOK_TCP_RCV, skb->len);
	sample_stage(TT_STAGE_IP_TCP, bpf_map_lookup_elem(&rx_stamps, &key), TT_HOOK_NETIF_RECEIVE,
		     bpf_ktime_get_ns());
	bpf_map_delete_elem(&rx_stamps, &key);
	return 0;
}
