//! A ping-pong between the lab's namespaces: one TCP connection with
//! `TCP_NODELAY` on both ends; the client in the sender's namespace writes a
//! small message, the server in the receiver's namespace echoes it, and the
//! client times each round trip. Half a round trip is one message's way from
//! one application's `send` to the other's `recv`: a latency to check the
//! tracer's RX path against.
//!
//! ```no_run
//! use tenge_lab::lab::{pingpong, Lab, LabConfig};
//! let lab = Lab::new(&LabConfig::default())?;
//! let report = pingpong::run(&lab, &pingpong::PingPongConfig::default())?;
//! println!("half RTT p50 {:?}", report.half_rtt_quantile(0.5));
//! # anyhow::Ok(())
//! ```

use super::Lab;
use anyhow::{anyhow, bail, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// No end waits longer than this for the other one (accept, connect, a reply).
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct PingPongConfig {
    /// Round trips to time.
    pub rounds: u32,
    /// Bytes per message (one segment as long as it fits the MSS).
    pub size: usize,
    /// Server port; 0 picks a free one.
    pub port: u16,
    /// Writes each message takes at the client (its parts as equal as they go).
    pub writes: usize,
    /// TCP_NODELAY on both ends; without it, Nagle's algorithm holds a
    /// message's later parts until the peer's ACK of the first.
    pub nodelay: bool,
}

impl Default for PingPongConfig {
    fn default() -> PingPongConfig {
        PingPongConfig {
            rounds: 2000,
            size: 64,
            port: 0,
            writes: 1,
            nodelay: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct PingPongReport {
    /// Every round trip, in order.
    pub rtts: Vec<Duration>,
    pub client: SocketAddr,
    pub server: SocketAddr,
}

impl PingPongReport {
    /// The `q` quantile (0..=1, nearest rank) of half the round trip times.
    pub fn half_rtt_quantile(&self, q: f64) -> Duration {
        let mut sorted = self.rtts.clone();
        sorted.sort_unstable();
        let Some(last) = sorted.len().checked_sub(1) else {
            return Duration::ZERO;
        };
        sorted[(q.clamp(0.0, 1.0) * last as f64).round() as usize] / 2
    }
}

/// Runs `cfg.rounds` round trips from the sender's namespace to the
/// receiver's and back; both sockets are closed when it returns.
pub fn run(lab: &Lab, cfg: &PingPongConfig) -> Result<PingPongReport> {
    let listen_addr = SocketAddrV4::new(lab.receiver_ip(), cfg.port);
    std::thread::scope(|s| {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let server = lab.receiver_netns().spawn_scoped(s, move || {
            let listener = TcpListener::bind(listen_addr).context("ping-pong bind")?;
            let _ = addr_tx.send(listener.local_addr()?);
            serve(&listener, cfg)
        });
        let client = addr_rx.recv().ok().map(|server_addr| {
            lab.sender_netns()
                .spawn_scoped(s, move || ping(server_addr, cfg))
        });
        let served = join(server);
        let report = client.map_or_else(|| Err(anyhow!("the ping-pong server failed")), join);
        // The client's error is the cause when both failed: the server only
        // sees the connection end early.
        let report = report?;
        served?;
        Ok(report)
    })
}

fn join<T>(handle: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Accepts one connection and echoes whole messages until the client closes.
fn serve(listener: &TcpListener, cfg: &PingPongConfig) -> Result<()> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + PEER_TIMEOUT;
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e).context("ping-pong accept"),
        }
    };
    configure(&stream, cfg.nodelay)?;
    let mut message = vec![0; cfg.size.max(1)];
    loop {
        match stream.read_exact(&mut message) {
            Ok(()) => stream.write_all(&message).context("ping-pong echo")?,
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e).context("ping-pong server read"),
        }
    }
}

fn ping(server: SocketAddr, cfg: &PingPongConfig) -> Result<PingPongReport> {
    let mut stream =
        TcpStream::connect_timeout(&server, PEER_TIMEOUT).context("ping-pong connect")?;
    configure(&stream, cfg.nodelay)?;
    let message: Vec<u8> = (0..cfg.size.max(1)).map(|i| i as u8).collect();
    let part = message.len().div_ceil(cfg.writes.max(1));
    let mut echo = vec![0; message.len()];
    let mut rtts = Vec::with_capacity(cfg.rounds as usize);
    for _ in 0..cfg.rounds {
        let sent = Instant::now();
        for part in message.chunks(part) {
            stream.write_all(part).context("ping-pong send")?;
        }
        stream.read_exact(&mut echo).context("ping-pong reply")?;
        rtts.push(sent.elapsed());
        if echo != message {
            bail!("ping-pong: the echo differs from the message");
        }
    }
    Ok(PingPongReport {
        rtts,
        client: stream.local_addr()?,
        server,
    })
}

fn configure(stream: &TcpStream, nodelay: bool) -> Result<()> {
    stream.set_nodelay(nodelay)?;
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    stream.set_write_timeout(Some(PEER_TIMEOUT))?;
    Ok(())
}
