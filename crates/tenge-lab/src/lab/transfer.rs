//! A real TCP transfer between the lab's namespaces: a sender and a receiver
//! on threads that entered their namespace, plain sockets, and `TCP_INFO`
//! read from both ends just before they close.

use super::diag::SockDiag;
use super::{Lab, LabConfig, Reader};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::mem::size_of;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often blocked socket calls come back to look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);
const FAST_READ_SIZE: usize = 256 * 1024;

/// The live connection, handed to the `hold` callback after the last byte
/// arrived and before either socket closes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TransferEnds {
    pub sender: SocketAddr,
    pub receiver: SocketAddr,
    pub sender_netns: String,
    pub receiver_netns: String,
    /// Namespace inode numbers (`net->ns.inum` in BPF), to keep a tracer
    /// to the lab's traffic.
    pub sender_netns_inum: u64,
    pub receiver_netns_inum: u64,
    pub sender_iface: String,
    pub receiver_iface: String,
}

impl TransferEnds {
    /// The receiver's (listening) port, e.g. for `ss` or tcpdump filters.
    pub fn port(&self) -> u16 {
        self.receiver.port()
    }
}

/// `getsockopt(TCP_INFO)` (plus `SO_RCVBUF`/`SO_SNDBUF`) of one end. Times in
/// microseconds as the kernel reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpInfoSnapshot {
    pub state: u8,
    pub ca_state: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    pub rto_us: u32,
    pub ato_us: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    #[serde(default)]
    pub sacked: u32,
    #[serde(default)]
    pub lost: u32,
    pub retrans: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt_us: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt_us: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
    pub busy_time_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub rcv_ooopack: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    /// `SO_RCVBUF` as read back: the kernel's `sk_rcvbuf` (twice the set value).
    pub sk_rcvbuf: u32,
    pub sk_sndbuf: u32,
}

/// One end's `TCP_INFO` at one time of the events' clock (CLOCK_MONOTONIC).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TcpInfoPoll {
    pub mono_ns: u64,
    pub info: TcpInfoSnapshot,
    /// Bytes received and not yet read (`rcv_nxt − copied_seq`) as
    /// sock_diag shows them ([`SockDiag`](super::diag::SockDiag)), read
    /// without the socket lock within microseconds of `mono_ns`, before
    /// `info`. `SIOCINQ` takes the lock, and so lands just after a reader
    /// released it, the backlog it processed still unread: on fast readers
    /// up to twice this (the sweep: 22.8 KB by SIOCINQ where the events said
    /// 12.2). /proc/net/tcp walks the whole established hash first (3.4 ms
    /// here): its value came from a fixed time after the stamp (MTU 16000,
    /// no window scaling, a GSO skb every 630 µs: 79 % of the polls saw one
    /// skb unread, in 14 % of the time by the events).
    #[serde(default)]
    pub rx_queue: u32,
    /// `sk_wmem_queued` (`SO_MEMINFO`): the send buffer's use, which
    /// `sk_sndbuf` bounds.
    #[serde(default)]
    pub wmem_queued: u32,
}

/// The outcome of [`Lab::run_transfer`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TransferReport {
    /// Bytes the receiver read.
    pub bytes: u64,
    /// From the sender's connect returning to the receiver reading the last byte.
    #[serde(with = "super::secs_f64")]
    pub elapsed: Duration,
    pub throughput_bps: f64,
    /// False when the stop flag ended the transfer early.
    pub completed: bool,
    pub sender_addr: SocketAddr,
    pub receiver_addr: SocketAddr,
    pub sender: TcpInfoSnapshot,
    pub receiver: TcpInfoSnapshot,
    /// With [`LabConfig::poll_ends_us`]: the sender's `TCP_INFO` from
    /// connect to the last byte, in time order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sender_polls: Vec<TcpInfoPoll>,
    /// The same of the receiver, from accept to the last byte.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receiver_polls: Vec<TcpInfoPoll>,
}

