//! Stack frames by name, through blazesym: kernel addresses by kallsyms,
//! user addresses by the symbol tables of the ELF files mapped there (Rust
//! names demangled). User stacks are what the kernel unwinds by frame
//! pointers: code built without them (Debian's libc, Rust's std) shows its
//! leaf frame, then its callers' callers.
//! A process's mappings are read while it runs (at its first sample, and
//! again while it is sampled), so its frames are named after it exits:
//! `record -- CMD` ends with CMD.

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;
use std::path::PathBuf;

/// One file mapped executable into a process.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: PathBuf,
}

/// The executable file mappings of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessMaps(Vec<Mapping>);

impl ProcessMaps {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `/proc/TGID/maps` now; empty when the process is gone.
    pub fn read(tgid: u32) -> ProcessMaps {
        std::fs::read_to_string(format!("/proc/{tgid}/maps"))
            .map_or_else(|_| ProcessMaps::default(), |text| ProcessMaps::parse(&text))
    }

    /// Lines `start-end perms offset dev inode path`: those executable and of a file.
    fn parse(text: &str) -> ProcessMaps {
        let mapping = |line: &str| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let perms = fields.next()?;
            let offset = fields.next()?;
            let path = fields.nth(2)?;
            (perms.contains('x') && path.starts_with('/')).then_some(())?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                path: PathBuf::from(path),
            })
        };
        ProcessMaps(text.lines().filter_map(mapping).collect())
    }

    /// The file and the offset in it that `addr` comes from.
    fn file_offset(&self, addr: u64) -> Option<(&Mapping, u64)> {
        let m = self.0.iter().find(|m| (m.start..m.end).contains(&addr))?;
        Some((m, addr - m.start + m.offset))
    }
}

/// Names of kernel addresses, in their order; an unknown one in hex.
pub fn kernel_frames(symbolizer: &Symbolizer, addrs: &[u64]) -> Vec<String> {
    let kernel = Kernel {
        vmlinux: MaybeDefault::None,
        ..Kernel::default()
    };
    let named = symbolizer.symbolize(&Source::Kernel(kernel), Input::AbsAddr(addrs));
    names(named.ok(), addrs)
}

/// Names of one process's user addresses, in their order, by the files
/// `maps` had there; an unknown one in hex.
pub fn user_frames(symbolizer: &Symbolizer, maps: &ProcessMaps, addrs: &[u64]) -> Vec<String> {
    addrs
        .iter()
        .map(|&addr| {
            let Some((mapping, offset)) = maps.file_offset(addr) else {
                return hex(addr);
            };
            // ELF symbols only: a debug link to files not installed (libc's)
            // fails the lookup rather than falling back to them.
            let elf = Source::Elf(Elf {
                debug_syms: false,
                ..Elf::new(&mapping.path)
            });
            let named = symbolizer.symbolize(&elf, Input::FileOffset(&[offset][..]));
            names(named.ok(), &[addr]).remove(0)
        })
        .collect()
}

fn names(named: Option<Vec<Symbolized<'_>>>, addrs: &[u64]) -> Vec<String> {
    let named = named.unwrap_or_default();
    addrs
        .iter()
        .enumerate()
        .map(|(i, &addr)| match named.get(i) {
            Some(Symbolized::Sym(sym)) => sym.name.to_string(),
            _ => hex(addr),
        })
        .collect()
}

fn hex(addr: u64) -> String {
    format!("{addr:#x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keep_executable_file_mappings_and_find_offsets() {
        let maps = ProcessMaps::parse(
            "55d0a0000000-55d0a0010000 r--p 00000000 fd:01 1234 /usr/bin/x\n\
             55d0a0010000-55d0a0050000 r-xp 00010000 fd:01 1234 /usr/bin/x\n\
             7f0000000000-7f0000001000 r-xp 00000000 00:00 0 [vdso]\n\
             7f0000002000-7f0000003000 rw-p 00000000 00:00 0\n",
        );
        assert_eq!(maps.0.len(), 1);
        let (m, offset) = maps.file_offset(0x55d0a0012345).unwrap();
        assert_eq!(
            (m.path.as_path(), offset),
            (std::path::Path::new("/usr/bin/x"), 0x12345)
        );
        assert!(maps.file_offset(0x7f0000000100).is_none());
    }

    /// This test's own function, named from its address in this process.
    #[test]
    fn user_frames_name_a_function_of_this_binary() {
        #[inline(never)]
        fn marker_function_for_symbols() -> u64 {
            marker_function_for_symbols as *const () as u64
        }
        let maps = ProcessMaps::read(std::process::id());
        let frames = user_frames(&Symbolizer::new(), &maps, &[marker_function_for_symbols()]);
        assert!(
            frames[0].contains("marker_function_for_symbols"),
            "{frames:?}"
        );
        // And one of libc's, a shared object mapped elsewhere.
        let recv = libc::recvfrom as *const () as u64 + 4;
        let frames = user_frames(&Symbolizer::new(), &maps, &[recv]);
        assert!(frames[0].contains("recv"), "{frames:?} {maps:?}");
    }
}
