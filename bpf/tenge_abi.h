/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The event ABI: the one definition of what the BPF programs write into the
 * ring buffer and what the collector reads. The Rust side is generated from
 * this file by bindgen (build.rs), so the two can never drift apart.
 *
 * Every record is a `struct tt_hdr` followed by the body of its kind. Field
 * names follow the kernel's (tcp_sock, sock, sk_buff) so that a number in a
 * dump can be looked up in the kernel source without translation.
 *
 * Bump TT_ABI_VERSION on any change: trace files record it.
 */
#ifndef TENGE_ABI_H
#define TENGE_ABI_H

#define TT_ABI_VERSION 5
/*
 * The oldest ABI whose files this one reads: 3 and 4 added kinds and a task
 * role, 5 a field where tcp_rcv had padding.
 */
#define TT_ABI_READABLE 2

/* Event kinds. Keep the numbers stable: they are stored in trace files. */
enum tt_kind {
	TT_KIND_SENDMSG = 1,	    /* tcp:tcp_sendmsg_locked: app write (T0) */
	TT_KIND_WINDOW_ADV = 2,	    /* net:net_dev_queue: every outgoing TCP segment (T1) */
	TT_KIND_DEV_START_XMIT = 3, /* net:net_dev_start_xmit: driver gets it (T3) */
	TT_KIND_DEV_XMIT = 4,	    /* net:net_dev_xmit: driver returned */
	TT_KIND_NAPI_POLL = 5,	    /* napi:napi_poll: one poll, its work and budget */
	TT_KIND_RX_ENTRY = 6,	    /* driver hands the skb to the stack (R0) */
	TT_KIND_NETIF_RECEIVE = 7,  /* net:netif_receive_skb: after GRO/backlog (R1) */
	TT_KIND_TCP_RCV = 8,	    /* tcp:tcp_probe: TCP takes a segment (R2, and ACKs) */
	TT_KIND_DATA_READY = 9,	    /* sock:sk_data_ready: readable (R3) */
	TT_KIND_COPY_DATAGRAM = 10, /* skb:skb_copy_datagram_iovec: copy to user (R4) */
	TT_KIND_APP_READ = 11,	    /* sock:sock_recv_length: the read returned */
	TT_KIND_STATE = 12,	    /* sock:inet_sock_set_state */
	TT_KIND_RETRANSMIT = 13,    /* tcp:tcp_retransmit_skb */
	TT_KIND_KFREE_SKB = 14,	    /* skb:kfree_skb: a drop, with its reason */
	TT_KIND_CPU_SAMPLE = 15,    /* perf_event cpu-clock sample */
	TT_KIND_SOCK_TASK = 16,	    /* a socket's writer or reader is a new task */
	TT_KIND_PAUSE = 17,	    /* the collector's: nothing traced for a while */
	TT_KIND_MAX = 18,
	/*
	 * Ring only, never in trace files: the records of one packet's hops in
	 * one ring record (struct tt_tx_journey, struct tt_rx_journey). The
	 * collector hands out the records it holds as if each hop had sent its
	 * own.
	 */
	TT_KIND_JOURNEY = 32,
	/*
	 * Ring only: records a CPU gathered (struct tt_hdr of this kind, then
	 * records and journeys back to back, each as long as its kind says),
	 * written to the ring at once.
	 */
	TT_KIND_BATCH = 33,
};

/* tt_hdr.variant for TT_KIND_RX_ENTRY: which driver entry point fired. */
enum tt_rx_entry_variant {
	TT_RX_GRO = 0,	      /* net:napi_gro_receive_entry */
	TT_RX_NETIF_RECV = 1, /* net:netif_receive_skb_entry */
	TT_RX_NETIF_RX = 2,   /* net:netif_rx_entry (veth, loopback) */
};

/*
 * Common header. Addresses are IPv6 or IPv4-mapped IPv6 (::ffff:a.b.c.d),
 * ports in host order. Socket events carry the local end as saddr/sport;
 * packet events carry the packet's own source and destination.
 */
