//! Exporters: JSON lines, tables, flamegraphs, Prometheus metrics, and
//! captures (pcapng) and timelines (Chrome trace events) others' tools open.
pub mod basic_auth;
pub mod flamegraph;
pub mod json;
pub mod metrics_server;
pub mod pcapng;
pub mod perfetto;
pub mod prometheus;
pub mod table;
pub mod web_config;
