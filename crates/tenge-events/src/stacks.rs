//! What became of the stacks of CPU samples: the kernel stores each in a
//! table of fixed size by a hash of its addresses, and a stack whose slot a
//! different stack already holds is not stored (`bpf_get_stackid` returns
//! -EEXIST). Such a sample keeps its count, not its frames.

use crate::abi::tt_cpu_sample;

/// The frame a sample whose stack was not stored is drawn with.
pub const KERNEL_STACK_LOST: &str = "[kernel_stack_lost]";
pub const USER_STACK_LOST: &str = "[user_stack_lost]";

/// The stack id `bpf_get_stackid()` gives where a different stack holds the
/// slot the stack's hash picks: however empty the table, two stacks collide.
pub const SLOT_TAKEN: i32 = -libc::EEXIST;

pub fn slot_taken(stack_id: i32) -> bool {
    stack_id == SLOT_TAKEN
}

/// Samples counted, and those whose kernel or user stack was lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostStacks {
    pub samples: u64,
    pub kernel: u64,
    pub user: u64,
}

impl LostStacks {
    pub fn observe(&mut self, sample: &tt_cpu_sample) {
        self.samples += 1;
        self.kernel += u64::from(slot_taken(sample.kstack_id));
        self.user += u64::from(slot_taken(sample.ustack_id));
    }

    /// What to tell the user when stacks were lost, none otherwise.
    pub fn warning(&self) -> Option<String> {
        if self.kernel == 0 && self.user == 0 {
            return None;
        }
        let share = |n: u64| 100.0 * n as f64 / self.samples.max(1) as f64;
        Some(format!(
            "{} of {} CPU samples ({:.1}%) lost their kernel stack and {} ({:.1}%) their user \
             stack: another stack held the slot of the kernel's stack table that theirs \
             hashed to (drawn as {KERNEL_STACK_LOST} and {USER_STACK_LOST}); a larger \
             --stack-storage makes that rarer",
            self.kernel,
            self.samples,
            share(self.kernel),
            self.user,
            share(self.user)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_full_table_counts_as_lost() {
        let mut lost = LostStacks::default();
        for (kstack_id, ustack_id) in [(3, 4), (SLOT_TAKEN, -libc::EFAULT), (5, SLOT_TAKEN)] {
            lost.observe(&tt_cpu_sample {
                kstack_id,
                ustack_id,
                ..Default::default()
            });
        }
        assert_eq!(
            lost,
            LostStacks {
                samples: 3,
                kernel: 1,
                user: 1
            }
        );
        let warning = lost.warning().unwrap();
        assert!(
            warning.starts_with("1 of 3 CPU samples (33.3%) lost their kernel stack and 1 (33.3%)"),
            "{warning}"
        );
        assert_eq!(LostStacks::default().warning(), None);
    }
}