/// The two threads stop when the user asks or when the other one failed.
struct StopFlags<'a> {
    user: &'a AtomicBool,
    failed: AtomicBool,
}

impl StopFlags<'_> {
    fn stop(&self) -> bool {
        self.user.load(Ordering::Relaxed) || self.failed.load(Ordering::Relaxed)
    }

    /// Why a thread gave up before the connection existed.
    fn stopped_error(&self) -> anyhow::Error {
        if self.failed.load(Ordering::Relaxed) {
            anyhow!(PeerFailed)
        } else {
            anyhow!("stopped before the connection was established")
        }
    }
}

/// Runs one end of the transfer. If it fails or panics, `failed` tells the
/// other end to give up instead of waiting for it forever.
fn run_end<T>(failed: &AtomicBool, end: impl FnOnce() -> Result<T>) -> Result<T> {
    struct FailOnUnwind<'a>(&'a AtomicBool);
    impl Drop for FailOnUnwind<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.store(true, Ordering::Relaxed);
            }
        }
    }
    let _unwind = FailOnUnwind(failed);
    let result = end();
    if result.is_err() {
        failed.store(true, Ordering::Relaxed);
    }
    result
}

struct Received {
    stream: TcpStream,
    bytes: u64,
    last_byte_at: Instant,
}

struct Sent {
    stream: TcpStream,
    connected_at: Instant,
}

impl Lab {
    /// Runs one transfer of `cfg.bytes` from the sender namespace to the
    /// receiver namespace. Sysctls of `cfg` are applied first. After the last
    /// byte arrived and the sender saw it acknowledged (at most 2 s), with
    /// both sockets still open, `hold` runs (read `ss`, stop a capture); then
    /// `TCP_INFO` is read from both ends and they close. A
    /// panic in `hold` is re-raised after the sockets and threads are gone.
    pub fn run_transfer(
        &self,
        cfg: &LabConfig,
        hold: impl FnOnce(&TransferEnds),
    ) -> Result<TransferReport> {
        self.run_transfer_until(cfg, &AtomicBool::new(false), hold)
    }

