//! Recordings as `dump`, `report` and `flamegraph` read them.

use crate::cli::TraceInput;
use std::path::Path;
use tenge_trace::trace_file::TraceReader;

impl TraceInput {
    /// Opens the recording (`-`: standard input); unless `--strict`, one
    /// that is truncated or damaged reads up to its last whole block.
    pub fn open(&self) -> anyhow::Result<TraceReader> {
        let reader = if self.file == Path::new("-") {
            TraceReader::from_reader(Box::new(std::io::stdin()), Path::new("<stdin>"))?
        } else {
            TraceReader::open(&self.file)?
        };
        Ok(if self.strict {
            reader
        } else {
            reader.salvaging()
        })
    }

    /// Says on stderr where a salvaged recording stopped, once it was read.
    pub fn warn_damage(&self, reader: &TraceReader) {
        if let Some(damage) = reader.damage() {
            eprintln!(
                "tenge-trace: warning: {} is damaged from byte {} ({}): read the {} events \
                 before it, which is all this covers (--strict refuses such a file)",
                self.file.display(),
                damage.offset,
                damage.what,
                damage.events_read
            );
        }
    }
}
