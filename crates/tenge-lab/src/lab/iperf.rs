//! iperf3 in the lab: a reference traffic source nobody here wrote.

use super::netns::{exec_command, run};
use super::ss;
use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// `iperf3 -s` running in a namespace; killed when dropped.
#[derive(Debug)]
pub struct Iperf3Server {
    child: Child,
    port: u16,
}

impl Iperf3Server {
    /// Starts the server and returns once it listens on `port`.
    pub fn start(netns: &str, port: u16) -> Result<Iperf3Server> {
        let child = exec_command(netns, "iperf3")
            .args(["-s", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("spawn iperf3 -s")?;
        let mut server = Iperf3Server { child, port };
        let deadline = Instant::now() + READY_TIMEOUT;
        while !ss::is_listening(netns, port)? {
            if let Some(status) = server.child.try_wait()? {
                bail!("iperf3 -s -p {port} exited: {status}");
            }
            if Instant::now() > deadline {
                bail!("iperf3 -s -p {port} not listening after {READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `iperf3 -c SERVER -p PORT -t SECONDS -J EXTRA..` in `netns` and
/// returns its JSON report (`end.sum_received.bits_per_second` etc.).
pub fn run_client(
    netns: &str,
    server: IpAddr,
    port: u16,
    seconds: u32,
    extra_args: &[&str],
) -> Result<serde_json::Value> {
    let output = run(exec_command(netns, "iperf3")
        .args(["-c", &server.to_string(), "-p", &port.to_string()])
        .args(["-t", &seconds.to_string(), "-J"])
        .args(extra_args))?;
    serde_json::from_slice(&output.stdout).context("iperf3 -J output")
}
