//! Root-only: attaches the real probes and traces a loopback transfer made
//! by the test itself, filtered on its own ephemeral port so that parallel
//! tests and other traffic do not interfere.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use tenge_trace::collector::Collector;
use tenge_trace::event::{tcp_flags, Body, Event};
use tenge_trace::probe::{check, Backend, Filters, Tracer, TracerOptions};

const TRANSFER_BYTES: usize = 4 << 20;
/// Small enough that the receive window has to move.
const RCVBUF: libc::c_int = 64 << 10;

/// A listener on 127.0.0.1 with SO_RCVBUF set before listen(), so the
/// accepted socket inherits it (and a window scale chosen for it).
fn small_rcvbuf_listener() -> TcpListener {
    // SAFETY: plain socket calls on a fresh fd, which the listener then owns.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let listener = TcpListener::from_raw_fd(fd);
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF);
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of_val(&addr) as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), len),
            0
        );
        assert_eq!(libc::listen(fd, 1), 0);
        listener
    }
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    // SAFETY: the option value is a c_int of the given size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of_val(&value) as _,
        )
    };
    assert_eq!(rc, 0, "setsockopt {level}/{name}");
}

fn getsockopt<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int) -> T {
    // SAFETY: T is plain old data the kernel fills (zeroed first).
    unsafe {
        let mut value: T = std::mem::zeroed();
        let mut len = std::mem::size_of::<T>() as libc::socklen_t;
        assert_eq!(
            libc::getsockopt(fd, level, name, (&mut value as *mut T).cast(), &mut len),
            0
        );
        value
    }
}

/// What user space knows about one end of the transfer, read before close.
#[derive(Debug)]
struct SocketFacts {
    port: u16,
    cookie: u64,
    info: libc::tcp_info,
}

fn facts(stream: &TcpStream) -> SocketFacts {
    let fd = stream.as_raw_fd();
    SocketFacts {
        port: stream.local_addr().unwrap().port(),
        cookie: getsockopt::<u64>(fd, libc::SOL_SOCKET, libc::SO_COOKIE),
        info: getsockopt::<libc::tcp_info>(fd, libc::IPPROTO_TCP, libc::TCP_INFO),
    }
}

/// A traced transfer: its decoded events and what user space knew.
struct Transfer {
    events: Vec<Event>,
    sender: SocketFacts,
    receiver: SocketFacts,
    listener_cookie: u64,
    lost: Vec<u64>,
}

/// Runs a slow-reader transfer through `listener` while tracing it, with
/// the probes on the first of `backends` that works.
fn trace_transfer(listener: TcpListener, sample_every: u32, backends: &[Backend]) -> Transfer {
    let port = listener.local_addr().unwrap().port();
    let listener_cookie =
        getsockopt::<u64>(listener.as_raw_fd(), libc::SOL_SOCKET, libc::SO_COOKIE);
    let options = TracerOptions {
        filters: Filters {
            port: Some(port),
            sample_every,
            ..Filters::default()
        },
        backends: backends.to_vec(),
        ..TracerOptions::default()
    };
    let started = Instant::now();
    let mut tracer = Tracer::start(&options).expect("tracer starts");
    eprintln!("load+attach: {:?}", started.elapsed());
    for probe in &tracer.plan().probes {
        eprintln!(
            "{:>40} {:>14} -> {:?} {}",
            probe.hook, probe.kind, probe.backend, probe.program
        );
    }
    let done = AtomicBool::new(false);
    let mut raw = Vec::new();
    let (sender, receiver, stats) = thread::scope(|scope| {
        let receiver = scope.spawn(|| {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 32 << 10];
            let mut total = 0;
            while total < TRANSFER_BYTES {
                let n = stream.read(&mut buf).unwrap();
                assert!(n > 0, "early EOF after {total} bytes");
                total += n;
                thread::sleep(Duration::from_millis(1));
            }
            stream
        });
        let sender = scope.spawn(|| {
            let mut stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            stream.write_all(&vec![7u8; TRANSFER_BYTES]).unwrap();
            stream
        });
        let closer = scope.spawn(|| {
            let sender = sender.join().unwrap();
            let receiver = receiver.join().unwrap();
            let facts = (facts(&sender), facts(&receiver));
            drop((sender, receiver));
            thread::sleep(Duration::from_millis(200)); // FIN exchange and state changes
            done.store(true, Ordering::Relaxed);
            facts
        });
        let deadline = Some(Instant::now() + Duration::from_secs(30));
        let stats = Collector::new()
            .run(
                &mut tracer,
                &done,
                deadline,
                |record| raw.push(record.to_vec()),
                |_| {},
            )
            .expect("collector runs");
        let (sender, receiver) = closer.join().unwrap();
        (sender, receiver, stats)
    });
    eprintln!(
        "{} events, {} bytes in {:?} ({:.0} events/s)",
        stats.events,
        stats.bytes,
        stats.elapsed,
        stats.events as f64 / stats.elapsed.as_secs_f64()
    );
    let events = raw
        .iter()
        .map(|r| Event::decode(r).expect("every record decodes"))
        .collect();
    Transfer {
        events,
        sender,
        receiver,
        listener_cookie,
        lost: stats.lost,
    }
}

