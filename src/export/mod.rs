//! Exporters: JSON lines, tables, flamegraphs.
pub mod flamegraph;
pub mod json;
pub mod table;
