// SPDX-License-Identifier: GPL-2.0-only
/*
 * One empty program per hook family, for `tenge-trace check`: a family works
 * on this kernel if its program loads and attaches.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(check_tp_btf, struct sk_buff *skb)
{
	return 0;
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(check_raw_tp, struct sk_buff *skb)
{
	return 0;
}

SEC("tracepoint/net/netif_receive_skb")
int check_tracepoint(void *ctx)
{
	return 0;
}

SEC("fentry/tcp_rcv_established")
int BPF_PROG(check_fentry, struct sock *sk)
{
	return 0;
}

SEC("kprobe/tcp_rcv_established")
int BPF_KPROBE(check_kprobe, struct sock *sk)
{
	return 0;
}

SEC("classifier")
int check_tc(struct __sk_buff *skb)
{
	return -1; /* TC_ACT_UNSPEC: let the packet through untouched */
}

SEC("perf_event")
int check_perf_event(struct bpf_perf_event_data *ctx)
{
	return 0;
}
