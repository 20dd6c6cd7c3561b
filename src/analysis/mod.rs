//! Pure analyses over events: no BPF, no I/O.
pub mod paths;
pub mod window;
