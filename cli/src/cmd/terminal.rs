//! Text for people, as the terminal and the locale allow: tables wrapped to
//! the width (`--wide`: never), colour (`--color`, `NO_COLOR`), and ASCII
//! when the locale's character set is not UTF-8 (`LC_ALL=C`).

use crate::cli::ColorChoice;
use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::OnceLock;

/// How text for people is shaped on standard output and standard error.
#[derive(Clone, Copy, Debug)]
pub struct Terminal {
    /// Columns to fit tables in; None: as wide as they are.
    pub width: Option<usize>,
    color: bool,
    utf8: bool,
}

static STDOUT: OnceLock<Terminal> = OnceLock::new();
static STDERR: OnceLock<Terminal> = OnceLock::new();

/// Settles both streams' shape from the global flags and the environment.
pub fn init(color: ColorChoice, wide: bool) {
    let utf8 = utf8_locale(|name| std::env::var(name).ok());
    for (cell, fd, is_tty) in [
        (
            &STDOUT,
            libc::STDOUT_FILENO,
            std::io::stdout().is_terminal(),
        ),
        (
            &STDERR,
            libc::STDERR_FILENO,
            std::io::stderr().is_terminal(),
        ),
    ] {
        let color = match color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                is_tty
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::env::var("TERM").is_ok_and(|t| t != "dumb")
            }
        };
        let width = (!wide).then(|| columns(fd, is_tty)).flatten();
        let _ = cell.set(Terminal { width, color, utf8 });
    }
}

pub fn stdout() -> Terminal {
    *STDOUT.get().unwrap_or(&Terminal::PLAIN)
}

pub fn stderr() -> Terminal {
    *STDERR.get().unwrap_or(&Terminal::PLAIN)
}

impl Terminal {
    const PLAIN: Terminal = Terminal {
        width: None,
        color: false,
        utf8: true,
    };

    /// `text` coloured line by line (alerts red, warnings yellow, advice
    /// green, section titles bold), in ASCII outside a UTF-8 locale.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let text = match self.color {
            true => Cow::Owned(text.split_inclusive('\n').map(colored).collect()),
            false => Cow::Borrowed(text),
        };
        match self.utf8 || text.is_ascii() {
            true => text,
            false => Cow::Owned(ascii(&text)),
        }
    }
}

/// The terminal's width, or `$COLUMNS` (also for a pipe, for tests and `watch -n`).
fn columns(fd: i32, is_tty: bool) -> Option<usize> {
    let from_env = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    if !is_tty {
        return from_env;
    }
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize it is given.
    let got = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) } == 0;
    from_env.or((got && size.ws_col > 0).then_some(usize::from(size.ws_col)))
}

/// Whether the locale's character set is UTF-8: the first of LC_ALL,
/// LC_CTYPE and LANG that is set decides, as for setlocale(3); none is the
/// POSIX locale, ASCII.
fn utf8_locale(var: impl Fn(&str) -> Option<String>) -> bool {
    ["LC_ALL", "LC_CTYPE", "LANG"]
        .iter()
        .find_map(|name| var(name).filter(|v| !v.is_empty()))
        .is_some_and(|v| {
            let v = v.to_ascii_lowercase();
            v.contains("utf-8") || v.contains("utf8")
        })
}

fn colored(line: &str) -> String {
    let (body, end) = match line.strip_suffix('\n') {
        Some(body) => (body, "\n"),
        None => (line, ""),
    };
    let trimmed = body.trim_start();
    let title = body.starts_with(|c: char| c.is_ascii_uppercase())
        && body
            .split(" (")
            .next()
            .is_some_and(|t| t.len() > 3 && t.chars().all(|c| c.is_ascii_uppercase() || c == ' '));
    let code = if trimmed.starts_with("ALERT") {
        "1;31"
    } else if trimmed.starts_with("WARNING") || trimmed.starts_with("CLEARED") {
        "33"
    } else if trimmed.starts_with("advice:") {
        "32"
    } else if title {
        "1"
    } else {
        return line.to_string();
    };
    let indent = &body[..body.len() - trimmed.len()];
    format!("{indent}\x1b[{code}m{trimmed}\x1b[0m{end}")
}

/// The text with each non-ASCII character spelled in ASCII ('?' for one
/// without a spelling).
fn ascii(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let spelled = match c {
            c if c.is_ascii() => {
                out.push(c);
                continue;
            }
            'µ' => "u",
            '×' => "x",
            '·' => "*",
            '→' => "->",
            '←' => "<-",
            '⇔' => "<=>",
            '−' | '–' => "-",
            '—' => "--",
            '≤' => "<=",
            '≥' => ">=",
            '≠' => "!=",
            '⌈' | '⌊' => "[",
            '⌉' | '⌋' => "]",
            'Σ' => "sum ",
            '§' => "S",
            '…' => "...",
            _ => "?",
        };
        out.push_str(spelled);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locale_decides_utf8_as_setlocale_does() {
        let env = |pairs: &'static [(&str, &str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(utf8_locale(env(&[("LANG", "en_US.UTF-8")])));
        assert!(utf8_locale(env(&[("LC_CTYPE", "C.utf8"), ("LANG", "C")])));
        assert!(!utf8_locale(env(&[
            ("LC_ALL", "C"),
            ("LANG", "en_US.UTF-8")
        ])));
        assert!(!utf8_locale(env(&[])));
        // An empty variable does not count: the next one decides.
        assert!(utf8_locale(env(&[("LC_ALL", ""), ("LANG", "C.UTF-8")])));
    }

    #[test]
    fn ascii_spells_what_reports_print() {
        assert_eq!(
            ascii("2.5 µs → 3 × 8948 B ≥ ⌊x⌋"),
            "2.5 us -> 3 x 8948 B >= [x]"
        );
        assert_eq!(ascii("plain"), "plain");
    }

    #[test]
    fn colour_marks_alerts_titles_and_nothing_else() {
        let t = Terminal {
            width: None,
            color: true,
            utf8: true,
        };
        let text = t.text("PATH COSTS\n  ALERT x\nrx  single\n");
        assert_eq!(
            text,
            "\x1b[1mPATH COSTS\x1b[0m\n  \x1b[1;31mALERT x\x1b[0m\nrx  single\n"
        );
    }
}