struct tt_hdr {
	__u64 ts_ns;	   /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 sock_cookie; /* 0 when the kernel has not given the socket one yet */
	__u64 skb;	   /* skb address: identity within one hop only; 0 if none */
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u8 kind;    /* enum tt_kind */
	__u8 family;  /* AF_INET or AF_INET6; 0 when no flow is known */
	__u8 variant; /* hook flavour within a kind, e.g. enum tt_rx_entry_variant */
	__u8 _pad0;
	__u32 cpu;
	__u32 netns; /* network namespace inode */
};

/* TT_KIND_SENDMSG: one iteration of the tcp_sendmsg_locked copy loop. */
struct tt_sendmsg {
	__u32 write_seq; /* tp->write_seq when the iteration starts */
	__u32 skb_len;	 /* tail skb length, 0 if none */
	__u32 msg_left;	 /* bytes of the user buffer not yet copied */
	__u32 size_goal;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 sk_wmem_queued;
	__u32 sk_sndbuf;
	/* What may be sent now, as the write finds it (every backend since ABI 2). */
	__u32 snd_cwnd;
	__u32 snd_wnd;
	__u32 mss_cache;
	__u32 packets_out;
};

/*
 * TT_KIND_WINDOW_ADV: an outgoing TCP segment at net_dev_queue, which runs
 * synchronously after tcp_select_window(), so the socket state below is the
 * state the advertised window was chosen from.
 */
struct tt_window_adv {
	__u32 seq;
	__u32 ack;
	__u32 len;    /* TCP payload bytes (all GSO segments) */
	__u32 window; /* header window << rcv_wscale (unscaled on SYN) */
	__u16 win_raw;
	__u8 tcp_flags;
	__u8 rcv_wscale;
	__u16 gso_segs;
	__u16 gso_size;
	/* receive side: what __tcp_select_window() read */
	__u32 sk_rcvbuf;
	__u32 sk_rmem_alloc;
	__u32 sk_backlog_len;
	__u32 window_clamp;
	__u32 rcv_ssthresh;
	__u32 rcv_mss; /* icsk_ack.rcv_mss: the receiver's estimate of the peer's MSS */
	__u32 rcv_wnd;
	__u32 rcv_nxt;
	__u32 rcv_wup;
	__u32 copied_seq;
	__u16 advmss;
	__u8 scaling_ratio;
	__u8 ack_pending; /* icsk_ack.pending (ICSK_ACK_NOMEM = 32) */
	/* send side: why data is (not) leaving */
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 snd_wnd;
	__u32 snd_cwnd;
	__u32 mss_cache;
	__u32 packets_out;
	__u32 write_seq;
	__u8 icsk_probes_out;
	__u8 icsk_backoff;
	__u8 tcp_shrink_window; /* net.ipv4.tcp_shrink_window of the socket's netns */
	/*
	 * net.ipv4.tcp_adv_win_scale of the socket's netns where the kernel
	 * sizes windows by it (scaling_ratio 0: before 6.7); 0 otherwise. Was
	 * padding (0) in ABI 2 files, which all carry a scaling_ratio.
	 */
	__s8 adv_win_scale;
};

/*
 * Device-layer packet events: TT_KIND_DEV_START_XMIT, TT_KIND_DEV_XMIT,
 * TT_KIND_RX_ENTRY, TT_KIND_NETIF_RECEIVE. TCP fields are parsed from the
 * packet's headers; DEV_XMIT runs after the driver may have freed the skb, so
 * it repeats what DEV_START_XMIT saw for the same skb on the same CPU.
 */
struct tt_pkt {
	__u32 seq;
	__u32 ack;
	__u32 len;     /* TCP payload bytes */
	__u32 skb_len; /* skb->len */
	__u16 gso_segs;
	__u16 gso_size;
	__u16 win_raw;
	__u8 tcp_flags;
	__u8 _pad0;
	__u32 ifindex;
	__s32 rc; /* DEV_XMIT: driver return code */
};

/* TT_KIND_NAPI_POLL: after each poll (no skb, no flow). */
struct tt_napi_poll {
	__u64 napi; /* napi_struct address */
	__u32 napi_id;
	__u32 ifindex;
	__s32 work;
	__s32 budget;
};