fn count_by_kind(events: &[Event]) -> HashMap<&'static str, usize> {
    let mut counts = HashMap::new();
    for ev in events {
        *counts.entry(ev.kind_name()).or_default() += 1;
    }
    counts
}

#[test]
fn traces_a_loopback_transfer() {
    if !common::require_root("probes") {
        return;
    }
    assert_transfer(
        &trace_transfer(small_rcvbuf_listener(), 0, &Backend::LADDER),
        true,
    );
}

/// raw_tp always; classic tracepoints only where tracefs is mounted.
#[test]
fn other_backends_trace_the_same_path() {
    if !common::require_root("probes") {
        return;
    }
    for backend in [Backend::RawTp, Backend::Tracepoint] {
        if backend == Backend::Tracepoint
            && !std::path::Path::new("/sys/kernel/tracing/events").exists()
        {
            eprintln!("skipping tracepoint: tracefs is not mounted");
            continue;
        }
        let transfer = trace_transfer(small_rcvbuf_listener(), 0, &[backend]);
        // Without bpf_get_socket_cookie, early events predate the cookie.
        assert_transfer(&transfer, false);
    }
}

/// The assertions every backend must pass. `cookies_from_start`: the BPF
/// side assigns cookies (tp_btf), so even the handshake carries them.
fn assert_transfer(transfer: &Transfer, cookies_from_start: bool) {
    let Transfer {
        events,
        sender,
        receiver,
        listener_cookie,
        lost,
    } = transfer;
    let listener_cookie = *listener_cookie;
    let server_port = receiver.port;
    let counts = count_by_kind(events);
    eprintln!("{counts:?}");
    assert_eq!(lost.iter().sum::<u64>(), 0, "lost {lost:?}");

    // Socket events carry their socket's local end and cookie. The client's
    // CLOSE -> SYN_SENT comes before connect() picks a port, and the last
    // TIME_WAIT -> CLOSE after the port went to the time-wait socket.
    let socket_of = |ev: &Event| match ev.hdr.sport {
        p if p == sender.port => Some(sender),
        p if p == server_port => Some(receiver),
        0 if matches!(ev.body, Body::State(_)) => Some(sender),
        _ => None,
    };
    for ev in events
        .iter()
        .filter(|ev| !ev.is_packet_event() && !matches!(ev.body, Body::NapiPoll(_)))
    {
        let sock = socket_of(ev)
            .unwrap_or_else(|| panic!("{} from an unknown socket: {:?}", ev.kind_name(), ev.hdr));
        // The listener becomes readable once: a connection to accept.
        if ev.hdr.sock_cookie == listener_cookie {
            assert!(matches!(ev.body, Body::DataReady(_)) && sock.port == server_port);
            continue;
        }
        if cookies_from_start || ev.hdr.sock_cookie != 0 {
            assert_eq!(ev.hdr.sock_cookie, sock.cookie, "{} cookie", ev.kind_name());
        }
        assert_eq!(ev.src().unwrap().ip().to_string(), "127.0.0.1");
    }

    // Every advertised window is the header's, scaled (but not on SYN).
    let window_advs = |sock: &SocketFacts| -> Vec<_> {
        events
            .iter()
            .filter(|ev| ev.hdr.sport == sock.port)
            .filter_map(|ev| match ev.body {
                Body::WindowAdv(w) => Some(w),
                _ => None,
            })
            .collect()
    };
    for sock in [sender, receiver] {
        let advs = window_advs(sock);
        assert!(!advs.is_empty(), "no window_adv from port {}", sock.port);
        for w in &advs {
            let scale = if w.tcp_flags & tcp_flags::SYN != 0 {
                0
            } else {
                w.rcv_wscale
            };
            assert_eq!(w.window, u32::from(w.win_raw) << scale);
        }
    }
    let receiver_advs = window_advs(receiver);
    let last = receiver_advs.last().unwrap();
    assert_eq!(last.rcv_mss, receiver.info.tcpi_rcv_mss);
    assert_eq!(u32::from(last.advmss), receiver.info.tcpi_advmss);
    assert!(
        receiver_advs
            .iter()
            .map(|w| w.window)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 2
    );
    assert_eq!(
        window_advs(sender).last().unwrap().mss_cache,
        sender.info.tcpi_snd_mss
    );

    // Each stage of the path was seen, on the right socket.
    let seen = |kind: &str, port: u16| {
        events
            .iter()
            .any(|ev| ev.kind_name() == kind && ev.hdr.sport == port)
    };
    for (kind, sock) in [
        ("tcp_rcv", receiver),
        ("tcp_rcv", sender),
        ("data_ready", receiver),
        ("copy_datagram", receiver),
        ("app_read", receiver),
        ("state", sender),
        ("state", receiver),
    ] {
        assert!(seen(kind, sock.port), "no {kind} on port {}", sock.port);
    }
    // tcp:tcp_sendmsg_locked has no socket in its classic format: no tracepoint flavour.
    let sendmsg_attached = events.iter().any(|ev| ev.kind_name() == "sendmsg");
    assert!(sendmsg_attached || !cookies_from_start, "no sendmsg");
    // Packet events: data segments travel sender -> receiver.
    for kind in ["dev_start_xmit", "dev_xmit", "netif_receive", "rx_entry"] {
        assert!(
            events.iter().any(|ev| ev.kind_name() == kind
                && ev.hdr.sport == sender.port
                && ev.hdr.dport == server_port
                && matches!(ev.body, Body::DevStartXmit(p) | Body::DevXmit(p) | Body::NetifReceive(p) | Body::RxEntry(p) if p.len > 0)),
            "no data {kind}"
        );
    }
    for ev in events {
        if let Body::DevXmit(p) = ev.body {
            assert_eq!(p.rc, 0, "loopback xmit rc");
        }
    }
    // The receiver read everything: its last app_read saw copied_seq reach rcv_nxt.
    let read: i64 = events
        .iter()
        .filter_map(|ev| match ev.body {
            Body::AppRead(r) if ev.hdr.sport == server_port => Some(i64::from(r.ret.max(0))),
            _ => None,
        })
        .sum();
    assert_eq!(read, TRANSFER_BYTES as i64);
}