    /// [`Lab::run_transfer`] that ends early (cleanly, `completed == false`)
    /// once `stop` is set, e.g. from a Ctrl-C handler.
    pub fn run_transfer_until(
        &self,
        cfg: &LabConfig,
        stop: &AtomicBool,
        hold: impl FnOnce(&TransferEnds),
    ) -> Result<TransferReport> {
        if cfg.mtu != self.mtu() {
            bail!("lab built with MTU {}, config asks {}", self.mtu(), cfg.mtu);
        }
        if cfg.loopback && cfg.drop_every.is_some() {
            bail!("drop_every drops on the link: a transfer over the loopback would lose nothing");
        }
        self.apply_sysctls(cfg)?;
        let flags = StopFlags {
            user: stop,
            failed: AtomicBool::new(false),
        };
        let listen_addr = SocketAddr::new(self.listen_addr(cfg), cfg.port);
        let (sender_netns, sender_iface) = self.sender_side(cfg);
        let flags = &flags;
        let polling = AtomicBool::new(true);
        let (sender_tx, sender_rx) = std::sync::mpsc::channel::<TcpStream>();
        let (receiver_tx, receiver_rx) = std::sync::mpsc::channel::<TcpStream>();
        let poll_every = cfg.poll_ends_us.map(Duration::from_micros);
        let (received, sent, (sender_polls, receiver_polls)) = std::thread::scope(|s| {
            // In each end's namespace: its /proc/net/tcp shows the socket.
            let polling = &polling;
            let pollers = poll_every.map(|every| {
                [
                    (sender_netns, sender_rx),
                    (self.receiver_netns(), receiver_rx),
                ]
                .map(|(netns, end)| {
                    netns.spawn_scoped(s, move || Ok(poll_tcp_info(end, every, polling)))
                })
            });
            let (addr_tx, addr_rx) = std::sync::mpsc::channel();
            let receiver = self.receiver_netns().spawn_scoped(s, move || {
                run_end(&flags.failed, || {
                    let listener = listen(listen_addr, cfg.rcvbuf)?;
                    let _ = addr_tx.send(listener.local_addr()?);
                    receive(&listener, cfg, flags, poll_every.map(|_| receiver_tx))
                })
            });
            let sender = addr_rx.recv().ok().map(|addr| {
                let polled = poll_every.map(|_| sender_tx);
                sender_netns.spawn_scoped(s, move || {
                    run_end(&flags.failed, || send(addr, cfg, flags, polled))
                })
            });
            let received = join(receiver);
            let sent = sender.map_or_else(|| Err(anyhow!(PeerFailed)), join);
            polling.store(false, Ordering::Relaxed);
            let [sender_polls, receiver_polls] = pollers
                .map(|p| p.map(|p| join(p).unwrap_or_default()))
                .unwrap_or_default();
            let polls = (sender_polls, receiver_polls);
            // Report the root cause, not the end that was told to give up.
            match (received, sent) {
                (Ok(r), Ok(s)) => Ok((r, s, polls)),
                (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
                (Err(r), Err(s)) => Err(if r.is::<PeerFailed>() { s } else { r }),
            }
        })?;
        let ends = TransferEnds {
            sender: sent.stream.local_addr()?,
            receiver: received.stream.local_addr()?,
            sender_netns: sender_netns.name().to_string(),
            receiver_netns: self.receiver_netns().name().to_string(),
            sender_netns_inum: sender_netns.inum()?,
            receiver_netns_inum: self.receiver_netns().inum()?,
            sender_iface: sender_iface.to_string(),
            receiver_iface: self.receiver_iface().to_string(),
        };
        wait_acked(&sent.stream, flags);
        let held = catch_unwind(AssertUnwindSafe(|| hold(&ends)));
        let sender = tcp_info(&sent.stream);
        let receiver = tcp_info(&received.stream);
        drop(received.stream);
        drop(sent.stream);
        if let Err(panic) = held {
            resume_unwind(panic);
        }
        let elapsed = received
            .last_byte_at
            .saturating_duration_since(sent.connected_at);
        Ok(TransferReport {
            bytes: received.bytes,
            elapsed,
            throughput_bps: received.bytes as f64 * 8.0 / elapsed.as_secs_f64().max(1e-9),
            completed: received.bytes == cfg.bytes,
            sender_addr: ends.sender,
            receiver_addr: ends.receiver,
            sender: sender?,
            receiver: receiver?,
            sender_polls,
            receiver_polls,
        })
    }
}

/// What an end reports when it gave up because the other end failed.
#[derive(Debug, thiserror::Error)]
#[error("the other end of the transfer failed")]
struct PeerFailed;

fn join<T>(handle: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    handle.join().unwrap_or_else(|panic| resume_unwind(panic))
}

fn listen(addr: SocketAddr, rcvbuf: Option<u32>) -> Result<TcpListener> {
    let fd = tcp_socket(addr)?;
    set_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    // Before listen(): the SYN-ACK's window and scale come from it, and the
    // accepted socket inherits it (locked, so autotuning leaves it alone).
    if let Some(size) = rcvbuf {
        set_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, size)?;
    }
    let (sa, len) = raw_sockaddr(addr);
    // SAFETY: sa holds a valid sockaddr of length len.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context(format!("bind {addr}"));
    }
    // SAFETY: fd is a bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 1) } != 0 {
        return Err(std::io::Error::last_os_error()).context("listen");
    }
    Ok(TcpListener::from(fd))
}

