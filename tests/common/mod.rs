//! Shared by the integration tests.

/// Root-only tests call this first. On a developer's unprivileged run it says
/// why the test does nothing and returns false; under CI (`CI` set) a missing
/// privilege is a failure, never a silent skip.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: CI must run the real-kernel tests as root"
    );
    eprintln!("{test}: skipped: needs root (BPF, network namespaces)");
    false
}

/// 20 `window_adv` events of one socket (198.18.0.2:5001 -> .1:40000, cookie
/// 4242), 1 ms apart, each offering 26844 = 3 x 8948 (the paper's clamped
/// window): input for file and JSON tests that need no kernel.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn clamped_windows() -> Vec<tenge_trace::event::Event> {
    use tenge_trace::event::{abi_addr, tt_hdr, tt_window_adv, Body, Event};
    let (family, saddr) = abi_addr("198.18.0.2".parse().unwrap());
    let (_, daddr) = abi_addr("198.18.0.1".parse().unwrap());
    (0..20u32)
        .map(|i| {
            let hdr = tt_hdr {
                ts_ns: 1_000_000 * u64::from(i),
                sock_cookie: 4242,
                family,
                saddr,
                daddr,
                sport: 5001,
                dport: 40000,
                ..Default::default()
            };
            let body = tt_window_adv {
                seq: 1,
                ack: 1000 + i * 8948,
                window: 26844,
                win_raw: 26844,
                rcv_mss: 8948,
                advmss: 8948,
                ..Default::default()
            };
            Event::new(hdr, Body::WindowAdv(body))
        })
        .collect()
}

/// A fresh directory of this test process, removed with what is in it when
/// dropped (also when the test fails).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub struct TempDir(std::path::PathBuf);

#[allow(dead_code)]
impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
