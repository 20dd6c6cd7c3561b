// SPDX-License-Identifier: GPL-2.0-only
/*
 * For the loader's tests only: programs built against fields that no kernel
 * has in that form, each beside a raw_tp flavour that needs none, so that a
 * relocation that does not fit must become a clear reason and a fallback.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

/* A field the running kernel lacks. */
struct tcp_sock___missing {
	__u32 no_such_field;
} __attribute__((preserve_access_index));

/* A plain u8 where every kernel has a 1-bit bitfield (aya-obj 0.3.0 panicked). */
struct tcp_sock___plain {
	__u8 repair;
} __attribute__((preserve_access_index));

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(missing_btf, struct sock *sk)
{
	return ((struct tcp_sock___missing *)sk)->no_such_field;
}

SEC("raw_tp/inet_sock_set_state")
int BPF_PROG(missing_raw, struct sock *sk)
{
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(bitfield_btf, struct sock *sk)
{
	return ((struct tcp_sock___plain *)sk)->repair;
}

SEC("raw_tp/inet_sock_set_state")
int BPF_PROG(bitfield_raw, struct sock *sk)
{
	return 0;
}
