//! Exporters: JSON lines, tables, flamegraphs.
pub mod flamegraph;
