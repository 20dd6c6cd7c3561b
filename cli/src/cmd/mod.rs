//! One module per subcommand.

mod alerts;
mod bench;
mod check;
mod dump;
mod flamegraph;
mod gen_docs;
mod input;
mod lab;
mod output;
mod record;
mod report;
mod session;
mod stages;
mod watch;

use crate::cli::{Cli, Command};
use std::process::ExitCode;

pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("TENGE_GIT_REV"),
    ")"
);

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check { json } => check::run(json),
        Command::Record(args) => record::run(args),
        Command::Stages(args) => stages::run(args),
        Command::Dump(args) => dump::run(args),
        Command::Report(args) => report::run(args),
        Command::Flamegraph(args) => flamegraph::run(args),
        Command::Watch(args) => watch::run(args),
        Command::Lab(args) => lab::run(args),
        Command::Bench(args) => bench::run(args),
        Command::GenDocs { out } => gen_docs::run(&out),
    }
}

/// Writes to stdout (and flushes on an empty write). Returns false when the
/// reader has gone (`| head`): a normal end, not an error.
pub fn write_stdout(out: &mut impl std::io::Write, bytes: &[u8]) -> anyhow::Result<bool> {
    let res = if bytes.is_empty() {
        out.flush()
    } else {
        out.write_all(bytes)
    };
    match res {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        other => other.map(|_| true).map_err(Into::into),
    }
}
