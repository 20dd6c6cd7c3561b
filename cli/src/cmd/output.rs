//! Output files written whole or not at all, and never over an input.

use anyhow::{bail, Context};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A temporary file beside `target` (new, 0600), renamed over it by
/// [`commit`](Self::commit); removed if dropped uncommitted (an error, a
/// panic), so a failed run leaves the old file, not half a new one. `-`
/// (standard output), a pipe or a device is written in place.
pub struct OutputFile {
    /// None: written in place.
    tmp: Option<PathBuf>,
    target: PathBuf,
    file: Option<BufWriter<File>>,
}

/// Whether `a` and `b` name the same existing file (hard links included).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

impl OutputFile {
    /// Refuses a `target` that is one of `inputs`.
    pub fn create(target: &Path, inputs: &[&Path]) -> anyhow::Result<OutputFile> {
        if let Some(input) = inputs.iter().find(|i| same_file(target, i)) {
            bail!(
                "-o {}: that is the input {}, which the output would overwrite",
                target.display(),
                input.display()
            );
        }
        let in_place = |file: File| OutputFile {
            tmp: None,
            target: target.to_path_buf(),
            file: Some(BufWriter::new(file)),
        };
        if target == Path::new("-") {
            return Ok(in_place(File::from(
                std::io::stdout().as_fd().try_clone_to_owned()?,
            )));
        }
        if std::fs::metadata(target).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            let file = File::options().write(true).open(target);
            return Ok(in_place(
                file.with_context(|| format!("opening {}", target.display()))?,
            ));
        }
        let name = target
            .file_name()
            .with_context(|| format!("-o {}: not a file name", target.display()))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = target.with_file_name(tmp_name);
        let file = File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        Ok(OutputFile {
            tmp: Some(tmp),
            target: target.to_path_buf(),
            file: Some(BufWriter::new(file)),
        })
    }

    /// Flushes and renames the file into place.
    pub fn commit(mut self) -> anyhow::Result<()> {
        let file = self.file.take().expect("committed once");
        let file = file.into_inner().map_err(|e| e.into_error());
        let Some(tmp) = &self.tmp else {
            return Ok(file.map(drop)?);
        };
        file.and_then(|f| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(tmp, &self.target)
            .with_context(|| format!("renaming {} to {}", tmp.display(), self.target.display()))
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.as_mut().expect("not committed").write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().expect("not committed").flush()
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let (Some(_), Some(tmp)) = (self.file.take(), &self.tmp) {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_an_input_and_writes_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("tt-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("rec.tt");
        std::fs::write(&input, b"recording").unwrap();
        // The input itself, by another spelling, or a hard link to it.
        let link = dir.join("link.tt");
        std::fs::hard_link(&input, &link).unwrap();
        for target in [input.clone(), dir.join(".").join("rec.tt"), link] {
            let err = OutputFile::create(&target, &[&input]).err().unwrap();
            assert!(err.to_string().contains("would overwrite"), "{err}");
        }
        assert_eq!(std::fs::read(&input).unwrap(), b"recording");
        // Dropped uncommitted: the old file stays, no temporary is left.
        let out = dir.join("out.svg");
        std::fs::write(&out, b"old").unwrap();
        let mut file = OutputFile::create(&out, &[&input]).unwrap();
        file.write_all(b"half").unwrap();
        drop(file);
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 3);
        // Committed: the new content, in place.
        let mut file = OutputFile::create(&out, &[&input]).unwrap();
        file.write_all(b"new").unwrap();
        file.commit().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