/*
 * TT_KIND_TCP_RCV: tcp_probe, at the entry of tcp_rcv_established(): every
 * incoming segment of an established socket, with the state *before* TCP
 * processes it (data at a receiver, ACKs at a sender).
 */
struct tt_tcp_rcv {
	__u32 seq;
	__u32 end_seq;
	__u32 ack;
	__u32 len; /* TCP payload bytes */
	__u16 win_raw;
	__u8 tcp_flags;
	__u8 snd_wscale;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 snd_wnd;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 mss_cache;
	__u32 packets_out;
	__u32 sacked_out;
	__u32 lost_out;
	__u32 retrans_out;
	__u32 srtt_us; /* tp->srtt_us >> 3 */
	__u32 write_seq;
	__u32 rcv_nxt;
	__u32 rcv_mss;
	__u32 sk_wmem_queued;
	__u32 sk_sndbuf;
	__u32 chrono_start;   /* jiffies */
	__u32 chrono_stat[3]; /* jiffies in BUSY, RWND_LIMITED, SNDBUF_LIMITED */
	__u32 jiffies;	      /* now, to close the running chrono */
	__u8 chrono_type;
	__u8 backlog; /* 1: socket owned by the user, segment went through the backlog */
	__u8 ca_state;
	/*
	 * tp->nonagle: TCP_NAGLE_OFF 1 (TCP_NODELAY), TCP_NAGLE_CORK 2,
	 * TCP_NAGLE_PUSH 4. Padding (0, as with Nagle on) before ABI 5.
	 */
	__u8 nonagle;
};

/* TT_KIND_DATA_READY */
struct tt_data_ready {
	__u32 rcv_nxt;
	__u32 copied_seq;
	__u32 sk_rmem_alloc;
	__u32 sk_rcvbuf;
};

/* TT_KIND_COPY_DATAGRAM: seq range from TCP_SKB_CB(skb) */
struct tt_copy_datagram {
	__u32 seq;
	__u32 end_seq;
	__u32 len; /* bytes copied from this skb */
	__u32 _pad0;
};

/* TT_KIND_APP_READ */
struct tt_app_read {
	__s32 ret; /* bytes returned to the application, or -errno */
	__u32 copied_seq;
	__u32 rcv_nxt;
	__u32 sk_rmem_alloc;
	__u32 sk_rcvbuf;
	__u32 rcv_wnd;
};

/* TT_KIND_STATE */
struct tt_state {
	__u8 oldstate;
	__u8 newstate;
	__u16 advmss;
	__u32 mss_cache;
};

/* TT_KIND_RETRANSMIT */
struct tt_retransmit {
	__u32 seq;
	__u32 end_seq;
	__s32 err;
	__u8 state;
	__u8 _pad0[3];
};

/* TT_KIND_KFREE_SKB */
struct tt_kfree_skb {
	__u64 location;
	__u32 reason; /* enum skb_drop_reason */
	__u16 protocol;
	__u16 _pad0;
	__u32 seq;
	__u32 ack;
	__u32 len;
	__u32 _pad1;
};

/* TT_KIND_CPU_SAMPLE */
struct tt_cpu_sample {
	__u32 pid;
	__u32 tgid;
	__s32 kstack_id; /* id in the stack map, < 0 when none */
	__s32 ustack_id;
};

/* enum tt_sock_task.role */
enum tt_task_role {
	TT_TASK_WRITER = 1, /* called sendmsg */
	TT_TASK_READER = 2, /* copied data out (recvmsg) */
	TT_TASK_ON_CPU = 3, /* a CPU sample caught it (no socket) */
};

/*
 * TT_KIND_SOCK_TASK: the task that writes (or reads) the socket of the
 * header is not the one that did before, or the first one: sent from the
 * sendmsg and copy_datagram hooks, in the task's context, at the writes
 * and reads sampling keeps (sampled by bytes, the task named is the one of
 * the kept bytes). The pid and comm are the kernel's, right in any PID
 * namespace.
 * With role TT_TASK_ON_CPU (no socket, header zero but for its time and
 * CPU) it names a process CPU samples caught, before its first sample and
 * again when renamed: comm is then its thread group leader's, the
 * process's name.
 */
