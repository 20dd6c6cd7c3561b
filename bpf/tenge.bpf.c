// SPDX-License-Identifier: GPL-2.0-only
/*
 * The tracing programs. Each logical probe has one body function and thin
 * wrappers per backend, named <probe>_<backend>: _btf (tp_btf), _raw
 * (raw_tp), _tp (classic tracepoint), _fentry and _kprobe (on the kernel
 * function the tracepoint sits in). The loader (tenge-probe) tries them in
 * that order and keeps the first that loads and attaches.
 */
#include "tenge_ring.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/*
 * A tracepoint whose arguments or format changed between kernels has a
 * program per form: <probe>_<backend> for the newest and
 * <probe>_<backend>__<variant> for older ones, which the loader tries next
 * on the same backend. `variant` (`__<variant>`) is the last argument of
 * the macros below.
 */

/* tp_btf and raw_tp programs take the same arguments; `variant` as above. */
#define BTF_AND_RAW_VARIANT(name, tp, call, variant, args...)                                      \
	SEC("tp_btf/" #tp)                                                                         \
	int BPF_PROG(name##_btf##variant, args)                                                    \
	{                                                                                          \
		const bool btf __attribute__((unused)) = true;                                     \
		return call;                                                                       \
	}                                                                                          \
	SEC("raw_tp/" #tp)                                                                         \
	int BPF_PROG(name##_raw##variant, args)                                                    \
	{                                                                                          \
		const bool btf __attribute__((unused)) = false;                                    \
		return call;                                                                       \
	}
#define BTF_AND_RAW(name, tp, call, args...) BTF_AND_RAW_VARIANT(name, tp, call, , args)

/* Classic tracepoint: `ctx` is the tracepoint's trace_event_raw_<class>. */
#define TRACEPOINT(name, cat, tp, ctx_type, call, variant...)                                      \
	SEC("tracepoint/" #cat "/" #tp)                                                            \
	int name##_tp##variant(struct ctx_type *ctx)                                               \
	{                                                                                          \
		const bool btf __attribute__((unused)) = false;                                    \
		return call;                                                                       \
	}

/* tcp:tcp_retransmit_skb's format before 6.14 (class tcp_event_sk_skb). */
struct trace_event_raw_tcp_event_sk_skb___old {
	const void *skbaddr;
	const void *skaddr;
} __attribute__((preserve_access_index));

/* ---- journeys (struct tt_tx_journey, struct tt_rx_journey) --------------- */

/*
 * The journey a CPU has in flight (`skb` 0: none). `wanted` is what the
 * filters and sampling decided at its first hop; the later hops of the same
 * skb would decide alike, so they learn it with a load instead of parsing
 * the headers again. `skb_len` is the length the first hop parsed: the
 * headers it read stand while the skb keeps it.
 */
struct tx_journey {
	__u64 skb;
	__u32 skb_len;
	__u8 wanted;
	struct tt_tx_journey rec;
};

struct rx_journey {
	__u64 skb;
	__u64 sk; /* the socket tcp_probe took it into, for sk_data_ready */
	__u8 wanted;
	struct tt_rx_journey rec;
};

/*
 * Skbs seen at the driver entry, waiting for netif_receive_skb: GRO and the
 * backlog hold several, so a small table per CPU, direct-mapped by address.
 * An skb that finds its slot taken sends the occupant's record first.
 */
#define RX_SLOTS 64

struct rx_entry_slot {
	__u64 skb;
	__u32 skb_len;
	__u8 wanted;
	struct tt_ev_pkt ev;
};

struct rx_entries {
	__u32 held;
	__u64 addr; /* scratch: an address as a number (see rx_slot) */
	struct rx_entry_slot slot[RX_SLOTS];
};

#define PER_CPU_ONE(name, elem)                                                                    \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                                           \
		__uint(max_entries, 1);                                                            \
		__type(key, __u32);                                                                \
		__type(value, elem);                                                               \
	} name SEC(".maps")

PER_CPU_ONE(tx_journeys, struct tx_journey);
PER_CPU_ONE(rx_journeys, struct rx_journey);
PER_CPU_ONE(rx_entries, struct rx_entries);

/* This CPU's element of a PER_CPU_ONE map; NULL when running per hook. */
static __always_inline void *journey_state(void *map)
{
	__u32 zero = 0;

	return per_hook ? NULL : bpf_map_lookup_elem(map, &zero);
}

/*
 * A whole TX journey sent while TCP handled a received segment on this CPU
 * (an ACK, data the ACK let go) travels in that segment's RX journey.
 */
static __always_inline bool tx_nest(struct tx_journey *j)
{
	struct rx_journey *rx = journey_state(&rx_journeys);

	if (!rx || !rx->skb || !rx->wanted || !rx->rec.tcp.hdr.kind ||
	    rx->rec.sent.queue.hdr.kind || !j->rec.xmit.hdr.kind)
		return false;
	rx->rec.sent = j->rec;
	return true;
}

static __always_inline void tx_flush(struct tx_journey *j)
{
	if (!j->skb)
		return;
	j->skb = 0;
	if (!j->wanted || tx_nest(j))
		return;
	if (!j->rec.start_xmit.hdr.kind)
		return send(&j->rec.queue.hdr, sizeof(j->rec.queue));
	struct slot s = output(&j->rec, sizeof(j->rec));

	if (s.batch || !s.rec) {
		tally(s.batch, &j->rec.queue.hdr);
		tally(s.batch, &j->rec.start_xmit.hdr);
		tally(s.batch, &j->rec.xmit.hdr);
	}
	commit(s, sizeof(j->rec));
}

static __always_inline void rx_flush(struct rx_journey *j)
{
	if (!j->skb)
		return;
	j->skb = 0;
	if (!j->wanted)
		return;
	if (!j->rec.entry.hdr.kind && !j->rec.tcp.hdr.kind && !j->rec.poll.hdr.kind)
		return send(&j->rec.netif.hdr, sizeof(j->rec.netif));
	/*
	 * Most journeys send nothing on the way: those leave `sent` behind.
	 * The variant is set in the copy: a program interrupting this one may
	 * start the CPU's next journey in `j`.
	 */
	bool sent = j->rec.sent.queue.hdr.kind;
	__u64 size = sent ? sizeof(j->rec) : offsetof(struct tt_rx_journey, sent);
	struct slot s = sent ? output(&j->rec, sizeof(j->rec))
			     : output(&j->rec, offsetof(struct tt_rx_journey, sent));

	if (s.rec)
		((struct tt_hdr *)s.rec)->variant = sent ? TT_JOURNEY_RX : TT_JOURNEY_RX_SHORT;
	if (s.batch || !s.rec) {
		tally(s.batch, &j->rec.entry.hdr);
		tally(s.batch, &j->rec.netif.hdr);
		tally(s.batch, &j->rec.tcp.hdr);
		tally(s.batch, &j->rec.ready.hdr);
		tally(s.batch, &j->rec.poll.hdr);
		if (sent) {
			tally(s.batch, &j->rec.sent.queue.hdr);
			tally(s.batch, &j->rec.sent.start_xmit.hdr);
			tally(s.batch, &j->rec.sent.xmit.hdr);
		}
	}
	commit(s, size);
}

static __always_inline struct rx_entry_slot *rx_slot(struct rx_entries *e, const void *skb)
{
	/*
	 * The verifier forbids shifting a BTF pointer; read back from a map,
	 * the address is a number. skbs are 256-byte slab objects: the bits
	 * above those vary.
	 */
	e->addr = (unsigned long)skb;
	__u64 addr = *(volatile __u64 *)&e->addr;

	return &e->slot[(addr >> 8) & (RX_SLOTS - 1)];
}

/* Empties a slot, sending the record it held. */
static __always_inline void rx_slot_flush(struct rx_entries *e, struct rx_entry_slot *s)
{
	if (!s->skb)
		return;
	s->skb = 0;
	e->held -= 1;
	if (s->wanted)
		send(&s->ev.hdr, sizeof(s->ev));
}

/*
 * Ends every journey this CPU holds: at the end of a NAPI poll, when the
 * skbs it handled have gone as far as the poll takes them.
 */
static __always_inline void flush_journeys(void)
{
	struct tx_journey *tx = journey_state(&tx_journeys);
	struct rx_journey *rx = journey_state(&rx_journeys);
	struct rx_entries *e = journey_state(&rx_entries);

	if (tx)
		tx_flush(tx);
	if (rx)
		rx_flush(rx);
	if (!e || !e->held)
		return;
	for (int i = 0; i < RX_SLOTS; i++)
		rx_slot_flush(e, &e->slot[i]);
}

/* A dropped skb ends its journey: the drop's record follows it. */
static __always_inline void flush_journeys_of(const void *skb)
{
	struct tx_journey *tx = journey_state(&tx_journeys);
	struct rx_journey *rx = journey_state(&rx_journeys);
	struct rx_entries *e = journey_state(&rx_entries);

	if (tx && tx->skb == (unsigned long)skb)
		tx_flush(tx);
	if (rx && rx->skb == (unsigned long)skb)
		rx_flush(rx);
	if (e) {
		struct rx_entry_slot *s = rx_slot(e, skb);

		if (s->skb == (unsigned long)skb)
			rx_slot_flush(e, s);
	}
}

/* ---- the tasks that write and read each socket --------------------------- */

/* The last writer and reader (pid) each socket was sent with, by address. */
struct sock_tasks {
	__u32 writer;
	__u32 reader;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct sock_tasks);
} sock_tasks SEC(".maps");

/*
 * The socket each CPU last noted a writer (and a reader) for, by cookie (a
 * socket's for life: never reused), and the `task_epoch` it was noted in:
 * a call by the same task on the same socket is then known unchanged
 * without the hash lookup (about 50 ns a call). Any change of any socket's
 * task bumps the epoch, so a CPU's entry cannot hide a change another CPU
 * saw (a writer A here, B there, A here again); the calls of one socket
 * hold its lock, so its changes do not race its entries.
 */
struct last_noted {
	__u64 cookie;
	__u32 pid;
	__u32 epoch;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* index: role - 1 (writer, reader) */
	__type(key, __u32);
	__type(value, struct last_noted);
} last_noted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} task_epoch SEC(".maps");

/* True when `last` (this CPU's) noted `pid` on the socket of `cookie` in `epoch`. */
static __always_inline bool noted_here(struct last_noted *last, __u32 epoch, __u64 cookie,
				       __u32 pid)
{
	return last && cookie && last->cookie == cookie && last->pid == pid && last->epoch == epoch;
}

/*
 * Sends a sock_task record when the current task is not the one `sk` was
 * last written (or read) by: once per socket and task, not per call. The
 * entry goes when the socket closes (state_body), so a socket allocated at
 * the same address starts afresh.
 */
static __always_inline void note_task(const struct tt_hdr *h, const struct sock *sk,
				      enum tt_task_role role)
{
	__u64 key = (unsigned long)sk;
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	__u32 zero = 0, slot = role - 1;
	__u32 *epoch = bpf_map_lookup_elem(&task_epoch, &zero);
	struct last_noted *here = bpf_map_lookup_elem(&last_noted, &slot);
	__u32 now = epoch ? *epoch : 0;

	if (noted_here(here, now, h->sock_cookie, pid))
		return;
	struct sock_tasks none = {}, *seen = bpf_map_lookup_elem(&sock_tasks, &key);
	__u32 *last;

	if (!seen) {
		bpf_map_update_elem(&sock_tasks, &key, &none, BPF_NOEXIST);
		seen = bpf_map_lookup_elem(&sock_tasks, &key);
		if (!seen)
			return;
	}
	last = role == TT_TASK_WRITER ? &seen->writer : &seen->reader;
	if (*last == pid)
		goto noted;
	RESERVE(ev, sock_task, TT_KIND_SOCK_TASK);

	if (!ev)
		return;
	*last = pid;
	if (epoch) {
		/* clang's BPF v1 target cannot use the old value: read it back */
		__sync_fetch_and_add(epoch, 1);
		now = *epoch;
	}
	stamp(&ev->hdr, h, TT_KIND_SOCK_TASK);
	ev->body.cgroup_id = bpf_get_current_cgroup_id();
	ev->body.pid = pid;
	ev->body.tgid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(ev->body.comm, sizeof(ev->body.comm));
	ev->body.role = role;
	__builtin_memset(ev->body._pad0, 0, sizeof(ev->body._pad0));
	SUBMIT(ev);
noted:
	if (here)
		*here = (struct last_noted){h->sock_cookie, pid, now};
}

/* ---- sendmsg: tcp:tcp_sendmsg_locked ------------------------------------- */

/*
 * Socket events are sampled by the bytes they handle, so that they are kept
 * exactly when a kept packet may need them: sendmsg by the bytes this copy
 * iteration may write, data_ready by the bytes readable, copy_datagram by its
 * skb, app_read by the bytes the read returned.
 */

/*
 * One iteration copies at most size_goal bytes, appended at write_seq (to
 * the tail skb or a new one). fentry/kprobe see the whole call: no goal.
 */
static __always_inline bool sendmsg_sampled(__u32 write_seq, __u32 msg_left, __u32 size_goal)
{
	__u32 most = size_goal && size_goal < msg_left ? size_goal : msg_left;

	return sampled_range(write_seq, write_seq + most);
}

/*
 * A socket call (a write, a read) whose bytes `sampled` says: sampling's
 * word first, since dropping a call then costs two loads, but a task filter
 * still learns its flow from it; then the flow's filters. True: it is
 * kept, its task noted.
 */
static __always_inline bool socket_call_kept(struct tt_hdr *h, const struct sock *sk, bool sampled,
					     bool btf, bool trusted, enum tt_task_role role)
{
	if (!sampled && !filter_task)
		return false;
	if (!sock_flow(h, sk, btf, trusted, true) || !sampled)
		return false;
	note_task(h, sk, role);
	return true;
}

static __always_inline int sendmsg_body(const struct sock *sk, const struct msghdr *msg,
					const struct sk_buff *skb, int size_goal, bool btf)
{
	const struct tcp_sock *tp = tcp_sk_of(sk, btf);
	struct tt_hdr h = {};

	if (!tp)
		return 0;
	__u32 write_seq = RD(btf, tp, write_seq);
	__u32 msg_left = RD(btf, msg, msg_iter.count);

	bool sampled = sendmsg_sampled(write_seq, msg_left, size_goal);

	if (!socket_call_kept(&h, sk, sampled, btf, btf, TT_TASK_WRITER))
		return 0;
	h.skb = (unsigned long)skb;
	EMIT_BEGIN(ev, sendmsg, &h, TT_KIND_SENDMSG);
	ev->body.write_seq = write_seq;
	ev->body.skb_len = skb ? RD(btf, skb, len) : 0;
	ev->body.msg_left = msg_left;
	ev->body.size_goal = size_goal;
	ev->body.snd_una = RD(btf, tp, snd_una);
	ev->body.snd_nxt = RD(btf, tp, snd_nxt);
	ev->body.sk_wmem_queued = RD(btf, sk, sk_wmem_queued);
	ev->body.sk_sndbuf = RD(btf, sk, sk_sndbuf);
	ev->body.snd_cwnd = RD(btf, tp, snd_cwnd);
	ev->body.snd_wnd = RD(btf, tp, snd_wnd);
	ev->body.mss_cache = RD(btf, tp, mss_cache);
	ev->body.packets_out = RD(btf, tp, packets_out);
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(sendmsg, tcp_sendmsg_locked, sendmsg_body(sk, msg, skb, size_goal, btf),
	    struct sock *sk, struct msghdr *msg, struct sk_buff *skb, int size_goal)

/* The function runs once per call, not per copy iteration: no skb, no goal. */
SEC("fentry/tcp_sendmsg_locked")
int BPF_PROG(sendmsg_fentry, struct sock *sk, struct msghdr *msg)
{
	return sendmsg_body(sk, msg, NULL, 0, true);
}

SEC("kprobe/tcp_sendmsg_locked")
int BPF_KPROBE(sendmsg_kprobe, struct sock *sk, struct msghdr *msg)
{
	return sendmsg_body(sk, msg, NULL, 0, false);
}

/* ---- socket events ------------------------------------------------------- */

static __always_inline void data_ready_fill(struct tt_ev_data_ready *ev, const struct tt_hdr *h,
					    const struct sock *sk, __u32 rcv_nxt, __u32 copied_seq,
					    bool btf)
{
	stamp(&ev->hdr, h, TT_KIND_DATA_READY);
	ev->body.rcv_nxt = rcv_nxt;
	ev->body.copied_seq = copied_seq;
	ev->body.sk_rmem_alloc = RD(btf, sk, sk_backlog.rmem_alloc.counter);
	ev->body.sk_rcvbuf = RD(btf, sk, sk_rcvbuf);
}

/*
 * Whether the socket's owner handles the segment from its backlog
 * (release_sock): task context with softirqs on, so a softirq on this CPU
 * may end or start the CPU's RX journey between any two instructions. The
 * owner's hops go alone and leave the journey be; softirq TCP never runs
 * on an owned socket (it queues the segment to the backlog).
 */
static __always_inline bool owner_context(const struct sock *sk, bool btf)
{
	return RD(btf, sk, sk_lock.owned) != 0;
}

/*
 * The CPU's RX journey if tcp_probe just took its skb into `sk`; else what
 * it holds is sent, and NULL.
 */
static __always_inline struct rx_journey *rx_journey_ready(const struct sock *sk)
{
	struct rx_journey *j = journey_state(&rx_journeys);

	if (!j || !j->skb)
		return NULL;
	if (j->wanted && j->sk == (unsigned long)sk && j->rec.tcp.hdr.kind &&
	    !j->rec.ready.hdr.kind)
		return j;
	rx_flush(j);
	return NULL;
}

static __always_inline int data_ready_body(const struct sock *sk, bool btf)
{
	const struct tcp_sock *tp = tcp_sk_of(sk, btf);
	struct tt_hdr h = {};

	if (!is_tcp(sk, btf) || !tp)
		return 0;
	__u32 rcv_nxt = RD(btf, tp, rcv_nxt);
	__u32 copied_seq = RD(btf, tp, copied_seq);
	struct rx_journey *j = owner_context(sk, btf) ? NULL : rx_journey_ready(sk);

	/*
	 * All the unread bytes: a superset of those that just became readable
	 * (rcv_nxt before this skb is not known here), whatever the skb held.
	 */
	bool kept = sampled_range(copied_seq, rcv_nxt) && sock_flow(&h, sk, btf, btf, false);

	if (j) {
		/* The journey goes on to the end of the poll. */
		if (kept)
			data_ready_fill(&j->rec.ready, &h, sk, rcv_nxt, copied_seq, btf);
		return 0;
	}
	if (!kept)
		return 0;
	RESERVE(ev, data_ready, TT_KIND_DATA_READY);

	if (!ev)
		return 0;
	data_ready_fill(ev, &h, sk, rcv_nxt, copied_seq, btf);
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(data_ready, sk_data_ready, data_ready_body(sk, btf), struct sock *sk)
TRACEPOINT(data_ready, sock, sk_data_ready, trace_event_raw_sk_data_ready,
	   data_ready_body(ctx->skaddr, btf))

/* Before 6.3: the function the tracepoint sits in (TCP's sk_data_ready). */
SEC("fentry/sock_def_readable")
int BPF_PROG(data_ready_fentry, struct sock *sk)
{
	return data_ready_body(sk, true);
}

SEC("kprobe/sock_def_readable")
int BPF_KPROBE(data_ready_kprobe, struct sock *sk)
{
	return data_ready_body(sk, false);
}

static __always_inline int app_read_body(const struct sock *sk, int ret, bool btf)
{
	const struct tcp_sock *tp = tcp_sk_of(sk, btf);
	struct tt_hdr h = {};

	if (!is_tcp(sk, btf) || !tp)
		return 0;
	__u32 copied_seq = RD(btf, tp, copied_seq);

	/* The bytes returned end at copied_seq; a read of none has no key. */
	if (!sampled_range(copied_seq - (ret > 0 ? ret : 0), copied_seq) ||
	    !sock_flow(&h, sk, btf, btf, false))
		return 0;
	EMIT_BEGIN(ev, app_read, &h, TT_KIND_APP_READ);
	ev->body.ret = ret;
	ev->body.copied_seq = copied_seq;
	ev->body.rcv_nxt = RD(btf, tp, rcv_nxt);
	ev->body.sk_rmem_alloc = RD(btf, sk, sk_backlog.rmem_alloc.counter);
	ev->body.sk_rcvbuf = RD(btf, sk, sk_rcvbuf);
	ev->body.rcv_wnd = RD(btf, tp, rcv_wnd);
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(app_read, sock_recv_length, app_read_body(sk, ret, btf), struct sock *sk, int ret,
	    int flags)
TRACEPOINT(app_read, sock, sock_recv_length, trace_event_raw_sock_msg_length,
	   app_read_body(ctx->sk, ctx->ret, btf))

/*
 * Before 6.3: TCP's recvmsg returning (the tracepoint's sock_recvmsg is
 * inlined). A kretprobe would not see the socket: no kprobe flavour.
 */
SEC("fexit/tcp_recvmsg")
int BPF_PROG(app_read_fentry, struct sock *sk, struct msghdr *msg, size_t len, int flags,
	     int *addr_len, int ret)
{
	return app_read_body(sk, ret, true);
}

/*
 * Sockets a port or address filter kept, by cookie: their last transitions
 * come with the ports already zeroed (the local port is released before
 * LAST_ACK -> CLOSE), and the collector needs the CLOSE to retire them.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u8);
} kept_socks SEC(".maps");

/* Whether a state event passes the filters, following kept sockets by cookie. */
static __always_inline bool state_wanted(const struct tt_hdr *h, int newstate)
{
	bool kept = port_wanted(h) && addr_wanted(h) && netns_wanted(h) && task_wanted(h);
	__u64 cookie = h->sock_cookie;
	__u8 yes = 1;

	if (!(filter_port || filter_addr_set || filter_task) || !cookie)
		return kept;
	if (kept)
		bpf_map_update_elem(&kept_socks, &cookie, &yes, BPF_ANY);
	else
		kept = netns_wanted(h) && bpf_map_lookup_elem(&kept_socks, &cookie);
	if (newstate == TCP_STATE_CLOSE)
		bpf_map_delete_elem(&kept_socks, &cookie);
	return kept;
}

/* Never sampled: rare, and the flow table needs every transition. */
static __always_inline int state_body(const struct sock *sk, int oldstate, int newstate, bool btf)
{
	const struct tcp_sock *tp = tcp_sk_of(sk, btf);
	struct tt_hdr h = {};

	if (!is_tcp(sk, btf))
		return 0;
	if (newstate == TCP_STATE_CLOSE) {
		__u64 key = (unsigned long)sk;

		bpf_map_delete_elem(&sock_tasks, &key);
	}
	h.sport = RD(btf, sk, __sk_common.skc_num);
	h.dport = bpf_ntohs(RD(btf, sk, __sk_common.skc_dport));
	sock_addrs(&h, sk, btf);
	h.netns = RD(btf, sk, __sk_common.skc_net.net, ns.inum);
	h.sock_cookie = sock_cookie(sk, btf, btf);
	if (!state_wanted(&h, newstate))
		return 0;
	EMIT_BEGIN(ev, state, &h, TT_KIND_STATE);
	ev->body.oldstate = oldstate;
	ev->body.newstate = newstate;
	/* Every TCP socket has them; a BTF tp is NULL for mini-sockets only. */
	if (tp) {
		ev->body.advmss = RD(btf, tp, advmss);
		ev->body.mss_cache = RD(btf, tp, mss_cache);
	}
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(state, inet_sock_set_state, state_body(sk, oldstate, newstate, btf), struct sock *sk,
	    int oldstate, int newstate)
TRACEPOINT(state, sock, inet_sock_set_state, trace_event_raw_inet_sock_set_state,
	   state_body(ctx->skaddr, ctx->oldstate, ctx->newstate, btf))

/* ---- tcp_rcv: tcp:tcp_probe ---------------------------------------------- */

static __always_inline void tcp_rcv_fill(struct tt_ev_tcp_rcv *ev, const struct tt_hdr *h,
					 const struct sock *sk, const struct tcp_sock *tp,
					 const struct sk_buff *skb, const __u8 th[20], __u32 seq,
					 __u32 end_seq, __u32 ack, bool owned, bool btf)
{
	struct tt_tcp_rcv *b = &ev->body;
	__u16 win;

	stamp(&ev->hdr, h, TT_KIND_TCP_RCV);
	__builtin_memcpy(&win, th + 14, 2);
	b->seq = seq;
	b->end_seq = end_seq;
	b->ack = ack;
	b->len = RD(btf, skb, len) - (th[12] >> 4) * 4;
	b->win_raw = bpf_ntohs(win);
	b->tcp_flags = th[13];
	b->snd_wscale = RD_BITFIELD(btf, tp, rx_opt.snd_wscale);
	b->snd_una = RD(btf, tp, snd_una);
	b->snd_nxt = RD(btf, tp, snd_nxt);
	b->snd_wnd = RD(btf, tp, snd_wnd);
	b->snd_cwnd = RD(btf, tp, snd_cwnd);
	b->snd_ssthresh = RD(btf, tp, snd_ssthresh);
	b->mss_cache = RD(btf, tp, mss_cache);
	b->packets_out = RD(btf, tp, packets_out);
	b->sacked_out = RD(btf, tp, sacked_out);
	b->lost_out = RD(btf, tp, lost_out);
	b->retrans_out = RD(btf, tp, retrans_out);
	b->srtt_us = RD(btf, tp, srtt_us) >> 3;
	b->write_seq = RD(btf, tp, write_seq);
	b->rcv_nxt = RD(btf, tp, rcv_nxt);
	b->rcv_mss = RD(btf, tp, inet_conn.icsk_ack.rcv_mss);
	b->sk_wmem_queued = RD(btf, sk, sk_wmem_queued);
	b->sk_sndbuf = RD(btf, sk, sk_sndbuf);
	b->chrono_start = RD(btf, tp, chrono_start);
	RD_INTO(btf, &b->chrono_stat, tp, chrono_stat);
	b->jiffies = bpf_jiffies64();
	/* a 2-bit bitfield before 6.14, a u8 since */
	b->chrono_type = RD_BITFIELD(btf, tp, chrono_type);
	b->backlog = owned;
	b->ca_state = RD_BITFIELD(btf, &tp->inet_conn, icsk_ca_state);
	b->nonagle = RD_BITFIELD(btf, tp, nonagle);
}

/*
 * The CPU's RX journey if it holds `skb` as netif_receive_skb left it; else
 * what it holds is sent, and NULL.
 */
static __always_inline struct rx_journey *rx_journey_at_tcp(const struct sk_buff *skb)
{
	struct rx_journey *j = journey_state(&rx_journeys);

	if (!j || !j->skb)
		return NULL;
	if (j->skb == (unsigned long)skb && !j->rec.tcp.hdr.kind)
		return j;
	rx_flush(j);
	return NULL;
}

static __always_inline int tcp_rcv_body(const struct sock *sk, const struct sk_buff *skb, bool btf)
{
	const struct tcp_sock *tp = tcp_sk_of(sk, btf);
	const struct tcp_skb_cb *cb = tcp_cb(skb);
	bool owned = owner_context(sk, btf);
	struct rx_journey *j = owned ? NULL : rx_journey_at_tcp(skb);
	struct tt_hdr h = {};
	__u8 th[20];

	if (j && !j->wanted) {
		j->skb = 0;
		return 0;
	}
	if (!tp)
		goto out;
	__u32 seq = RD(btf, cb, seq);
	__u32 end_seq = RD(btf, cb, end_seq);
	__u32 ack = RD(btf, cb, ack_seq);
	/* __u16 since 6.14, __u8 before: read at the running kernel's size */
	__u8 flags = RD_BITFIELD(btf, cb, tcp_flags);
	/* end_seq counts SYN and FIN; the payload ends before them. */
	__u32 len = end_seq - seq - !!(flags & TCP_FLAG_SYN) - !!(flags & TCP_FLAG_FIN);

	/*
	 * A merged skb (GRO, backlog coalescing) is kept if any packet in it
	 * is; a journey's skb was kept on the same bytes at netif_receive_skb.
	 */
	if ((!j && !sampled_segment(seq, len, ack, flags)) || !sock_flow(&h, sk, btf, btf, false))
		goto out;
	/* tcp_rcv_established(): skb->data is the TCP header */
	if (bpf_probe_read_kernel(th, sizeof(th), RD(btf, skb, data)))
		goto out;
	h.skb = (unsigned long)skb;
	if (j) {
		tcp_rcv_fill(&j->rec.tcp, &h, sk, tp, skb, th, seq, end_seq, ack, owned, btf);
		j->sk = (unsigned long)sk;
		return 0;
	}
	RESERVE(ev, tcp_rcv, TT_KIND_TCP_RCV);

	if (!ev)
		return 0;
	tcp_rcv_fill(ev, &h, sk, tp, skb, th, seq, end_seq, ack, owned, btf);
	SUBMIT(ev);
	return 0;
out:
	if (j)
		rx_flush(j);
	return 0;
}

BTF_AND_RAW(tcp_rcv, tcp_probe, tcp_rcv_body(sk, skb, btf), struct sock *sk, struct sk_buff *skb)
TRACEPOINT(tcp_rcv, tcp, tcp_probe, trace_event_raw_tcp_probe,
	   tcp_rcv_body(ctx->skaddr, ctx->skbaddr, btf))

SEC("fentry/tcp_rcv_established")
int BPF_PROG(tcp_rcv_fentry, struct sock *sk, struct sk_buff *skb)
{
	return tcp_rcv_body(sk, skb, true);
}

SEC("kprobe/tcp_rcv_established")
int BPF_KPROBE(tcp_rcv_kprobe, struct sock *sk, struct sk_buff *skb)
{
	return tcp_rcv_body(sk, skb, false);
}

/* ---- copy_datagram, retransmit: skb events of a TCP socket --------------- */

static __always_inline int copy_datagram_body(const struct sk_buff *skb, int len, bool btf)
{
	const struct tcp_skb_cb *cb = tcp_cb(skb);
	const struct sock *sk = RD(btf, skb, sk);
	struct tt_hdr h = {};

	if (!is_tcp(sk, btf))
		return 0;
	__u32 seq = RD(btf, cb, seq);
	__u32 end_seq = RD(btf, cb, end_seq);

	/* The whole skb, even when only part of it is copied now. */
	bool sampled = sampled_range(seq, end_seq);

	if (!socket_call_kept(&h, sk, sampled, btf, false, TT_TASK_READER))
		return 0;
	h.skb = (unsigned long)skb;
	EMIT_BEGIN(ev, copy_datagram, &h, TT_KIND_COPY_DATAGRAM);
	ev->body.seq = seq;
	ev->body.end_seq = end_seq;
	ev->body.len = len;
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(copy_datagram, skb_copy_datagram_iovec, copy_datagram_body(skb, len, btf),
	    struct sk_buff *skb, int len)
TRACEPOINT(copy_datagram, skb, skb_copy_datagram_iovec, trace_event_raw_skb_copy_datagram_iovec,
	   copy_datagram_body(ctx->skbaddr, ctx->len, btf))

static __always_inline int retransmit_body(const struct sock *sk, const struct sk_buff *skb,
					   int err, bool btf)
{
	const struct tcp_skb_cb *cb = tcp_cb(skb);
	struct tt_hdr h = {};

	if (!sock_flow(&h, sk, btf, btf, false))
		return 0;
	h.skb = (unsigned long)skb;
	EMIT_BEGIN(ev, retransmit, &h, TT_KIND_RETRANSMIT);
	ev->body.seq = RD(btf, cb, seq);
	ev->body.end_seq = RD(btf, cb, end_seq);
	ev->body.err = err;
	ev->body.state = RD(btf, sk, __sk_common.skc_state);
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(retransmit, tcp_retransmit_skb, retransmit_body(sk, skb, err, btf), struct sock *sk,
	    struct sk_buff *skb, int err)
TRACEPOINT(retransmit, tcp, tcp_retransmit_skb, trace_event_raw_tcp_retransmit_skb,
	   retransmit_body(ctx->skaddr, ctx->skbaddr, ctx->err, btf))
/* Before 6.14 the tracepoint had no err (and its own event class). */
BTF_AND_RAW_VARIANT(retransmit, tcp_retransmit_skb, retransmit_body(sk, skb, 0, btf), __no_err,
		    struct sock *sk, struct sk_buff *skb)
TRACEPOINT(retransmit, tcp, tcp_retransmit_skb, trace_event_raw_tcp_event_sk_skb___old,
	   retransmit_body(ctx->skaddr, ctx->skbaddr, 0, btf), __no_err)

/* ---- window_adv: net:net_dev_queue --------------------------------------- */

/* The tcp_sock fields window_adv reports, for the span copied in one read. */
#define WINDOW_ADV_TCP_FIELDS(X)                                                                   \
	X(window_clamp)                                                                            \
	X(rcv_ssthresh)                                                                            \
	X(inet_conn.icsk_ack.rcv_mss)                                                              \
	X(rcv_wnd)                                                                                 \
	X(rcv_nxt)                                                                                 \
	X(rcv_wup)                                                                                 \
	X(copied_seq)                                                                              \
	X(advmss)                                                                                  \
	X(inet_conn.icsk_ack.pending)                                                              \
	X(snd_una)                                                                                 \
	X(snd_nxt)                                                                                 \
	X(snd_wnd)                                                                                 \
	X(snd_cwnd)                                                                                \
	X(mss_cache)                                                                               \
	X(packets_out)                                                                             \
	X(write_seq)                                                                               \
	X(inet_conn.icsk_probes_out)                                                               \
	X(inet_conn.icsk_backoff)                                                                  \
	X(rx_opt)

#define TCP_SPAN_MAX 1024

/* Room past TCP_SPAN_MAX for the widest field read at a masked index. */
struct tcp_span {
	__u8 bytes[TCP_SPAN_MAX + 32];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tcp_span);
} tcp_span SEC(".maps");

/*
 * Copies the bytes of `tp` from the first to the last field of
 * WINDOW_ADV_TCP_FIELDS; `*start` is the offset of the copy in tcp_sock.
 * Offsets are CO-RE constants, so the verifier knows them all and checks
 * every SPAN_FIELD against the buffer. NULL if the copy fails or the span
 * outgrew TCP_SPAN_MAX.
 */
static __always_inline struct tcp_span *tcp_span_copy(const struct tcp_sock *tp, __u32 *start)
{
	__u32 zero = 0, lo = ~0U, hi = 0;
	struct tcp_span *span = bpf_map_lookup_elem(&tcp_span, &zero);

#define SPAN_BOUNDS(field)                                                                         \
	{                                                                                          \
		__u32 off = bpf_core_field_offset(struct tcp_sock, field);                         \
		__u32 end = off + bpf_core_field_size(struct tcp_sock, field);                     \
		lo = off < lo ? off : lo;                                                          \
		hi = end > hi ? end : hi;                                                          \
	}
	WINDOW_ADV_TCP_FIELDS(SPAN_BOUNDS)
	/* 6.7+; tcp_win_from_space() uses sysctl_tcp_adv_win_scale before */
	if (bpf_core_field_exists(struct tcp_sock, scaling_ratio))
		SPAN_BOUNDS(scaling_ratio)
#undef SPAN_BOUNDS
	if (!span || hi - lo > TCP_SPAN_MAX)
		return NULL;
	*start = lo;
	if (bpf_probe_read_kernel(span->bytes, hi - lo, (const void *)tp + lo))
		return NULL;
	return span;
}

/*
 * Where `field` (at `offset` in tcp_sock) lies in a span copied from `start`.
 * The mask bounds the index for every verifier: older ones lose the exact
 * offsets when the span's bounds are compared (the copy is at most
 * TCP_SPAN_MAX, so the mask changes nothing).
 */
#define SPAN_AT(span, start, offset) ((span)->bytes + (((offset) - (start)) & (TCP_SPAN_MAX - 1)))

/* One field of a copied span, by its name in struct tcp_sock. */
#define SPAN_FIELD(span, start, field)                                                             \
	(*(typeof(((struct tcp_sock *)0)->field) *)SPAN_AT(                                        \
	    span, start, bpf_core_field_offset(struct tcp_sock, field)))

/* A bitfield of a copied span (BPF_CORE_READ_BITFIELD on the copy). */
#define SPAN_BITFIELD(span, start, field)                                                          \
	({                                                                                         \
		const void *p =                                                                    \
		    SPAN_AT(span, start, __CORE_RELO((struct tcp_sock *)0, field, BYTE_OFFSET));   \
		__u64 val = 0;                                                                     \
		switch (__CORE_RELO((struct tcp_sock *)0, field, BYTE_SIZE)) {                     \
		case 1:                                                                            \
			val = *(const __u8 *)p;                                                    \
			break;                                                                     \
		case 2:                                                                            \
			val = *(const __u16 *)p;                                                   \
			break;                                                                     \
		case 4:                                                                            \
			val = *(const __u32 *)p;                                                   \
			break;                                                                     \
		case 8:                                                                            \
			val = *(const __u64 *)p;                                                   \
			break;                                                                     \
		}                                                                                  \
		val <<= __CORE_RELO((struct tcp_sock *)0, field, LSHIFT_U64);                      \
		val >>= __CORE_RELO((struct tcp_sock *)0, field, RSHIFT_U64);                      \
		val;                                                                               \
	})

static __always_inline void window_adv_fill(struct tt_ev_window_adv *ev, const struct tt_hdr *h,
					    const struct tcp_pkt *p, const struct sk_buff *skb,
					    const struct sock *sk, const struct tcp_span *span,
					    __u32 start, bool btf)
{
	struct tt_window_adv *b = &ev->body;
	struct gso_info gso = gso_of(skb, btf);
	__u8 wscale = SPAN_BITFIELD(span, start, rx_opt.rcv_wscale);

	stamp(&ev->hdr, h, TT_KIND_WINDOW_ADV);
	b->seq = p->seq;
	b->ack = p->ack;
	b->len = p->len;
	b->win_raw = p->win_raw;
	b->tcp_flags = p->flags;
	b->rcv_wscale = wscale;
	/* RFC 7323: the window of a SYN segment is never scaled */
	b->window = p->flags & TCP_FLAG_SYN ? p->win_raw : (__u32)p->win_raw << wscale;
	b->gso_segs = gso.segs;
	b->gso_size = gso.size;
	b->sk_rcvbuf = RD(btf, sk, sk_rcvbuf);
	b->sk_rmem_alloc = RD(btf, sk, sk_backlog.rmem_alloc.counter);
	b->sk_backlog_len = RD(btf, sk, sk_backlog.len);
	b->window_clamp = SPAN_FIELD(span, start, window_clamp);
	b->rcv_ssthresh = SPAN_FIELD(span, start, rcv_ssthresh);
	b->rcv_mss = SPAN_FIELD(span, start, inet_conn.icsk_ack.rcv_mss);
	b->rcv_wnd = SPAN_FIELD(span, start, rcv_wnd);
	b->rcv_nxt = SPAN_FIELD(span, start, rcv_nxt);
	b->rcv_wup = SPAN_FIELD(span, start, rcv_wup);
	b->copied_seq = SPAN_FIELD(span, start, copied_seq);
	b->advmss = SPAN_FIELD(span, start, advmss);
	b->scaling_ratio = 0;
	b->adv_win_scale = 0;
	if (bpf_core_field_exists(struct tcp_sock, scaling_ratio))
		b->scaling_ratio = SPAN_FIELD(span, start, scaling_ratio);
	else if (bpf_core_field_exists(struct netns_ipv4, sysctl_tcp_adv_win_scale))
		b->adv_win_scale =
		    RD(btf, sk, __sk_common.skc_net.net, ipv4.sysctl_tcp_adv_win_scale);
	b->ack_pending = SPAN_FIELD(span, start, inet_conn.icsk_ack.pending);
	b->snd_una = SPAN_FIELD(span, start, snd_una);
	b->snd_nxt = SPAN_FIELD(span, start, snd_nxt);
	b->snd_wnd = SPAN_FIELD(span, start, snd_wnd);
	b->snd_cwnd = SPAN_FIELD(span, start, snd_cwnd);
	b->mss_cache = SPAN_FIELD(span, start, mss_cache);
	b->packets_out = SPAN_FIELD(span, start, packets_out);
	b->write_seq = SPAN_FIELD(span, start, write_seq);
	b->icsk_probes_out = SPAN_FIELD(span, start, inet_conn.icsk_probes_out);
	b->icsk_backoff = SPAN_FIELD(span, start, inet_conn.icsk_backoff);
	b->tcp_shrink_window = 0;
	if (bpf_core_field_exists(struct netns_ipv4, sysctl_tcp_shrink_window))
		b->tcp_shrink_window =
		    RD(btf, sk, __sk_common.skc_net.net, ipv4.sysctl_tcp_shrink_window);
}

/* Starts `skb`'s TX journey; `wanted`: its hops are to be recorded. */
static __always_inline void tx_begin(struct tx_journey *j, const struct sk_buff *skb, bool wanted,
				     bool btf)
{
	j->skb = (unsigned long)skb;
	j->skb_len = RD(btf, skb, len);
	j->wanted = wanted;
	j->rec.hdr.kind = TT_KIND_JOURNEY;
	j->rec.hdr.variant = TT_JOURNEY_TX;
	j->rec.start_xmit.hdr.kind = 0;
	j->rec.xmit.hdr.kind = 0;
}

/*
 * Runs synchronously after tcp_select_window() chose this segment's window,
 * so the socket state read here is what the window was computed from. It
 * starts the segment's TX journey; a segment the filters drop here is
 * dropped at start_xmit and xmit alike, which learn it from the journey. A
 * segment of a mini-socket has no window_adv but its device events: those
 * hooks parse it themselves.
 */
static __always_inline int window_adv_body(const struct sk_buff *skb, bool btf)
{
	struct tx_journey *j = journey_state(&tx_journeys);
	const struct sock *sk = RD(btf, skb, sk);
	struct tt_hdr h = {};
	struct tcp_pkt p;

	if (j)
		tx_flush(j);
	if (!is_tcp_fullsock(sk, btf))
		return 0;
	if (!parse_nh(&h, &p, skb, true, btf) || !port_wanted(&h) || !addr_wanted(&h) ||
	    !sampled_segment(p.seq, p.len, p.ack, p.flags))
		goto unwanted;
	h.netns = RD(btf, sk, __sk_common.skc_net.net, ns.inum);
	if (!netns_wanted(&h) || !task_wanted(&h))
		goto unwanted;
	h.sock_cookie = sock_cookie(sk, btf, false);
	h.skb = (unsigned long)skb;

	/*
	 * skb->sk is an RCU pointer, which bpf_skc_to_tcp_sock refuses, so even
	 * tp_btf cannot load tcp_sock fields past struct sock: copy the span
	 * they live in with one probe read (~0.5 KiB) instead of one per field.
	 */
	__u32 start;
	struct tcp_span *span = tcp_span_copy((const void *)sk, &start);

	if (!span)
		return 0;
	if (j) {
		tx_begin(j, skb, true, btf);
		window_adv_fill(&j->rec.queue, &h, &p, skb, sk, span, start, btf);
		return 0;
	}
	RESERVE(ev, window_adv, TT_KIND_WINDOW_ADV);

	if (!ev)
		return 0;
	window_adv_fill(ev, &h, &p, skb, sk, span, start, btf);
	SUBMIT(ev);
	return 0;
unwanted:
	if (j)
		tx_begin(j, skb, false, btf);
	return 0;
}

BTF_AND_RAW(window_adv, net_dev_queue, window_adv_body(skb, btf), struct sk_buff *skb)
TRACEPOINT(window_adv, net, net_dev_queue, trace_event_raw_net_dev_template,
	   window_adv_body(ctx->skbaddr, btf))

SEC("fentry/__dev_queue_xmit")
int BPF_PROG(window_adv_fentry, struct sk_buff *skb)
{
	return window_adv_body(skb, true);
}

SEC("kprobe/__dev_queue_xmit")
int BPF_KPROBE(window_adv_kprobe, struct sk_buff *skb)
{
	return window_adv_body(skb, false);
}

/* ---- device layer: packets parsed from their headers --------------------- */

/* Filter, sample and fill the header of a packet event; false to skip it. */
static __always_inline bool pkt_wanted(struct tt_hdr *h, const struct tcp_pkt *p,
				       const struct sk_buff *skb, bool btf)
{
	if (!port_wanted(h) || !addr_wanted(h))
		return false;
	/* A GRO-merged skb is kept if any packet in it is. */
	if (!sampled_segment(p->seq, p->len, p->ack, p->flags))
		return false;
	h->netns = RD(btf, skb, dev, nd_net.net, ns.inum);
	if (!netns_wanted(h) || !task_wanted(h))
		return false;
	/* Usually 0 on receive: the socket is looked up later. */
	const struct sock *sk = RD(btf, skb, sk);

	h->sock_cookie = sk ? RD(btf, sk, __sk_common.skc_cookie.counter) : 0;
	h->skb = (unsigned long)skb;
	return true;
}

/*
 * net_dev_xmit runs after the driver may have freed the skb, so it cannot
 * parse it: net_dev_start_xmit leaves its event here, per CPU, and
 * net_dev_xmit repeats it when the skb is the same. An skb the filter
 * dropped at start_xmit thus stays dropped at xmit.
 */
struct xmit_stash {
	__u64 skb;
	struct tt_ev_pkt ev;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xmit_stash);
} xmit_stash SEC(".maps");

/*
 * The CPU's TX journey if it holds `skb` with hop `hop` (start_xmit or xmit)
 * still to come; else what it holds is sent, and NULL. At xmit the skb may
 * be freed: only its address is compared.
 */
static __always_inline struct tx_journey *tx_journey_at(const struct sk_buff *skb, __u8 hop,
							bool btf)
{
	struct tx_journey *j = journey_state(&tx_journeys);

	if (!j || !j->skb)
		return NULL;
	if (j->skb == (unsigned long)skb) {
		if (!j->wanted)
			return j;
		if (hop == TT_KIND_DEV_START_XMIT && !j->rec.start_xmit.hdr.kind &&
		    j->skb_len == RD(btf, skb, len))
			return j;
		if (hop == TT_KIND_DEV_XMIT && j->rec.start_xmit.hdr.kind)
			return j;
	}
	tx_flush(j);
	return NULL;
}

/* start_xmit's record from the segment's window_adv: the same headers. */
static __always_inline void start_xmit_from_queue(struct tt_ev_pkt *ev,
						  const struct tt_ev_window_adv *queue,
						  const struct sk_buff *skb, bool btf)
{
	struct tt_pkt *b = &ev->body;

	stamp(&ev->hdr, &queue->hdr, TT_KIND_DEV_START_XMIT);
	b->seq = queue->body.seq;
	b->ack = queue->body.ack;
	b->len = queue->body.len;
	b->skb_len = RD(btf, skb, len);
	b->gso_segs = queue->body.gso_segs;
	b->gso_size = queue->body.gso_size;
	b->win_raw = queue->body.win_raw;
	b->tcp_flags = queue->body.tcp_flags;
	b->_pad0 = 0;
	b->ifindex = RD(btf, skb, dev, ifindex);
	b->rc = 0;
}

static __always_inline int dev_start_xmit_body(const struct sk_buff *skb, bool btf)
{
	struct tx_journey *j = tx_journey_at(skb, TT_KIND_DEV_START_XMIT, btf);
	__u32 zero = 0;
	struct xmit_stash *stash = bpf_map_lookup_elem(&xmit_stash, &zero);
	struct tt_hdr h = {};
	struct tcp_pkt p;

	if (j) {
		if (j->wanted)
			start_xmit_from_queue(&j->rec.start_xmit, &j->rec.queue, skb, btf);
		return 0;
	}
	if (!stash || !parse_nh(&h, &p, skb, true, btf) || !pkt_wanted(&h, &p, skb, btf))
		return 0;
	EMIT_BEGIN(ev, pkt, &h, TT_KIND_DEV_START_XMIT);
	pkt_body(&ev->body, &p, skb, btf);
	stash->skb = (unsigned long)skb;
	stash->ev = *ev;
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(dev_start_xmit, net_dev_start_xmit, dev_start_xmit_body(skb, btf), struct sk_buff *skb)
TRACEPOINT(dev_start_xmit, net, net_dev_start_xmit, trace_event_raw_net_dev_start_xmit,
	   dev_start_xmit_body(ctx->skbaddr, btf))

static __always_inline int dev_xmit_body(const struct sk_buff *skb, int rc)
{
	struct tx_journey *j = tx_journey_at(skb, TT_KIND_DEV_XMIT, false);
	__u32 zero = 0;
	struct xmit_stash *stash = bpf_map_lookup_elem(&xmit_stash, &zero);

	if (j) {
		if (j->wanted) {
			j->rec.xmit = j->rec.start_xmit;
			stamp(&j->rec.xmit.hdr, &j->rec.start_xmit.hdr, TT_KIND_DEV_XMIT);
			j->rec.xmit.body.rc = rc;
		}
		tx_flush(j);
		return 0;
	}
	if (!stash || stash->skb != (unsigned long)skb)
		return 0;
	stash->skb = 0;
	EMIT_BEGIN(ev, pkt, &stash->ev.hdr, TT_KIND_DEV_XMIT);
	ev->body = stash->ev.body;
	ev->body.rc = rc;
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(dev_xmit, net_dev_xmit, dev_xmit_body(skb, rc), struct sk_buff *skb, int rc)
TRACEPOINT(dev_xmit, net, net_dev_xmit, trace_event_raw_net_dev_xmit,
	   dev_xmit_body(ctx->skbaddr, ctx->rc))

/*
 * The driver entry points. On a journey the record waits in the CPU's slot
 * for the skb's netif_receive_skb, with what the filters decided.
 */
static __always_inline int rx_entry_body(const struct sk_buff *skb, __u8 variant, bool btf)
{
	struct rx_entries *e = journey_state(&rx_entries);
	struct tt_hdr h = {};
	struct tcp_pkt p = {}; /* read only when parsed; set for the verifier */
	bool wanted = parse_rx(&h, &p, skb, btf) && pkt_wanted(&h, &p, skb, btf);

	h.variant = variant;
	if (e) {
		struct rx_entry_slot *s = rx_slot(e, skb);

		rx_slot_flush(e, s);
		s->skb = (unsigned long)skb;
		s->skb_len = RD(btf, skb, len);
		s->wanted = wanted;
		e->held += 1;
		if (wanted) {
			stamp(&s->ev.hdr, &h, TT_KIND_RX_ENTRY);
			pkt_body(&s->ev.body, &p, skb, btf);
		}
		return 0;
	}
	if (!wanted)
		return 0;
	EMIT_BEGIN(ev, pkt, &h, TT_KIND_RX_ENTRY);
	pkt_body(&ev->body, &p, skb, btf);
	SUBMIT(ev);
	return 0;
}

#define RX_PROBE(name, tp, variant)                                                                \
	BTF_AND_RAW(name, tp, rx_entry_body(skb, variant, btf), struct sk_buff *skb)               \
	TRACEPOINT(name, net, tp, trace_event_raw_net_dev_rx_verbose_template,                     \
		   rx_entry_body(ctx->skbaddr, variant, btf))

RX_PROBE(rx_gro, napi_gro_receive_entry, TT_RX_GRO)
RX_PROBE(rx_netif_recv, netif_receive_skb_entry, TT_RX_NETIF_RECV)
RX_PROBE(rx_netif_rx, netif_rx_entry, TT_RX_NETIF_RX)

/*
 * Takes `skb`'s driver entry from its slot into the journey `j` starts when
 * the skb is unchanged and both are kept (else the entry goes alone); says
 * what the entry decided of an unchanged skb, or -1.
 */
static __always_inline int rx_take_entry(struct rx_journey *j, const struct sk_buff *skb, bool btf)
{
	struct rx_entries *e = journey_state(&rx_entries);
	int decided = -1;

	j->rec.entry.hdr.kind = 0;
	if (!e)
		return -1;
	struct rx_entry_slot *s = rx_slot(e, skb);

	if (s->skb != (unsigned long)skb)
		return -1;
	if (s->skb_len == RD(btf, skb, len)) {
		decided = s->wanted;
		if (s->wanted) {
			j->rec.entry = s->ev;
			s->wanted = 0; /* taken */
		}
	}
	rx_slot_flush(e, s);
	return decided;
}

/*
 * netif_receive_skb: past GRO and the backlog. Starts the skb's RX journey,
 * ending the one before; an unchanged skb keeps its entry's decision and
 * headers.
 */
static __always_inline int netif_receive_body(const struct sk_buff *skb, bool btf)
{
	struct rx_journey *j = journey_state(&rx_journeys);
	struct tt_hdr h = {};
	struct tcp_pkt p = {}; /* read only when parsed; set for the verifier */
	int decided = -1;

	if (j) {
		rx_flush(j);
		decided = rx_take_entry(j, skb, btf);
		j->skb = (unsigned long)skb;
		j->wanted = 0;
		if (!decided)
			return 0;
	}
	if (decided == 1) {
		const struct tt_ev_pkt *entry = &j->rec.entry;

		h = entry->hdr;
		h.variant = 0;
		p.seq = entry->body.seq;
		p.ack = entry->body.ack;
		p.len = entry->body.len;
		p.win_raw = entry->body.win_raw;
		p.flags = entry->body.tcp_flags;
		if (!pkt_wanted(&h, &p, skb, btf)) {
			send(&entry->hdr, sizeof(*entry));
			return 0;
		}
	} else if (!parse_rx(&h, &p, skb, btf) || !pkt_wanted(&h, &p, skb, btf)) {
		return 0;
	}
	if (j) {
		j->wanted = 1;
		j->sk = 0;
		j->rec.hdr.kind = TT_KIND_JOURNEY;
		j->rec.hdr.variant = TT_JOURNEY_RX;
		j->rec.tcp.hdr.kind = 0;
		j->rec.ready.hdr.kind = 0;
		j->rec.poll.hdr.kind = 0;
		j->rec.sent.queue.hdr.kind = 0;
		j->rec.sent.start_xmit.hdr.kind = 0;
		j->rec.sent.xmit.hdr.kind = 0;
		stamp(&j->rec.netif.hdr, &h, TT_KIND_NETIF_RECEIVE);
		pkt_body(&j->rec.netif.body, &p, skb, btf);
		return 0;
	}
	EMIT_BEGIN(ev, pkt, &h, TT_KIND_NETIF_RECEIVE);
	pkt_body(&ev->body, &p, skb, btf);
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(netif_receive, netif_receive_skb, netif_receive_body(skb, btf), struct sk_buff *skb)
TRACEPOINT(netif_receive, net, netif_receive_skb, trace_event_raw_net_dev_template,
	   netif_receive_body(ctx->skbaddr, btf))

/* Never sampled: the drop is the event. */
static __always_inline int kfree_skb_body(const struct sk_buff *skb, const void *location,
					  __u32 reason, const struct sock *rx_sk, bool btf)
{
	struct tt_hdr h = {};
	struct tcp_pkt p;

	flush_journeys_of(skb);
	if (!parse_nh(&h, &p, skb, false, btf) || !port_wanted(&h) || !addr_wanted(&h))
		return 0;
	const struct sock *sk = RD(btf, skb, sk) ?: rx_sk;

	h.netns = RD(btf, skb, dev, nd_net.net, ns.inum);
	if (!h.netns && sk)
		h.netns = RD(btf, sk, __sk_common.skc_net.net, ns.inum);
	if (!netns_wanted(&h) || !task_wanted(&h))
		return 0;
	if (sk)
		h.sock_cookie = RD(btf, sk, __sk_common.skc_cookie.counter);
	h.skb = (unsigned long)skb;
	EMIT_BEGIN(ev, kfree_skb, &h, TT_KIND_KFREE_SKB);
	ev->body.location = (unsigned long)location;
	ev->body.reason = reason;
	ev->body.protocol = bpf_ntohs(RD(btf, skb, protocol));
	ev->body.seq = p.seq;
	ev->body.ack = p.ack;
	ev->body.len = p.len;
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(kfree_skb, kfree_skb, kfree_skb_body(skb, location, reason, rx_sk, btf),
	    struct sk_buff *skb, void *location, enum skb_drop_reason reason, struct sock *rx_sk)
/* rx_sk is 6.12+ */
BTF_AND_RAW_VARIANT(kfree_skb, kfree_skb, kfree_skb_body(skb, location, reason, NULL, btf),
		    __no_rx_sk, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
TRACEPOINT(kfree_skb, skb, kfree_skb, trace_event_raw_kfree_skb,
	   kfree_skb_body(ctx->skbaddr, ctx->location, ctx->reason,
			  bpf_core_field_exists(ctx->rx_sk) ? ctx->rx_sk : NULL, btf))

/* ---- napi_poll: no skb, no flow; only the netns filter applies ----------- */

/* Polls seen on this CPU, for sampling them. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} napi_polls_seen SEC(".maps");

/*
 * A poll has no bytes to sample by: keep every N-th poll of each CPU. Polls
 * are most of what a sampled bulk transfer would send otherwise (one per
 * few packets), and their statistics are shares and counts the report
 * scales back by N.
 */
static __always_inline bool napi_poll_sampled(void)
{
	__u32 zero = 0;
	__u32 *seen;

	if (sample_every <= 1)
		return true;
	seen = bpf_map_lookup_elem(&napi_polls_seen, &zero);
	if (!seen)
		return false;
	*seen += 1;
	if (*seen < sample_every)
		return false;
	*seen = 0;
	return true;
}

static __always_inline void napi_poll_fill(struct tt_ev_napi_poll *ev, const struct tt_hdr *h,
					   const struct napi_struct *napi,
					   const struct net_device *dev, int work, int budget,
					   bool btf)
{
	stamp(&ev->hdr, h, TT_KIND_NAPI_POLL);
	ev->body.napi = (unsigned long)napi;
	ev->body.napi_id = RD(btf, napi, napi_id);
	ev->body.ifindex = RD(btf, dev, ifindex);
	ev->body.work = work;
	ev->body.budget = budget;
}

/*
 * The poll took its skbs as far as it goes: their journeys end, and the
 * last skb's carries the poll's record.
 */
static __always_inline int napi_poll_body(const struct napi_struct *napi, int work, int budget,
					  bool btf)
{
	struct rx_journey *j = journey_state(&rx_journeys);
	struct tt_hdr h = {};
	bool kept = napi_poll_sampled();
	const struct net_device *dev = RD(btf, napi, dev);

	h.netns = RD(btf, dev, nd_net.net, ns.inum);
	kept = kept && netns_wanted(&h);
	if (kept && j && j->skb && j->wanted) {
		napi_poll_fill(&j->rec.poll, &h, napi, dev, work, budget, btf);
		kept = false;
	}
	flush_journeys();
	if (!kept)
		return 0;
	RESERVE(ev, napi_poll, TT_KIND_NAPI_POLL);

	if (!ev)
		return 0;
	napi_poll_fill(ev, &h, napi, dev, work, budget, btf);
	SUBMIT(ev);
	return 0;
}

BTF_AND_RAW(napi_poll, napi_poll, napi_poll_body(napi, work, budget, btf), struct napi_struct *napi,
	    int work, int budget)
TRACEPOINT(napi_poll, napi, napi_poll, trace_event_raw_napi_poll,
	   napi_poll_body(ctx->napi, ctx->work, ctx->budget, btf))

/* ---- tt_batch_flush: the collector's, run on each CPU ---------------------- */

/*
 * The first hop of the oldest journey each CPU held open at the collector's
 * last flush there (0: none): records older than every open one and than the
 * flush are all in the ring once it is drained, so the collector holds them
 * for time order that long, not its fixed 50 ms.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tt_open_since SEC(".maps");

/* The older of two stamps, 0 being none; a stamp of 0 not yet written is as old as can be. */
static __always_inline __u64 older(__u64 oldest, __u64 ts_ns)
{
	ts_ns = ts_ns ?: 1;
	return oldest && oldest < ts_ns ? oldest : ts_ns;
}

/*
 * The first hop of the oldest journey this CPU holds that will be recorded
 * (0: none). Read in the IPI of a test run, which may interrupt a program
 * between setting a journey's skb and stamping its first hop: the stamp
 * then read is its predecessor's, older, so the hold only grows.
 */
static __always_inline __u64 oldest_open_journey(void)
{
	struct tx_journey *tx = journey_state(&tx_journeys);
	struct rx_journey *rx = journey_state(&rx_journeys);
	struct rx_entries *e = journey_state(&rx_entries);
	__u64 oldest = 0;

	if (tx && tx->skb && tx->wanted)
		oldest = older(oldest, tx->rec.queue.hdr.ts_ns);
	if (rx && rx->skb && rx->wanted)
		oldest = older(oldest, rx->rec.entry.hdr.kind ? rx->rec.entry.hdr.ts_ns
							      : rx->rec.netif.hdr.ts_ns);
	if (!e || !e->held)
		return oldest;
	for (int i = 0; i < RX_SLOTS; i++)
		if (e->slot[i].skb && e->slot[i].wanted)
			oldest = older(oldest, e->slot[i].ev.hdr.ts_ns);
	return oldest;
}

/*
 * Writes this CPU's batch to the ring, and notes its oldest open journey;
 * run by the collector on each CPU (BPF_PROG_TEST_RUN) before it drains.
 * Returns 1 when a program was writing the batch: that program writes it
 * when done.
 */
SEC("raw_tp")
int tt_batch_flush(void *ctx)
{
	__u32 zero = 0;
	struct batch *b = bpf_map_lookup_elem(&tt_batches, &zero);
	__u64 *open_since = bpf_map_lookup_elem(&tt_open_since, &zero);

	if (!b || !open_since)
		return 0;
	if (b->busy) {
		b->flush_asked = 1;
		return 1;
	}
	b->busy = 1;
	asm volatile("" ::: "memory");
	batch_flush(b);
	batch_release(b);
	*open_since = oldest_open_journey();
	return 0;
}

/* ---- cpu_sample: perf_event cpu-clock ------------------------------------ */

/*
 * Kernel and user stacks by id, in tables of their own: a stack whose slot
 * another stack holds is not stored (-EEXIST, counted by the collector), so
 * the two kinds do not crowd each other out. Sized from Rust (--stack-storage).
 */
#define STACK_TABLE(name)                                                                          \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                                            \
		__uint(max_entries, 16384); /* overridden from Rust */                             \
		__uint(key_size, sizeof(__u32));                                                   \
		__uint(value_size, 127 * sizeof(__u64)); /* PERF_MAX_STACK_DEPTH */                \
	} name SEC(".maps")

STACK_TABLE(tt_kstacks);
STACK_TABLE(tt_ustacks);

/* The name each sampled process was last sent with, by tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64[2]);
} sampled_names SEC(".maps");

/*
 * Names the process a sample caught (TT_TASK_ON_CPU) the first time, and
 * when it was renamed (exec): from the kernel, so right in any PID namespace
 * and after the process is gone. The leader's comm is the process's name.
 */
static __always_inline void note_sampled_task(const struct tt_hdr *h, __u64 pid_tgid)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tgid = pid_tgid >> 32;
	__u64 comm[2] = {}, *seen = bpf_map_lookup_elem(&sampled_names, &tgid);

	if (!tgid)
		return;
	BPF_CORE_READ_STR_INTO(&comm, task, group_leader, comm);
	if (seen && seen[0] == comm[0] && seen[1] == comm[1])
		return;
	RESERVE(ev, sock_task, TT_KIND_SOCK_TASK);

	if (!ev)
		return;
	bpf_map_update_elem(&sampled_names, &tgid, comm, BPF_ANY);
	stamp(&ev->hdr, h, TT_KIND_SOCK_TASK);
	ev->body.cgroup_id = bpf_get_current_cgroup_id();
	ev->body.pid = tgid;
	ev->body.tgid = tgid;
	__builtin_memcpy(ev->body.comm, comm, sizeof(ev->body.comm));
	ev->body.role = TT_TASK_ON_CPU;
	__builtin_memset(ev->body._pad0, 0, sizeof(ev->body._pad0));
	SUBMIT(ev);
}

SEC("perf_event")
int cpu_sample(struct bpf_perf_event_data *ctx)
{
	struct tt_hdr h = {};
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	note_sampled_task(&h, pid_tgid);
	EMIT_BEGIN(ev, cpu_sample, &h, TT_KIND_CPU_SAMPLE);
	ev->body.pid = (__u32)pid_tgid;
	ev->body.tgid = pid_tgid >> 32;
	ev->body.kstack_id = bpf_get_stackid(ctx, &tt_kstacks, 0);
	ev->body.ustack_id = bpf_get_stackid(ctx, &tt_ustacks, BPF_F_USER_STACK);
	SUBMIT(ev);
	return 0;
}