/// `polled`: where to hand a clone of the accepted socket for [`poll_tcp_info`].
fn receive(
    listener: &TcpListener,
    cfg: &LabConfig,
    flags: &StopFlags,
    polled: Option<std::sync::mpsc::Sender<TcpStream>>,
) -> Result<Received> {
    listener.set_nonblocking(true)?;
    let stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if flags.stop() {
                    return Err(flags.stopped_error());
                }
                wait_readable(listener.as_raw_fd(), STOP_POLL);
            }
            Err(e) => return Err(e).context("accept"),
        }
    };
    stream.set_nonblocking(false)?;
    if let Some(polled) = polled {
        let _ = polled.send(stream.try_clone()?);
    }
    stream.set_read_timeout(Some(STOP_POLL))?;
    let mut reading = Reading {
        stream,
        total: cfg.bytes,
        got: 0,
        last_byte_at: Instant::now(),
        buf: vec![0; FAST_READ_SIZE],
    };
    if let Reader::Slow {
        initial_pause,
        read_size,
        interval,
        reads,
    } = cfg.reader
    {
        pause(initial_pause, flags);
        for _ in 0..reads {
            if flags.stop() || reading.done() {
                break;
            }
            reading.read_once(read_size)?;
            pause(interval, flags);
        }
    }
    while !reading.done() && !flags.stop() {
        reading.read_once(FAST_READ_SIZE)?;
    }
    if !reading.done() && flags.failed.load(Ordering::Relaxed) {
        bail!(PeerFailed);
    }
    Ok(Received {
        stream: reading.stream,
        bytes: reading.got,
        last_byte_at: reading.last_byte_at,
    })
}

struct Reading {
    stream: TcpStream,
    total: u64,
    got: u64,
    last_byte_at: Instant,
    buf: Vec<u8>,
}

impl Reading {
    fn done(&self) -> bool {
        self.got >= self.total
    }

