//! Loading and attaching the BPF programs.