#[test]
fn sampling_keeps_whole_packets() {
    if !common::require_root("probes") {
        return;
    }
    let all = trace_transfer(small_rcvbuf_listener(), 0, &Backend::LADDER).events;
    let sampled = trace_transfer(small_rcvbuf_listener(), 8, &Backend::LADDER).events;
    let (all_counts, sampled_counts) = (count_by_kind(&all), count_by_kind(&sampled));
    eprintln!("all {all_counts:?}\nsampled {sampled_counts:?}");
    // napi_poll is not port-filtered: other tests' traffic would add noise to it.
    let per_packet = |evs: &[Event]| {
        evs.iter()
            .filter(|e| !matches!(e.body, Body::NapiPoll(_)))
            .count()
    };
    assert!(
        per_packet(&sampled) < per_packet(&all) / 2,
        "{} sampled vs {} all",
        per_packet(&sampled),
        per_packet(&all)
    );
    // Every packet hop kept is one whose (seq, ack) hashes to the sample,
    // except skbs of several packets where packets merge (GRO, backlog
    // coalescing): those are kept whole.
    for ev in &sampled {
        let key = match ev.body {
            Body::WindowAdv(w) => Some((w.seq, w.ack)),
            Body::TcpRcv(t) if t.len <= t.rcv_mss => Some((t.seq, t.ack)),
            Body::NetifReceive(p) if p.gso_segs <= 1 => Some((p.seq, p.ack)),
            Body::DevStartXmit(p) | Body::DevXmit(p) | Body::RxEntry(p) => Some((p.seq, p.ack)),
            _ => None,
        };
        if let Some((seq, ack)) = key {
            assert!(
                tenge_trace::event::sampled(seq, ack, 8),
                "{} seq {seq} ack {ack}",
                ev.kind_name()
            );
        }
    }
    // state is never sampled out: both runs see the full handshake and close.
    assert_eq!(all_counts.get("state"), sampled_counts.get("state"));
}