struct tt_sock_task {
	__u64 cgroup_id; /* cgroup v2 id: the inode of its directory */
	__u32 pid;	 /* the thread */
	__u32 tgid;	 /* the process */
	char comm[16];
	__u8 role; /* enum tt_task_role */
	__u8 _pad0[7];
};

/* tt_hdr.variant for TT_KIND_PAUSE: which end of a pause. */
enum tt_pause_edge {
	TT_PAUSE_BEGIN = 1,
	TT_PAUSE_END = 2,
	TT_PAUSE_BOUND = 3,
};

/*
 * TT_KIND_PAUSE: written by the collector, never by the kernel. Sampling by
 * time slices (`record --slice`) detaches every probe between the slices it
 * traces, and attaches them again ahead of the next. From a BEGIN
 * (hdr.ts_ns: the traced slice's end; the probes began to leave then or
 * after) to the END that follows (hdr.ts_ns: the next traced slice's
 * start, or when all probes were back if that was later) the trace is not
 * whole, and the analyses skip the events stamped between (of the probes
 * still or already there), in whatever order they come. edge_ns: when all
 * were gone (BEGIN), when they began to come back (END); no probe ran in
 * between. A BOUND (hdr.ts_ns = edge_ns) marks the recording's start
 * (before the first probe attached) or end (at the end of the window it
 * ends in, at the latest) with the probes attached, where no pause begins
 * or ends: the traced window runs from or to it. The header has only
 * kind, variant and time.
 */
struct tt_pause {
	__u64 edge_ns;
};

/* One ring-buffer record per kind: header + body. */
#define TT_EVENT(name)                                                                             \
	struct tt_ev_##name {                                                                      \
		struct tt_hdr hdr;                                                                 \
		struct tt_##name body;                                                             \
	}
TT_EVENT(sendmsg);
TT_EVENT(window_adv);
TT_EVENT(pkt);
TT_EVENT(napi_poll);
TT_EVENT(tcp_rcv);
TT_EVENT(data_ready);
TT_EVENT(copy_datagram);
TT_EVENT(app_read);
TT_EVENT(state);
TT_EVENT(retransmit);
TT_EVENT(kfree_skb);
TT_EVENT(cpu_sample);
TT_EVENT(sock_task);
TT_EVENT(pause);

/*
 * Journeys: unless the tracer runs per hook, the hops of one skb that follow
 * each other on one CPU fill one record, sent when the journey ends (TX: the
 * driver returned; RX: the NAPI poll that took it into the socket ended)
 * or breaks off (another skb takes the CPU's journey,
 * a hop does not match, the skb is dropped, the NAPI poll ends). Each hop is
 * the record it would have sent alone; hdr.kind 0 marks a hop the journey
 * did not reach. The journey's own hdr sets only kind (TT_KIND_JOURNEY) and
 * variant (enum tt_journey). A journey of one hop is sent as that record.
 */
enum tt_journey {
	TT_JOURNEY_TX = 0,
	TT_JOURNEY_RX = 1,
	/* struct tt_rx_journey up to `sent`: an RX journey that sent nothing */
	TT_JOURNEY_RX_SHORT = 2,
};

/* net_dev_queue -> net_dev_start_xmit -> net_dev_xmit */
struct tt_tx_journey {
	struct tt_hdr hdr;
	struct tt_ev_window_adv queue;
	struct tt_ev_pkt start_xmit;
	struct tt_ev_pkt xmit;
};

/*
 * driver entry -> netif_receive_skb -> tcp_probe -> sk_data_ready -> the
 * poll's end; `sent`: the first TX journey TCP's handling of the segment
 * completed on the way (its ACK, or data the ACK let go).
 */
