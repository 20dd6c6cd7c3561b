//! `tenge-trace`: the command line. Each subcommand lives in `cmd/`; this file
//! holds only the argument definitions (also used to generate the man page
//! and shell completions).

mod cli;
mod cmd;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    match cmd::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("tenge-trace: error: {err:#}");
            std::process::ExitCode::from(2)
        }
    }
}