#[test]
fn check_reports_this_machine() {
    if !common::require_root("probes") {
        return;
    }
    let report = check();
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert!(report.btf);
    let works = |family: &str| {
        report
            .hooks
            .iter()
            .find(|h| h.family == family)
            .unwrap()
            .works
    };
    // Classic tracepoints work too: the tracer mounts tracefs while attaching when it is missing.
    for family in ["tp_btf", "raw_tp", "tracepoint", "tc", "perf_event"] {
        assert!(works(family), "{family} should work here");
    }
    // kprobes exist exactly when the kernel registers their PMU.
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe/type").exists();
    assert_eq!(works("kprobe"), kprobes);
    // fentry is refused (EPERM) on this VM; elsewhere it may work, but it must say why not.
    let fentry = report.hooks.iter().find(|h| h.family == "fentry").unwrap();
    assert!(fentry.works || fentry.error.is_some());
    let plan = report.plan.expect("a plan");
    let tcp_rcv = plan.probes.iter().find(|p| p.kind == "tcp_rcv").unwrap();
    assert_eq!(tcp_rcv.backend, Some(Backend::TpBtf));
}

#[test]
fn cpu_samples_resolve_to_kernel_symbols() {
    if !common::require_root("probes") {
        return;
    }
    // Port 1 matches no traffic: only the perf_event samples get through.
    let options = TracerOptions {
        filters: Filters {
            port: Some(1),
            ..Filters::default()
        },
        cpu_profile_hz: Some(499),
        ..TracerOptions::default()
    };
    let mut tracer = Tracer::start(&options).expect("tracer starts");
    let stop = AtomicBool::new(false);
    let deadline = Some(Instant::now() + Duration::from_millis(500));
    let mut samples = Vec::new();
    Collector::new()
        .run(
            &mut tracer,
            &stop,
            deadline,
            |r| samples.push(Event::decode(r).unwrap()),
            |_| {},
        )
        .unwrap();
    let kstacks: Vec<i32> = samples
        .iter()
        .filter_map(|ev| match ev.body {
            Body::CpuSample(s) => Some(s.kstack_id),
            _ => None,
        })
        .collect();
    // 2 CPUs x 499 Hz x 0.5 s, give or take the idle ticks the kernel skips.
    assert!(kstacks.len() > 50, "{} samples", kstacks.len());
    let stacks = tracer.resolve_stacks(&kstacks);
    let frames: Vec<&String> = stacks.values().flatten().collect();
    assert!(!frames.is_empty());
    // Kernel frames are symbols, not addresses.
    assert!(frames.iter().any(|f| !f.starts_with("0x")), "{frames:?}");
}
