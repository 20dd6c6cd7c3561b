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
    for shell in [Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "tenge-trace", &completions)?;
    }
    std::fs::write(completions.join("tenge-trace.bash"), bash_completion())?;
    println!(
        "man pages in {}, completions in {}",
        man.display(),
        completions.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The bash completion script. clap_complete names a subcommand's case
/// label after the binary with its hyphen turned into `__subcmd__`
/// (`tenge__subcmd__trace__subcmd__watch`) while its dispatcher builds
/// `tenge__trace__subcmd__watch`, so no option of any subcommand completed;
/// the labels are renamed to what the dispatcher builds.
pub fn bash_completion() -> String {
    let mut script = Vec::new();
    clap_complete::generate(
        Shell::Bash,
        &mut crate::cli::Cli::command(),
        "tenge-trace",
        &mut script,
    );
    String::from_utf8_lossy(&script)
        .replace("tenge__subcmd__trace__subcmd__", "tenge__trace__subcmd__")
}
