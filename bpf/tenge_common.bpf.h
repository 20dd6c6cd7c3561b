/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Shared by the tracing programs of tenge.bpf.c and stages.bpf.c: the
 * filters and sampling (set from Rust through .rodata), and the socket and
 * packet readers. The ring buffer and the emit helpers are in
 * tenge_ring.bpf.h.
 *
 * Readers take `btf`: true in tp_btf/fentry programs, whose pointers are
 * BTF-typed, so `sk->field` is a plain load the verifier checks against BTF
 * (a bad address reads as 0, as with probe_read); false in raw_tp,
 * tracepoint and kprobe programs, which must call bpf_probe_read_kernel
 * (BPF_CORE_READ) for every field, at 60-80 ns a call in this VM. Socket
 * readers also take `trusted`: true only for a socket that is an argument of
 * a tp_btf/fentry program, which bpf_get_socket_cookie accepts (skb->sk is an
 * RCU pointer the helper refuses without bpf_rcu_read_lock, a kfunc aya 0.14
 * cannot link). Callers pass constants, so after inlining the other branch
 * is gone and one body serves every backend.
 */
#ifndef TENGE_COMMON_BPF_H
#define TENGE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "tenge_abi.h"

/* One field read: a direct load through a BTF pointer, else a probe read. */
#define RD(btf, src, a, ...)                                                                       \
	((btf) ? ___arrow(src, a, ##__VA_ARGS__) : BPF_CORE_READ(src, a, ##__VA_ARGS__))
#define RD_INTO(btf, dst, src, field)                                                              \
	do {                                                                                       \
		if (btf)                                                                           \
			__builtin_memcpy(dst, &(src)->field, sizeof(*(dst)));                      \
		else                                                                               \
			BPF_CORE_READ_INTO(dst, src, field);                                       \
	} while (0)
#define RD_BITFIELD(btf, src, field)                                                               \
	((btf) ? BPF_CORE_READ_BITFIELD(src, field) : BPF_CORE_READ_BITFIELD_PROBED(src, field))

#define AF_INET		       2
#define AF_INET6	       10
#define ETH_P_IP	       0x0800
#define ETH_P_IPV6	       0x86DD
#define IPPROTO_TCP	       6
#define IPPROTO_HOPOPTS	       0
#define IPV6_TLV_JUMBO	       0xc2
#define SOCK_STREAM	       1
#define TCP_FLAG_FIN	       0x01
#define TCP_FLAG_SYN	       0x02
#define TCP_FLAG_ACK	       0x10
#define TCP_STATE_TIME_WAIT    6
#define TCP_STATE_CLOSE	       7
#define TCP_STATE_NEW_SYN_RECV 12

/* Filters; 0 (or filter_addr_set == 0) turns one off. */
const volatile __u16 filter_port = 0;
const volatile __u64 filter_addr[2] = {}; /* 16 address bytes, as in tt_hdr */
const volatile __u8 filter_addr_set = 0;
const volatile __u32 filter_netns = 0;
/*
 * Only the flows of some tasks (filter_task): a socket counts once such a
 * task wrote or read it (mark_task_flow), from then on, both directions.
 * Each of the three is off when 0 (filter_comm: when its first byte is).
 */
const volatile __u8 filter_task = 0;
const volatile __u32 filter_tgid = 0;
const volatile __u64 filter_comm[2] = {};     /* 16 bytes, NUL-padded */
const volatile __u64 filter_cgroup = 0;	      /* cgroup v2 id */
const volatile __u32 filter_cgroup_level = 0; /* its depth below the root */
const volatile __u32 sample_every = 0;	      /* <= 1: every event */
/* ---- filtering and sampling ---------------------------------------------- */

/* Checked in this order, each as soon as its fields are read. */
static __always_inline bool port_wanted(const struct tt_hdr *h)
{
	return !filter_port || h->sport == filter_port || h->dport == filter_port;
}

static __always_inline bool addr_wanted(const struct tt_hdr *h)
{
	if (!filter_addr_set)
		return true;
	__u64 s0, s1, d0, d1;

	__builtin_memcpy(&s0, h->saddr, 8);
	__builtin_memcpy(&s1, h->saddr + 8, 8);
	__builtin_memcpy(&d0, h->daddr, 8);
	__builtin_memcpy(&d1, h->daddr + 8, 8);
	return (s0 == filter_addr[0] && s1 == filter_addr[1]) ||
	       (d0 == filter_addr[0] && d1 == filter_addr[1]);
}

static __always_inline bool netns_wanted(const struct tt_hdr *h)
{
	return !filter_netns || h->netns == filter_netns;
}

/* A flow one way, as a header names it (source first). */
struct task_flow {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u32 netns;
};

/* Flows of the filter's tasks, both ways: 8192 connections. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct task_flow);
	__type(value, __u8);
} task_flows SEC(".maps");

static __always_inline void task_flow_of(struct task_flow *f, const struct tt_hdr *h, bool reverse)
{
	__builtin_memcpy(f->saddr, reverse ? h->daddr : h->saddr, 16);
	__builtin_memcpy(f->daddr, reverse ? h->saddr : h->daddr, 16);
	f->sport = reverse ? h->dport : h->sport;
	f->dport = reverse ? h->sport : h->dport;
	f->netns = h->netns;
}

/* Whether the current task is one the filter keeps the flows of. */
static __always_inline bool current_task_wanted(void)
{
	if (filter_tgid && bpf_get_current_pid_tgid() >> 32 != filter_tgid)
		return false;
	if (filter_comm[0] & 0xff) {
		__u64 comm[2] = {};

		bpf_get_current_comm(comm, sizeof(comm));
		if (comm[0] != filter_comm[0] || comm[1] != filter_comm[1])
			return false;
	}
	return !filter_cgroup ||
	       bpf_get_current_ancestor_cgroup_id(filter_cgroup_level) == filter_cgroup;
}

/* Called where the socket's own task runs (sendmsg, recvmsg). */
static __always_inline void mark_task_flow(const struct tt_hdr *h)
{
	struct task_flow f = {};
	__u8 yes = 1;

	if (!filter_task || !current_task_wanted())
		return;
	task_flow_of(&f, h, false);
	bpf_map_update_elem(&task_flows, &f, &yes, BPF_ANY);
	task_flow_of(&f, h, true);
	bpf_map_update_elem(&task_flows, &f, &yes, BPF_ANY);
}

static __always_inline bool task_wanted(const struct tt_hdr *h)
{
	struct task_flow f = {};

	if (!filter_task)
		return true;
	task_flow_of(&f, h, false);
	return bpf_map_lookup_elem(&task_flows, &f);
}

/*
 * Sampling by blocks of sequence space (TT_SAMPLE_BLOCK_SHIFT, in
 * tenge_abi.h): every event keyed on a byte range is kept iff the range
 * touches a chosen block, so each hop of a kept byte keeps it, whether it
 * sees it in a packet, a merged skb or a socket call. Mirrored by
 * tenge_trace::event::sampled_range.
 */
#define TT_SAMPLE_BLOCK (1U << TT_SAMPLE_BLOCK_SHIFT)

/* murmur3's 32-bit finalizer: consecutive blocks hash independently. */
static __always_inline bool block_chosen(__u32 block)
{
	block ^= block >> 16;
	block *= 0x85ebca6bU;
	block ^= block >> 13;
	block *= 0xc2b2ae35U;
	block ^= block >> 16;
	return block % sample_every == 0;
}

/* Whether sampling keeps the bytes [start, end); an empty range has none. */
static __always_inline bool sampled_range(__u32 start, __u32 end)
{
	if (sample_every <= 1)
		return true;
	__u32 len = end - start;

	if (!len)
		return false;
	if (len > TT_SAMPLE_MAX_BLOCKS * TT_SAMPLE_BLOCK)
		return true;
	__u32 base = start & ~(TT_SAMPLE_BLOCK - 1);
	/* Blocks after the first; at most TT_SAMPLE_MAX_BLOCKS given len. */
	__u32 more = (((end - 1) & ~(TT_SAMPLE_BLOCK - 1)) - base) >> TT_SAMPLE_BLOCK_SHIFT;

	for (__u32 i = 0; i <= TT_SAMPLE_MAX_BLOCKS; i++) {
		if (block_chosen(base >> TT_SAMPLE_BLOCK_SHIFT))
			return true;
		if (i == more)
			break;
		base += TT_SAMPLE_BLOCK; /* wraps with sequence space */
	}
	return false;
}

/*
 * A segment by its payload; one without payload by the last byte it
 * acknowledges, so the ACK of a kept byte is kept, or by its own seq when it
 * acknowledges nothing (a SYN).
 */
static __always_inline bool sampled_segment(__u32 seq, __u32 len, __u32 ack, __u8 flags)
{
	if (len)
		return sampled_range(seq, seq + len);
	if (flags & TCP_FLAG_ACK)
		return sampled_range(ack - 1, ack);
	return sampled_range(seq, seq + 1);
}

/* ---- sockets ------------------------------------------------------------- */

static __always_inline __u64 sock_cookie(const struct sock *sk, bool btf, bool trusted)
{
	/* The helper assigns a cookie on first use; the field may still be 0. */
	if (trusted)
		return bpf_get_socket_cookie((void *)sk);
	return RD(btf, sk, __sk_common.skc_cookie.counter);
}

/*
 * The tcp_sock of `sk`. A BTF pointer keeps the type the hook declares
 * (struct sock), and the verifier refuses reads past its end: the helper
 * returns the same pointer typed as tcp_sock, or NULL unless `sk` is a full
 * TCP socket. Without BTF the cast is a plain cast.
 */
static __always_inline const struct tcp_sock *tcp_sk_of(const struct sock *sk, bool btf)
{
	if (btf)
		return bpf_skc_to_tcp_sock((void *)sk);
	return (const void *)sk;
}

/* A full TCP socket: not a request or TIME_WAIT mini-socket, not UDP. */
static __always_inline bool is_tcp_fullsock(const struct sock *sk, bool btf)
{
	if (!sk)
		return false;
	__u8 state = RD(btf, sk, __sk_common.skc_state);

	if (state == TCP_STATE_TIME_WAIT || state == TCP_STATE_NEW_SYN_RECV)
		return false;
	return RD(btf, sk, sk_protocol) == IPPROTO_TCP && RD(btf, sk, sk_type) == SOCK_STREAM;
}

static __always_inline void map_v4(__u8 out[16], __u32 addr_be)
{
	/* ::ffff:a.b.c.d: bytes 10-11 are 0xff, the address keeps its order */
	__u64 lo = 0, hi = ((__u64)addr_be << 32) | 0xffff0000ULL;

	__builtin_memcpy(out, &lo, 8);
	__builtin_memcpy(out + 8, &hi, 8);
}

static __always_inline bool is_tcp(const struct sock *sk, bool btf)
{
	return sk && RD(btf, sk, sk_protocol) == IPPROTO_TCP;
}

/* The family and addresses of `sk`, local end first. */
static __always_inline void sock_addrs(struct tt_hdr *h, const struct sock *sk, bool btf)
{
	h->family = RD(btf, sk, __sk_common.skc_family);
	if (h->family == AF_INET6) {
		RD_INTO(btf, &h->saddr, sk, __sk_common.skc_v6_rcv_saddr);
		RD_INTO(btf, &h->daddr, sk, __sk_common.skc_v6_daddr);
	} else {
		map_v4(h->saddr, RD(btf, sk, __sk_common.skc_rcv_saddr));
		map_v4(h->daddr, RD(btf, sk, __sk_common.skc_daddr));
	}
}

/*
 * Header of a socket event (local end first); false if filtered out. `mark`:
 * the socket's own task runs this (sendmsg, recvmsg), so its flow is one of
 * the task filter's if the task is.
 */
static __always_inline bool sock_flow(struct tt_hdr *h, const struct sock *sk, bool btf,
				      bool trusted, bool mark)
{
	h->sport = RD(btf, sk, __sk_common.skc_num);
	h->dport = bpf_ntohs(RD(btf, sk, __sk_common.skc_dport));
	if (!port_wanted(h))
		return false;
	sock_addrs(h, sk, btf);
	if (!addr_wanted(h))
		return false;
	h->netns = RD(btf, sk, __sk_common.skc_net.net, ns.inum);
	if (!netns_wanted(h))
		return false;
	if (mark)
		mark_task_flow(h);
	if (!task_wanted(h))
		return false;
	h->sock_cookie = sock_cookie(sk, btf, trusted);
	return true;
}

/* ---- packets ------------------------------------------------------------- */

/* What the IP and TCP headers of one packet say. */
struct tcp_pkt {
	__u32 seq;
	__u32 ack;
	__u32 len; /* TCP payload bytes */
	__u16 win_raw;
	__u8 flags;
};

/* Fills the flow of `h` and `p` from the TCP header at `th`. */
static __always_inline void read_tcphdr(struct tt_hdr *h, struct tcp_pkt *p, const __u8 *th)
{
	__u16 sport, dport, win;
	__u32 seq, ack;

	__builtin_memcpy(&sport, th, 2);
	__builtin_memcpy(&dport, th + 2, 2);
	__builtin_memcpy(&seq, th + 4, 4);
	__builtin_memcpy(&ack, th + 8, 4);
	__builtin_memcpy(&win, th + 14, 2);
	h->sport = bpf_ntohs(sport);
	h->dport = bpf_ntohs(dport);
	p->seq = bpf_ntohl(seq);
	p->ack = bpf_ntohl(ack);
	p->win_raw = bpf_ntohs(win);
	p->flags = th[13];
}

/*
 * Parses IPv4/IPv6 + TCP at kernel address `l3` with one probe read (a
 * second only for IPv4 options). `ip_len` is the L3 length to trust for the
 * payload: the IP header's own when 0. IPv6 takes no extension header but
 * the hop-by-hop one BIG TCP inserts in a GSO/GRO packet past 64 KiB, whose
 * jumbo option holds the length. Returns false for anything but TCP.
 */
static __always_inline bool parse_l3(struct tt_hdr *h, struct tcp_pkt *p, const void *l3,
				     __u32 ip_len)
{
	__u8 buf[68];
	__u32 l3_hdr, l4_hdr;

	if (bpf_probe_read_kernel(buf, sizeof(buf), l3))
		return false;
	__u8 version = buf[0] >> 4;

	if (version == 4) {
		__u16 tot_len;
		__u32 saddr, daddr;

		if (buf[9] != IPPROTO_TCP)
			return false;
		l3_hdr = (buf[0] & 0xf) * 4;
		__builtin_memcpy(&tot_len, buf + 2, 2);
		__builtin_memcpy(&saddr, buf + 12, 4);
		__builtin_memcpy(&daddr, buf + 16, 4);
		if (!ip_len)
			ip_len = bpf_ntohs(tot_len);
		h->family = AF_INET;
		map_v4(h->saddr, saddr);
		map_v4(h->daddr, daddr);
		if (l3_hdr == 20) {
			read_tcphdr(h, p, buf + 20);
			l4_hdr = (buf[32] >> 4) * 4;
		} else {
			__u8 th[20];

			if (bpf_probe_read_kernel(th, sizeof(th), l3 + l3_hdr))
				return false;
			read_tcphdr(h, p, th);
			l4_hdr = (th[12] >> 4) * 4;
		}
	} else if (version == 6) {
		__u16 payload_len;
		__u32 jumbo_len;
		bool jumbo = buf[6] == IPPROTO_HOPOPTS && buf[40] == IPPROTO_TCP && buf[41] == 0 &&
			     buf[42] == IPV6_TLV_JUMBO;

		if (buf[6] != IPPROTO_TCP && !jumbo)
			return false;
		__builtin_memcpy(&payload_len, buf + 4, 2);
		__builtin_memcpy(&jumbo_len, buf + 44, 4);
		if (!ip_len)
			ip_len = 40 + (jumbo ? bpf_ntohl(jumbo_len) : bpf_ntohs(payload_len));
		h->family = AF_INET6;
		__builtin_memcpy(h->saddr, buf + 8, 16);
		__builtin_memcpy(h->daddr, buf + 24, 16);
		if (jumbo) {
			l3_hdr = 48;
			read_tcphdr(h, p, buf + 48);
			l4_hdr = (buf[60] >> 4) * 4;
		} else {
			l3_hdr = 40;
			read_tcphdr(h, p, buf + 40);
			l4_hdr = (buf[52] >> 4) * 4;
		}
	} else {
		return false;
	}
	p->len = ip_len > l3_hdr + l4_hdr ? ip_len - l3_hdr - l4_hdr : 0;
	return true;
}

static __always_inline bool is_ip(const struct sk_buff *skb, bool btf)
{
	__u16 proto = bpf_ntohs(RD(btf, skb, protocol));

	return proto == ETH_P_IP || proto == ETH_P_IPV6;
}

/*
 * Headers at head + network_header. An outgoing skb (`tx`) starts at or
 * before them, and its length counts better than the IP header's, which is
 * not reliable for GSO/BIG TCP packets. A dropped skb may start anywhere.
 */
static __always_inline bool parse_nh(struct tt_hdr *h, struct tcp_pkt *p, const struct sk_buff *skb,
				     bool tx, bool btf)
{
	if (!is_ip(skb, btf))
		return false;
	unsigned char *head = RD(btf, skb, head);
	__u16 nh = RD(btf, skb, network_header);
	__u32 ip_len = 0;

	if (tx)
		ip_len = RD(btf, skb, len) - (head + nh - RD(btf, skb, data));
	return parse_l3(h, p, head + nh, ip_len);
}

/*
 * Where x86-64 keeps the direct map and the struct page array (KASLR moves
 * both): the addresses of the kernel's page_offset_base and vmemmap_base,
 * from /proc/kallsyms; 0 when unknown (then headers in a fragment are not
 * read).
 */
const volatile __u64 page_offset_base_at = 0;
const volatile __u64 vmemmap_base_at = 0;

/*
 * The data of an skb's first page fragment, where a driver may leave every
 * header: virtio_net's mergeable buffers copy only the Ethernet header into
 * the linear part, and GRO reads the rest from frag 0. skb_frag_t is a
 * bio_vec on older kernels and a struct skb_frag (page, later netmem) on
 * newer ones: the same 16 bytes, page (or netmem), len, offset. NULL for a net_iov (device memory,
 * low bit set) or an skb without fragments.
 */
static __always_inline const void *frag0_data(const struct sk_buff *skb, bool btf)
{
	struct {
		__u64 page;
		__u32 len;
		__u32 offset;
	} frag;
	__u64 page_offset_base, vmemmap_base;
	__u8 nr_frags;
	const void *shinfo = RD(btf, skb, head) + RD(btf, skb, end);

	if (!page_offset_base_at || !vmemmap_base_at)
		return NULL;
	if (bpf_probe_read_kernel(
		&nr_frags, 1, shinfo + bpf_core_field_offset(struct skb_shared_info, nr_frags)) ||
	    !nr_frags)
		return NULL;
	if (bpf_probe_read_kernel(&frag, sizeof(frag),
				  shinfo + bpf_core_field_offset(struct skb_shared_info, frags)) ||
	    (frag.page & 1))
		return NULL;
	if (bpf_probe_read_kernel(&page_offset_base, 8, (void *)page_offset_base_at) ||
	    bpf_probe_read_kernel(&vmemmap_base, 8, (void *)vmemmap_base_at))
		return NULL;
	__u64 pfn = (frag.page - vmemmap_base) / bpf_core_type_size(struct page);

	return (const void *)(page_offset_base + (pfn << 12) + frag.offset);
}

/*
 * An incoming skb at the driver/GRO layer: skb->data is the IP header, in
 * the linear part or, when nothing past skb->data is linear, at the start
 * of the first fragment.
 */
static __always_inline bool parse_rx(struct tt_hdr *h, struct tcp_pkt *p, const struct sk_buff *skb,
				     bool btf)
{
	const void *l3 = RD(btf, skb, data);

	if (!is_ip(skb, btf))
		return false;
	if (RD(btf, skb, len) == RD(btf, skb, data_len))
		l3 = frag0_data(skb, btf);
	return l3 && parse_l3(h, p, l3, 0);
}

struct gso_info {
	__u16 size;
	__u16 segs;
};

/*
 * gso_size and gso_segs of skb_shinfo(skb). The shared info is found by
 * address arithmetic, so even tp_btf programs must probe-read it: one read
 * when the kernel keeps the two fields side by side (it does since 2.6).
 */
static __always_inline struct gso_info gso_of(const struct sk_buff *skb, bool btf)
{
	struct skb_shared_info *shinfo = (void *)(RD(btf, skb, head) + RD(btf, skb, end));
	struct gso_info gso = {};

	if (bpf_core_field_offset(struct skb_shared_info, gso_segs) ==
	    bpf_core_field_offset(struct skb_shared_info, gso_size) + 2) {
		bpf_probe_read_kernel(&gso, sizeof(gso), &shinfo->gso_size);
	} else {
		gso.size = BPF_CORE_READ(shinfo, gso_size);
		gso.segs = BPF_CORE_READ(shinfo, gso_segs);
	}
	return gso;
}

static __always_inline void pkt_body(struct tt_pkt *body, const struct tcp_pkt *p,
				     const struct sk_buff *skb, bool btf)
{
	struct gso_info gso = gso_of(skb, btf);

	body->seq = p->seq;
	body->ack = p->ack;
	body->len = p->len;
	body->win_raw = p->win_raw;
	body->tcp_flags = p->flags;
	body->skb_len = RD(btf, skb, len);
	body->gso_segs = gso.segs;
	body->gso_size = gso.size;
	body->ifindex = RD(btf, skb, dev, ifindex);
	body->_pad0 = 0;
	body->rc = 0;
}

/* TCP_SKB_CB(skb): the control block TCP keeps in skb->cb. */
static __always_inline const struct tcp_skb_cb *tcp_cb(const struct sk_buff *skb)
{
	return (const void *)((unsigned long)skb + bpf_core_field_offset(struct sk_buff, cb));
}

#endif /* TENGE_COMMON_BPF_H */
