//! Shared by the integration tests.

/// Root-only tests call this first. On a developer's unprivileged run it says
/// why the test does nothing and returns false; under CI (`CI` set) a missing
/// privilege is a failure, never a silent skip.
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
