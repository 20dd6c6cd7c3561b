//! Exporters: JSON lines, tables, flamegraphs.
