//! Exporters: JSON lines, tables, flamegraphs.
pub mod json;