    /// One `recv` of at most `size` bytes (a timeout counts as zero bytes).
    fn read_once(&mut self, size: usize) -> Result<()> {
        let want = (size.min(self.buf.len()) as u64).min(self.total - self.got) as usize;
        match self.stream.read(&mut self.buf[..want]) {
            Ok(0) => bail!("sender closed after {} of {} bytes", self.got, self.total),
            Ok(n) => {
                self.got += n as u64;
                self.last_byte_at = Instant::now();
                Ok(())
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(()),
            Err(e) => Err(e).context("recv"),
        }
    }
}

/// Reads `TCP_INFO` of the socket that arrives on `stream` every `every`
/// until `polling` goes false, and once more then: at least one poll, the
/// last at the end (a transfer over the loopback had ended before its
/// receiver's poller first ran, and left none). Nothing without a period or
/// a socket.
fn poll_tcp_info(
    stream: std::sync::mpsc::Receiver<TcpStream>,
    every: Duration,
    polling: &AtomicBool,
) -> Vec<TcpInfoPoll> {
    let Ok(stream) = stream.recv() else {
        return Vec::new();
    };
    let ends = stream
        .local_addr()
        .and_then(|l| Ok((l, stream.peer_addr()?)));
    let diag = SockDiag::open();
    let unread = || match (&diag, &ends) {
        (Ok(diag), Ok((local, remote))) => diag.unread(*local, *remote).ok(),
        _ => None,
    };
    let mut polls = Vec::new();
    loop {
        let last = !polling.load(Ordering::Relaxed);
        let mono_ns = crate::os::clock_ns(libc::CLOCK_MONOTONIC);
        let rx_queue = unread();
        match tcp_info(&stream) {
            Ok(info) => polls.push(TcpInfoPoll {
                mono_ns,
                info,
                rx_queue: rx_queue.unwrap_or(0),
                wmem_queued: wmem_queued(stream.as_raw_fd()).unwrap_or(0),
            }),
            Err(_) => break,
        }
        if last {
            break;
        }
        std::thread::sleep(every);
    }
    polls
}

/// `SK_MEMINFO_WMEM_QUEUED` of `SO_MEMINFO`, read without the socket lock.
fn wmem_queued(fd: RawFd) -> Option<u32> {
    // SK_MEMINFO_VARS, the array's length since 4.x (libc does not name it).
    let mut meminfo = [0u32; 9];
    get_opt(fd, libc::SOL_SOCKET, libc::SO_MEMINFO, &mut meminfo).ok()?;
    Some(meminfo[libc::SK_MEMINFO_WMEM_QUEUED as usize])
}

/// `polled`: where to hand a clone of the connected socket for [`poll_tcp_info`].
fn send(
    to: SocketAddr,
    cfg: &LabConfig,
    flags: &StopFlags,
    polled: Option<std::sync::mpsc::Sender<TcpStream>>,
) -> Result<Sent> {
    let fd = tcp_socket(to)?;
    let raw = fd.as_raw_fd();
    if let Some(size) = cfg.sndbuf {
        set_opt(raw, libc::SOL_SOCKET, libc::SO_SNDBUF, size)?;
    }
    if let Some(rate) = cfg.max_pacing_rate {
        set_opt_bytes(
            raw,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            &rate.to_ne_bytes(),
        )?;
    }
    if cfg.nodelay {
        set_opt(raw, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    }
    if let Some(name) = &cfg.congestion {
        set_opt_bytes(
            raw,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_bytes(),
        )
        .with_context(|| format!("congestion control {name}"))?;
    }
    let (sa, len) = raw_sockaddr(to);
    // SAFETY: sa holds a valid sockaddr of length len.
    let rc = unsafe { libc::connect(raw, (&sa as *const libc::sockaddr_storage).cast(), len) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context(format!("connect {to}"));
    }
    let connected_at = Instant::now();
    let mut stream = TcpStream::from(fd);
    if let Some(polled) = polled {
        let _ = polled.send(stream.try_clone()?);
    }
    stream.set_write_timeout(Some(STOP_POLL))?;
    let chunk: Vec<u8> = (0..cfg.write_size.max(1)).map(|i| i as u8).collect();
    let mut left = cfg.bytes;
    while left > 0 {
        if flags.stop() {
            if flags.failed.load(Ordering::Relaxed) {
                bail!(PeerFailed);
            }
            break;
        }
        let n = (chunk.len() as u64).min(left) as usize;
        let written = if cfg.eor {
            send_record(&stream, &chunk[..n])
        } else {
            stream.write(&chunk[..n])
        };
        match written {
            Ok(written) => left -= written as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e).context("send"),
        }
    }
    Ok(Sent {
        stream,
        connected_at,
    })
}

/// One write that TCP keeps apart from the next (MSG_EOR: the skb it ends
/// is never appended to, so no segment spans two writes).
fn send_record(stream: &TcpStream, bytes: &[u8]) -> std::io::Result<usize> {
    // SAFETY: the pointer and length describe `bytes`.
    let n = unsafe {
        libc::send(
            stream.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_EOR,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The longest a finished transfer waits for its sender to see the last
/// byte acknowledged.
const ACKED_WAIT: Duration = Duration::from_secs(2);

/// Until `stream` has nothing unacknowledged, so that its counters are final:
/// with ACKs lost the receiver can have every byte while the sender still
/// retransmits (the sweep, loss 1 in 50: the trace's bytes sent 331 KB above
/// a `tcpi_bytes_sent` read as the last byte arrived).
fn wait_acked(stream: &TcpStream, flags: &StopFlags) {
    let until = Instant::now() + ACKED_WAIT;
    while Instant::now() < until && !flags.stop() {
        match tcp_info(stream) {
            Ok(info) if info.unacked > 0 => std::thread::sleep(Duration::from_millis(1)),
            _ => break,
        }
    }
}

/// Sleeps `total`, waking early when the transfer is told to stop.
fn pause(total: Duration, flags: &StopFlags) {
    let until = Instant::now() + total;
    while !flags.stop() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(STOP_POLL));
    }
}

fn wait_readable(fd: RawFd, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as libc::c_int) };
}

/// A TCP socket of `addr`'s family.
fn tcp_socket(addr: SocketAddr) -> Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("socket");
    }
    // SAFETY: fd is a fresh, valid descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn set_opt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: u32) -> Result<()> {
    set_opt_bytes(fd, level, name, &(value as libc::c_int).to_ne_bytes())
}