struct tt_rx_journey {
	struct tt_hdr hdr;
	struct tt_ev_pkt entry;
	struct tt_ev_pkt netif;
	struct tt_ev_tcp_rcv tcp;
	struct tt_ev_data_ready ready;
	struct tt_ev_napi_poll poll;
	struct tt_tx_journey sent;
};

/*
 * 1-in-N sampling keeps a byte of a flow's sequence space iff the block of
 * 2^TT_SAMPLE_BLOCK_SHIFT bytes it lies in is chosen; an event is kept iff
 * the range it is keyed on touches a chosen block, and a range spanning more
 * than TT_SAMPLE_MAX_BLOCKS blocks is always kept (bounds the kernel's loop).
 * Not part of the record layout, but the kernel and the analyses that
 * reproduce its choices must agree on them: one definition here.
 */
#define TT_SAMPLE_BLOCK_SHIFT 14
#define TT_SAMPLE_MAX_BLOCKS  64

/* Index of the per-CPU lost-event counters (map tt_lost): one per kind. */
#define TT_LOST_SLOTS TT_KIND_MAX

/*
 * In-kernel aggregation (bpf/stages.bpf.c, `tenge-trace stages`): the values
 * of its per-CPU array maps, which user space reads and sums; no records.
 * Not part of trace files, so TT_ABI_VERSION does not cover them.
 *
 * Stages are the hops of one skb, named as the path analysis names them
 * (tenge-analysis, analysis/paths): the time from one hook to the next for the same skb.
 */
enum tt_stage {
	TT_STAGE_QDISC = 0,  /* net_dev_queue -> net_dev_start_xmit */
	TT_STAGE_DRIVER = 1, /* net_dev_start_xmit -> net_dev_xmit */
	TT_STAGE_NAPI = 2,   /* driver entry (rx_entry) -> netif_receive_skb */
	TT_STAGE_IP_TCP = 3, /* netif_receive_skb -> tcp_probe (socket backlog included) */
	TT_STAGE_MAX = 4,
};

/* The hooks, each with a packet and byte counter (map tt_hook_counts). */
enum tt_stage_hook {
	TT_HOOK_DEV_QUEUE = 0,	    /* net:net_dev_queue */
	TT_HOOK_DEV_START_XMIT = 1, /* net:net_dev_start_xmit */
	TT_HOOK_DEV_XMIT = 2,	    /* net:net_dev_xmit (the packets start_xmit kept) */
	TT_HOOK_RX_ENTRY = 3, /* napi_gro_receive_entry, netif_receive_skb_entry, netif_rx_entry */
	TT_HOOK_NETIF_RECEIVE = 4, /* net:netif_receive_skb */
	TT_HOOK_TCP_RCV = 5,	   /* tcp:tcp_probe */
	TT_HOOK_MAX = 6,
};

/*
 * Log-linear latency buckets: 2^TT_HIST_SUB_BITS sub-buckets per power of
 * two of nanoseconds. Bucket b < 2^TT_HIST_SUB_BITS holds exactly b ns;
 * above, with g = b >> TT_HIST_SUB_BITS and s = b & (2^TT_HIST_SUB_BITS - 1),
 * it holds [(2^TT_HIST_SUB_BITS + s) << (g - 1), that + (1 << (g - 1))), a
 * width of at most a quarter of its lower end. The last bucket also holds
 * everything longer (2^41 ns, 37 minutes, and up).
 */
#define TT_HIST_SUB_BITS 2
#define TT_HIST_BUCKETS	 160

/* One stage, per CPU (map tt_stage_stats, index enum tt_stage). */
struct tt_stage_stats {
	__u64 count; /* samples: a packet of an skb seen at both hooks */
	__u64 sum_ns;
	__u64 max_ns;
	__u64 unmatched; /* kept at the later hook, not seen (or not kept) at the earlier */
	__u64 buckets[TT_HIST_BUCKETS];
};

/* One hook, per CPU (map tt_hook_counts, index enum tt_stage_hook). */
struct tt_hook_counts {
	__u64 packets; /* kept by the filters: a GSO skb counts its gso_segs */
	__u64 bytes;   /* their skb->len at this hook */
};

#endif /* TENGE_ABI_H */
