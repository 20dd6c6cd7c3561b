// SPDX-License-Identifier: GPL-2.0-only
/*
 * The floor of any ring-buffer tracer on this host, for `tenge-trace bench`:
 * what one event costs before it reads anything from the kernel. Attached
 * beside the probes, on one of their hooks, during the same transfer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "tenge_abi.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} floor_events SEC(".maps");

/* Records the reader had no room for: the emit floor is low by these. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} floor_lost SEC(".maps");

/* The timestamp every event carries. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(floor_clock)
{
	return bpf_ktime_get_ns() == 0;
}

/* A packet record reserved, stamped and submitted, as the probes do it. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(floor_emit)
{
	struct tt_ev_pkt *ev = bpf_ringbuf_reserve(&floor_events, sizeof(*ev), 0);
	__u32 zero = 0;

	if (!ev) {
		__u64 *lost = bpf_map_lookup_elem(&floor_lost, &zero);

		if (lost)
			*lost += 1;
		return 0;
	}
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->hdr.kind = TT_KIND_DEV_XMIT;
	ev->hdr.ts_ns = bpf_ktime_get_ns();
	ev->hdr.cpu = bpf_get_smp_processor_id();
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
	return 0;
}

/* Records a CPU gathers before it writes them to the ring as one. */
#define FLOOR_BATCH 16

struct floor_batch {
	__u32 len;
	struct tt_ev_pkt evs[FLOOR_BATCH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct floor_batch);
} floor_batches SEC(".maps");

/*
 * The same record, gathered per CPU and written FLOOR_BATCH at a time: what
 * batching would save a tracer whose records could wait.
 */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(floor_batched)
{
	__u32 zero = 0;
	struct floor_batch *batch = bpf_map_lookup_elem(&floor_batches, &zero);

	if (!batch)
		return 0;
	__u32 i = batch->len;

	if (i >= FLOOR_BATCH) {
		if (bpf_ringbuf_output(&floor_events, batch->evs, sizeof(batch->evs),
				       BPF_RB_NO_WAKEUP)) {
			__u64 *lost = bpf_map_lookup_elem(&floor_lost, &zero);

			if (lost)
				*lost += FLOOR_BATCH;
		}
		i = 0;
	}
	struct tt_ev_pkt *ev = &batch->evs[i];

	__builtin_memset(ev, 0, sizeof(*ev));
	ev->hdr.kind = TT_KIND_DEV_XMIT;
	ev->hdr.ts_ns = bpf_ktime_get_ns();
	ev->hdr.cpu = bpf_get_smp_processor_id();
	batch->len = i + 1;
	return 0;
}
