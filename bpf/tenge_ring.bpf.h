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

static __always_inline void count_lost_n(__u32 kind, __u64 n)
{
	__u64 *lost = bpf_map_lookup_elem(&tt_lost, &kind);

	if (lost)
		*lost += n;
}

static __always_inline void count_lost(__u32 kind)
{
	count_lost_n(kind, 1);
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

/* ---- batches: the records of one CPU, written to the ring together ------ */

/* 1: every record goes to the ring on its own (`--per-hook`): no batches, no journeys. */
const volatile __u8 per_hook = 0;

/*
 * A ring record costs its reservation (a lock the CPUs share, interrupts
 * off) whatever its size: gathered per CPU, records pay it once per batch.
 * A batch goes to the ring when the next record does not fit, and whenever
 * the collector asks (it runs tt_batch_flush on each CPU before it drains),
 * so a record waits at most until the collector's next drain.
 */
#define BATCH_BYTES (16 << 10)

struct batch {
	__u32 len; /* bytes of data in use, the batch's header included */
	/*
	 * A program on this CPU is writing the batch; one that interrupts it
	 * sends its record to the ring itself, and a flush asked meanwhile
	 * is done by the writer.
	 */
	__u8 busy;
	__u8 flush_asked;
	__u8 _pad[2];
	__u64 held[TT_LOST_SLOTS]; /* records in the batch, by kind: lost if the ring refuses it */
	__u8 data[BATCH_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct batch);
} tt_batches SEC(".maps");

/* Where a reserved record is: in this CPU's batch, or (batch NULL) in the ring. */
struct slot {
	void *rec;
	struct batch *batch;
};

/* This CPU's batch if it is free to write: the caller then owns it until release. */
static __always_inline struct batch *batch_take(void)
{
	__u32 zero = 0;
	struct batch *b = per_hook ? NULL : bpf_map_lookup_elem(&tt_batches, &zero);

	if (!b || b->busy)
		return NULL;
	b->busy = 1;
	asm volatile("" ::: "memory");
	return b;
}

/*
 * Writes what `b` holds to the ring (the caller owns it). A global function:
 * verified once, not at each of the many places a batch may fill up.
 */
__noinline int batch_flush(struct batch *b)
{
	if (!b)
		return 0;
	__u32 len = b->len;

	b->flush_asked = 0;
	if (!len)
		return 0;
	if (len > BATCH_BYTES)
		len = BATCH_BYTES;
	if (bpf_ringbuf_output(&events, b->data, len, wakeup_flags(len))) {
		for (__u32 kind = 0; kind < TT_LOST_SLOTS; kind++)
			if (b->held[kind])
				count_lost_n(kind, b->held[kind]);
	}
	b->len = 0;
	__builtin_memset(b->held, 0, sizeof(b->held));
	return 0;
}

static __always_inline void batch_release(struct batch *b)
{
	if (b->flush_asked)
		batch_flush(b);
	asm volatile("" ::: "memory");
	b->busy = 0;
}

#define ROUND8(n) (((n) + 7) & ~7ULL)

/* Room for a record of `size` bytes in `b` (owned): flushes first if it does not fit. */
static __always_inline void *batch_room(struct batch *b, __u64 size)
{
	__u32 len = b->len;

	if (len > BATCH_BYTES - ROUND8(size)) {
		batch_flush(b);
		len = 0;
	}
	if (!len) {
		struct tt_hdr *hdr = (void *)b->data;

		__builtin_memset(hdr, 0, sizeof(*hdr));
		hdr->kind = TT_KIND_BATCH;
		len = sizeof(*hdr);
	}
	b->len = len + ROUND8(size);
	return b->data + len;
}

/* Counts one hop of a record in the batch as held, or, with no batch, as lost. */
static __always_inline void tally(struct batch *b, const struct tt_hdr *hop)
{
	__u8 kind = hop->kind;

	if (!kind || kind >= TT_LOST_SLOTS)
		return;
	if (b)
		b->held[kind] += 1;
	else
		count_lost(kind);
}

/*
 * Room for a record of `size` bytes (a constant): in this CPU's batch, or
 * in the ring when a program this one interrupted holds the batch. rec is
 * NULL when the ring is full.
 */
static __always_inline struct slot room(__u64 size)
{
	struct batch *b = batch_take();

	if (b)
		return (struct slot){batch_room(b, size), b};
	return (struct slot){bpf_ringbuf_reserve(&events, size, 0), NULL};
}

/* Writes what a slot holds: the batch is released, the ring record submitted. */
static __always_inline void commit(struct slot s, __u64 size)
{
	if (s.batch)
		batch_release(s.batch);
	else if (s.rec)
		bpf_ringbuf_submit(s.rec, wakeup_flags(size));
}

static __always_inline struct slot reserve(__u64 size, __u32 kind)
{
	struct slot s = room(size);

	if (!s.rec)
		count_lost(kind);
	else if (s.batch)
		/* Zeroed, as the ring's unused pages are: a field not set (padding) reads 0. */
		__builtin_memset(s.rec, 0, size);
	return s;
}

/* Sends a record `reserve` gave (its header filled in). */
static __always_inline void submit(struct slot s, __u64 size)
{
	if (s.batch)
		tally(s.batch, s.rec);
	commit(s, size);
}

/*
 * Copies `size` bytes (a multiple of 8, a constant) between 8-byte aligned
 * records in maps: loads and stores in the program, where
 * bpf_probe_read_kernel would take a helper call and a fault-checked load
 * per word.
 */
static __always_inline void copy_words(void *dst, const void *src, __u64 size)
{
	__u64 *d = dst;
	const __u64 *s = src;

#pragma unroll
	for (__u32 i = 0; i < size / 8; i++)
		d[i] = s[i];
}

/*
 * A copy of a record built elsewhere (a journey), in the batch or the ring;
 * its hops are to be tallied (`tally(s.batch, hop)` counts them held, or
 * lost when the ring was full and rec is NULL), then the slot committed.
 */
static __always_inline struct slot output(const void *rec, __u64 size)
{
	struct slot s = room(size);

	if (s.rec)
		copy_words(s.rec, rec, size);
	return s;
}

/* Sends one record built elsewhere (a hop a journey did not take further). */
static __always_inline void send(const struct tt_hdr *rec, __u64 size)
{
	struct slot s = output(rec, size);

	if (s.batch || !s.rec)
		tally(s.batch, rec);
	commit(s, size);
}

/* Fills the header of a record of kind `k` from `h`, stamped now. */
static __always_inline void stamp(struct tt_hdr *hdr, const struct tt_hdr *h, __u8 k)
{
	*hdr = *h;
	hdr->kind = k;
	hdr->ts_ns = bpf_ktime_get_ns();
	hdr->cpu = bpf_get_smp_processor_id();
}

/* Declares `ev`, a reserved `struct tt_ev_<body>` (or NULL), in slot `ev##_slot`. */
#define RESERVE(ev, body, k)                                                                       \
	struct slot ev##_slot = reserve(sizeof(struct tt_ev_##body), (k));                         \
	struct tt_ev_##body *ev = ev##_slot.rec

/*
 * Reserves a `struct tt_ev_<body>` record `ev` (its slot `ev##_slot`), fills
 * its header, or returns 0; SUBMIT(ev) sends it.
 */
#define EMIT_BEGIN(ev, body, h, k)                                                                 \
	RESERVE(ev, body, k);                                                                      \
	if (!ev)                                                                                   \
		return 0;                                                                          \
	stamp(&ev->hdr, (h), (k))

#define SUBMIT(ev) submit(ev##_slot, sizeof(*ev))

#endif /* TENGE_RING_BPF_H */
