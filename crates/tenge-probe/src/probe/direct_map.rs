//! Where x86-64 keeps the direct map and the struct page array, so the
//! programs can read packet headers a driver left in a page fragment
//! (`frag0_data` in bpf/tenge_common.bpf.h). KASLR moves both; the kernel
//! keeps their bases in two variables whose addresses /proc/kallsyms names
//! (to root; 0 when `kptr_restrict` hides them, and then such headers are
//! not read).

use std::io::BufRead;

#[derive(Debug, Default, PartialEq)]
pub(super) struct DirectMap {
    /// The addresses of the kernel's `page_offset_base` and `vmemmap_base`.
    pub page_offset_base_at: u64,
    pub vmemmap_base_at: u64,
}

impl DirectMap {
    pub(super) fn of_this_kernel() -> DirectMap {
        std::fs::File::open("/proc/kallsyms")
            .map(|f| DirectMap::from_kallsyms(std::io::BufReader::new(f)))
            .unwrap_or_default()
    }

    /// From kallsyms lines (`ADDRESS TYPE NAME [MODULE]`); both or neither.
    fn from_kallsyms(lines: impl BufRead) -> DirectMap {
        let mut found = DirectMap::default();
        for line in lines.lines().map_while(Result::ok) {
            let mut words = line.split_whitespace();
            let (Some(address), Some(_), Some(name)) = (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let slot = match name {
                "page_offset_base" => &mut found.page_offset_base_at,
                "vmemmap_base" => &mut found.vmemmap_base_at,
                _ => continue,
            };
            *slot = u64::from_str_radix(address, 16).unwrap_or(0);
            if found.page_offset_base_at != 0 && found.vmemmap_base_at != 0 {
                return found;
            }
        }
        DirectMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_bases_or_neither() {
        let kallsyms = "ffffffff81000000 T _text\n\
                        ffffffff83a1b2c0 D page_offset_base\n\
                        ffffffff83a1b2b8 D vmemmap_base\n";
        assert_eq!(
            DirectMap::from_kallsyms(kallsyms.as_bytes()),
            DirectMap {
                page_offset_base_at: 0xffffffff83a1b2c0,
                vmemmap_base_at: 0xffffffff83a1b2b8,
            }
        );
        let hidden = "0000000000000000 D page_offset_base\n0000000000000000 D vmemmap_base\n";
        assert_eq!(
            DirectMap::from_kallsyms(hidden.as_bytes()),
            DirectMap::default()
        );
        let one = "ffffffff83a1b2c0 D page_offset_base\n";
        assert_eq!(
            DirectMap::from_kallsyms(one.as_bytes()),
            DirectMap::default()
        );
    }
}
