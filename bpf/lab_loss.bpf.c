// SPDX-License-Identifier: GPL-2.0-only
/*
 * The lab's loss (LabConfig::drop_every): a tc program on the receiver's
 * ingress that drops every N-th TCP skb carrying data, as a lossy path
 * would, on kernels without netem. Deterministic, and counted, so that a
 * test knows what was lost and can hold the kernel's own counters
 * (retransmits, out-of-order queueing) against what the tracer reports.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

#define ETH_HLEN      14
#define ETH_P_IP      0x0800
#define ETH_P_IPV6    0x86DD
#define TC_ACT_UNSPEC (-1)
#define TC_ACT_SHOT   2

const volatile __u32 drop_every = 0;

/* Per CPU: data skbs seen, those dropped, and their segments. */
enum lab_loss_count {
	DATA_SKBS = 0,
	DROPPED_SKBS = 1,
	DROPPED_SEGMENTS = 2, /* a TSO skb that veth passes whole is many */
	LOSS_COUNTS = 3,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOSS_COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} lab_loss_counts SEC(".maps");

/* Adds `n` to this CPU's count `which`; returns the new count (0: no count). */
static __always_inline __u64 count(__u32 which, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&lab_loss_counts, &which);

	if (!c)
		return 0;
	*c += n;
	return *c;
}

static __always_inline __u8 byte_at(struct __sk_buff *skb, __u32 off)
{
	__u8 b = 0;

	bpf_skb_load_bytes(skb, off, &b, 1);
	return b;
}

/* Where the TCP header starts, or 0 if the packet is not TCP over IP. */
static __always_inline __u32 tcp_offset(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 ver_ihl = byte_at(skb, ETH_HLEN);

		if (ver_ihl >> 4 != 4 || byte_at(skb, ETH_HLEN + 9) != IPPROTO_TCP)
			return 0;
		return ETH_HLEN + (ver_ihl & 0xf) * 4;
	}
	/* No extension headers: the lab sends none. */
	if (skb->protocol == bpf_htons(ETH_P_IPV6) && byte_at(skb, ETH_HLEN + 6) == IPPROTO_TCP)
		return ETH_HLEN + 40;
	return 0;
}

SEC("classifier")
int lab_loss(struct __sk_buff *skb)
{
	__u32 tcp = tcp_offset(skb);

	if (!tcp || !drop_every)
		return TC_ACT_UNSPEC;
	__u32 payload_at = tcp + (byte_at(skb, tcp + 12) >> 4) * 4;

	if (skb->len <= payload_at)
		return TC_ACT_UNSPEC;
	/* Each CPU drops every N-th of its own: no atomics, and still 1 in N. */
	__u64 seen = count(DATA_SKBS, 1);

	if (!seen || seen % drop_every)
		return TC_ACT_UNSPEC;
	count(DROPPED_SKBS, 1);
	count(DROPPED_SEGMENTS, skb->gso_segs ?: 1);
	return TC_ACT_SHOT;
}
