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
        Ok(self.prepared(reader))
    }

    /// Unless `--strict`, salvaging.
    fn prepared(&self, reader: TraceReader) -> TraceReader {
        if self.strict {
            reader
        } else {
            reader.salvaging()
        }
    }

    /// Two readers of the recording, for what needs two passes over it;
    /// standard input is read into memory for that.
    pub fn open_twice(&self) -> anyhow::Result<(TraceReader, TraceReader)> {
        if self.file != Path::new("-") {
            return Ok((self.open()?, self.open()?));
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)?;
        let bytes = std::sync::Arc::new(bytes);
        let open = || -> anyhow::Result<TraceReader> {
            let input = Box::new(std::io::Cursor::new(SharedBytes(bytes.clone())));
            Ok(self.prepared(TraceReader::from_reader(input, Path::new("<stdin>"))?))
        };
        Ok((open()?, open()?))
    }

    /// Says on stderr, once the recording was read, where a salvaged one
    /// stopped and how many records came out of time order.
    pub fn warn_after_reading(&self, reader: &TraceReader) {
        if reader.late() > 0 {
            eprintln!(
                "tenge-trace: warning: {} events of {} were written after the file had                  called their time complete (the recorder was held up {} ms or more)                  and were read after later ones",
                reader.late(),
                self.file.display(),
                tenge_trace::trace_file::HOLD_NS / 1_000_000
            );
        }
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

/// Standard input read once, for two readers.
struct SharedBytes(std::sync::Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}
