//! One module per subcommand.

mod alerts;
#[cfg(feature = "bench")]
pub(crate) mod bench;
mod check;
mod diff;
mod dump;
mod export;
mod flamegraph;
mod gen_docs;
mod input;
mod lab;
mod output;
mod record;
mod report;
mod session;
mod stages;
mod terminal;
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
    terminal::init(cli.color, cli.wide);
    match cli.command {
        Command::Check { json } => check::run(json),
        Command::Record(args) => record::run(args),
        Command::Stages(args) => stages::run(args),
        Command::Dump(args) => dump::run(args),
        Command::Report(args) => report::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Flamegraph(args) => flamegraph::run(args),
        Command::Export(args) => export::run(args),
        Command::Watch(args) => watch::run(args),
        Command::Lab(args) => lab::run(args),
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::run(args),
        Command::GenDocs { out } => gen_docs::run(&out),
    }
}
