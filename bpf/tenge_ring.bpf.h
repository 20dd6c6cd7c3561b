/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The ring buffer of tenge.bpf.c, its lost counters and the emit helpers:
 * what a program that sends a record per event needs beyond the readers.
 */
#ifndef TENGE_RING_BPF_H
#define TENGE_RING_BPF_H

#include "tenge_common.bpf.h"

/*
 * Wake the reader once a CPU has queued this much since its last wakeup: a
 * quarter of the ring shared among the CPUs (set from Rust).
 */
const volatile __u64 wakeup_bytes = 2 << 20;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* overridden from Rust */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TT_LOST_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} tt_lost SEC(".maps");

/* ---- ring buffer --------------------------------------------------------- */

static __always_inline void count_lost(__u32 kind)
{
	__u64 *lost = bpf_map_lookup_elem(&tt_lost, &kind);

	if (lost)
		*lost += 1;
}

static __always_inline void *reserve(__u64 size, __u32 kind)
{
	void *rec = bpf_ringbuf_reserve(&events, size, 0);

	if (!rec)
		count_lost(kind);
	return rec;
}

/* Bytes this CPU queued since it last woke the reader. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tt_unwoken SEC(".maps");

/*
 * The reader polls every few ms; wake it only when the ring fills up. A
 * per-CPU byte count (an inlined map lookup) instead of asking the ring how
 * full it is (bpf_ringbuf_query, a helper call on every event).
 */
static __always_inline __u64 wakeup_flags(__u64 size)
{
	__u32 zero = 0;
	__u64 *unwoken = bpf_map_lookup_elem(&tt_unwoken, &zero);

	if (unwoken) {
		*unwoken += size;
		if (*unwoken >= wakeup_bytes) {
			*unwoken = 0;
			return BPF_RB_FORCE_WAKEUP;
		}
	}
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void submit(void *rec, __u64 size)
{
	bpf_ringbuf_submit(rec, wakeup_flags(size));
}

/* Copies a record built elsewhere (a journey) into the ring; false if full. */
static __always_inline bool output(const void *rec, __u64 size)
{
	return !bpf_ringbuf_output(&events, (void *)rec, size, wakeup_flags(size));
}

/* Fills the header of a record of kind `k` from `h`, stamped now. */
static __always_inline void stamp(struct tt_hdr *hdr, const struct tt_hdr *h, __u8 k)
{
	*hdr = *h;
	hdr->kind = k;
	hdr->ts_ns = bpf_ktime_get_ns();
	hdr->cpu = bpf_get_smp_processor_id();
}

/* Reserves a `struct tt_ev_<body>` record, fills its header, or returns 0. */
#define EMIT_BEGIN(ev, body, h, k)                                                                 \
	struct tt_ev_##body *ev = reserve(sizeof(*ev), (k));                                       \
	if (!ev)                                                                                   \
		return 0;                                                                          \
	stamp(&ev->hdr, (h), (k))

#endif /* TENGE_RING_BPF_H */
