//! `tenge-trace gen-docs --out DIR`: man pages and shell completions from the
//! clap definitions, so they never disagree with `--help`.

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::Path;
use std::process::ExitCode;

pub fn run(out: &Path) -> anyhow::Result<ExitCode> {
    let man = out.join("man");
    let completions = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    let cmd = crate::cli::Cli::command();
    clap_mangen::generate_to(cmd.clone(), &man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "tenge-trace", &completions)?;
    }
    println!(
        "man pages in {}, completions in {}",
        man.display(),
        completions.display()
    );
    Ok(ExitCode::SUCCESS)
}
