//! `tenge-trace`: the command line. Each subcommand lives in `cmd/`; this file
//! holds only the argument definitions (also used to generate the man page
//! and shell completions).

// No `unwrap` on a command path: an input gets an error, not a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod cli;
mod cmd;

use clap::Parser;
use std::process::ExitCode;

/// The status of a program whose reader went away (`| head`): 128 + SIGPIPE.
const EXIT_BROKEN_PIPE: u8 = 128 + libc::SIGPIPE as u8;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // A print to a reader that went away panics in std; unwound (so labs
    // and tracers are cleaned up), it ends the program quietly.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_broken_pipe_panic(info.payload()) {
            default_hook(info)
        }
    }));
    match std::panic::catch_unwind(|| cmd::run(args)) {
        Ok(Ok(code)) => code,
        Ok(Err(err)) if is_broken_pipe(&err) => ExitCode::from(EXIT_BROKEN_PIPE),
        Ok(Err(err)) => {
            eprintln!("tenge-trace: error: {err:#}");
            ExitCode::from(2)
        }
        Err(panic) if is_broken_pipe_panic(panic.as_ref()) => ExitCode::from(EXIT_BROKEN_PIPE),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// std's panic when printing to stdout or stderr fails with EPIPE.
fn is_broken_pipe_panic(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    message.starts_with("failed printing to std") && message.contains("Broken pipe")
}