fn set_opt_bytes(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &[u8]) -> Result<()> {
    // SAFETY: the pointer and length describe `value`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .context(format!("setsockopt(level {level}, option {name})"));
    }
    Ok(())
}

/// Fills `value` with getsockopt; returns the length the kernel wrote.
fn get_opt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &mut T) -> Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: value is writable for len bytes; the kernel writes at most len.
    let rc = unsafe { libc::getsockopt(fd, level, name, (value as *mut T).cast(), &mut len) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .context(format!("getsockopt({level}, {name})"));
    }
    Ok(len as usize)
}

/// `addr` as bind(2) and connect(2) take it: a `sockaddr_in` or
/// `sockaddr_in6` in a `sockaddr_storage`, and its length.
fn raw_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all zeroes is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let target = &mut storage as *mut libc::sockaddr_storage;
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe { std::ptr::write(target.cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(target.cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// `struct tcp_info` of linux/tcp.h (6.18) up to `tcpi_rcv_wnd`; older
/// kernels fill a prefix and leave the rest zero.
#[repr(C)]
#[derive(Default)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8, // snd_wscale:4 (low bits), rcv_wscale:4
    app_limited_bits: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
    rcv_wnd: u32,
}

/// Reads `TCP_INFO`, `SO_RCVBUF` and `SO_SNDBUF` of a connected socket.
pub fn tcp_info(stream: &TcpStream) -> Result<TcpInfoSnapshot> {
    let fd = stream.as_raw_fd();
    let mut raw = RawTcpInfo::default();
    get_opt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut raw)?;
    let mut sk_rcvbuf: libc::c_int = 0;
    let mut sk_sndbuf: libc::c_int = 0;
    get_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &mut sk_rcvbuf)?;
    get_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &mut sk_sndbuf)?;
    Ok(TcpInfoSnapshot {
        state: raw.state,
        ca_state: raw.ca_state,
        probes: raw.probes,
        backoff: raw.backoff,
        options: raw.options,
        snd_wscale: raw.wscale & 0xf,
        rcv_wscale: raw.wscale >> 4,
        rto_us: raw.rto,
        ato_us: raw.ato,
        snd_mss: raw.snd_mss,
        rcv_mss: raw.rcv_mss,
        unacked: raw.unacked,
        sacked: raw.sacked,
        lost: raw.lost,
        retrans: raw.retrans,
        pmtu: raw.pmtu,
        rcv_ssthresh: raw.rcv_ssthresh,
        rtt_us: raw.rtt,
        rttvar_us: raw.rttvar,
        snd_ssthresh: raw.snd_ssthresh,
        snd_cwnd: raw.snd_cwnd,
        advmss: raw.advmss,
        reordering: raw.reordering,
        rcv_rtt_us: raw.rcv_rtt,
        rcv_space: raw.rcv_space,
        total_retrans: raw.total_retrans,
        pacing_rate: raw.pacing_rate,
        bytes_acked: raw.bytes_acked,
        bytes_received: raw.bytes_received,
        segs_out: raw.segs_out,
        segs_in: raw.segs_in,
        notsent_bytes: raw.notsent_bytes,
        min_rtt_us: raw.min_rtt,
        data_segs_in: raw.data_segs_in,
        data_segs_out: raw.data_segs_out,
        delivery_rate: raw.delivery_rate,
        busy_time_us: raw.busy_time,
        rwnd_limited_us: raw.rwnd_limited,
        sndbuf_limited_us: raw.sndbuf_limited,
        bytes_sent: raw.bytes_sent,
        bytes_retrans: raw.bytes_retrans,
        rcv_ooopack: raw.rcv_ooopack,
        snd_wnd: raw.snd_wnd,
        rcv_wnd: raw.rcv_wnd,
        sk_rcvbuf: sk_rcvbuf as u32,
        sk_sndbuf: sk_sndbuf as u32,
    })
}
