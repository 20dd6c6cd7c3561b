//! Exporters: JSON lines, tables, flamegraphs, Prometheus metrics.
pub mod basic_auth;
pub mod flamegraph;
pub mod json;
pub mod metrics_server;
pub mod prometheus;
pub mod table;
pub mod web_config;
