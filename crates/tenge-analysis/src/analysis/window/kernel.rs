//! The kernel's receive-window arithmetic (Linux 6.18, `include/net/tcp.h` and
//! `net/ipv4/tcp_output.c`), re-run in user space on the state a `window_adv`
//! event recorded, so that every advertised window can be explained rule by rule.
//! Kernels before 6.7 differ in one place, `tcp_win_from_space()` ([`SpaceRule`]);
//! 6.1's `__tcp_select_window()` is otherwise the same function (6.1.192 has
//! the `tcp_shrink_window` path too).
//!
//! Integer widths follow the kernel: space and window values are `int` there
//! (negative free space is possible), sequence numbers wrap as `u32`.

/// `TCP_RMEM_TO_WIN_SCALE`: `scaling_ratio` is a fraction of 256.
const TCP_RMEM_TO_WIN_SCALE: u32 = 8;
/// `ICSK_ACK_NOMEM` in `icsk_ack.pending`: the last skb could not be charged.
pub const ICSK_ACK_NOMEM: u8 = 32;
/// The largest value of the 16-bit header field.
const MAX_HEADER_WINDOW: u32 = 65535;

/// `scaling_ratio` of a socket no data has reached yet (include/net/tcp.h).
const TCP_DEFAULT_SCALING_RATIO: u8 = 1 << (TCP_RMEM_TO_WIN_SCALE - 1);

/// How `tcp_win_from_space()` turns bytes of buffer into bytes of window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceRule {
    /// 6.7 and later: `space * scaling_ratio >> 8`, the measured
    /// payload/truesize of received skbs (never 0 there).
    Ratio(u8),
    /// Before 6.7: `net.ipv4.tcp_adv_win_scale` of the socket's netns, `a`:
    /// `space >> -a` for `a <= 0`, else `space - (space >> a)`.
    AdvWinScale(i8),
}

impl Default for SpaceRule {
    fn default() -> Self {
        SpaceRule::Ratio(0)
    }
}

impl SpaceRule {
    /// The rule of a `window_adv` event: a kernel with `scaling_ratio`
    /// records it (never 0 there), an older one 0 and its `tcp_adv_win_scale`.
    pub fn of(scaling_ratio: u8, adv_win_scale: i8) -> SpaceRule {
        if scaling_ratio == 0 {
            SpaceRule::AdvWinScale(adv_win_scale)
        } else {
            SpaceRule::Ratio(scaling_ratio)
        }
    }

    /// `tcp_win_from_space()`: the part of `space` bytes of buffer that can
    /// be offered as window.
    pub fn win_from_space(self, space: i64) -> i64 {
        match self {
            SpaceRule::Ratio(ratio) => {
                space.saturating_mul(i64::from(ratio)) >> TCP_RMEM_TO_WIN_SCALE
            }
            SpaceRule::AdvWinScale(a) if a <= 0 => space >> (-i32::from(a)).min(63),
            SpaceRule::AdvWinScale(a) => space - (space >> a.min(63)),
        }
    }

    /// The rule at a handshake, before any data was measured: 6.7+ starts
    /// every socket at `TCP_DEFAULT_SCALING_RATIO` (128, half the buffer).
    pub fn at_handshake(self) -> SpaceRule {
        match self {
            SpaceRule::Ratio(_) => SpaceRule::Ratio(TCP_DEFAULT_SCALING_RATIO),
            rule @ SpaceRule::AdvWinScale(_) => rule,
        }
    }

    /// The inverse of [`SpaceRule::win_from_space`]: the smallest buffer whose
    /// window is at least `window` bytes. None when no buffer has one (ratio 0).
    pub fn space_for_window(self, window: u64) -> Option<u64> {
        match self {
            SpaceRule::Ratio(0) => None,
            SpaceRule::Ratio(ratio) => {
                let space =
                    (u128::from(window) << TCP_RMEM_TO_WIN_SCALE).div_ceil(u128::from(ratio));
                u64::try_from(space).ok()
            }
            SpaceRule::AdvWinScale(a) if a <= 0 => {
                let space = u128::from(window) << (-i32::from(a)).min(63);
                u64::try_from(space).ok()
            }
            SpaceRule::AdvWinScale(a) => {
                // space - space/2^a >= window: from the real-valued bound,
                // which is at most 2 short, up.
                let unit = 1u128 << a.min(62);
                let mut space = (u128::from(window) * unit)
                    .div_ceil(unit - 1)
                    .saturating_sub(2);
                let max = i64::MAX as u128;
                while space <= max
                    && (self.win_from_space(space as i64) as u128) < u128::from(window)
                {
                    space += 1;
                }
                u64::try_from(space).ok().filter(|&s| s <= max as u64)
            }
        }
    }

    /// The rule as the kernel's names say it, for messages.
    pub fn describe(self) -> String {
        match self {
            SpaceRule::Ratio(ratio) => format!("scaling_ratio {ratio}/256"),
            SpaceRule::AdvWinScale(a) => format!("tcp_adv_win_scale {a}"),
        }
    }
}

/// Largest multiple of `unit` (a power of two) not above `x`; floors negatives like the kernel's `round_down`.
fn round_down_pow2(x: i64, unit: i64) -> i64 {
    x & !(unit - 1)
}

/// The kernel's `ALIGN(x, unit)` for a power of two `unit`.
fn align_up_pow2(x: u64, unit: u64) -> u64 {
    (x + unit - 1) & !(unit - 1)
}

/// `rounddown(x, m)` for non-negative `x` and positive `m`.
pub fn round_down_to(x: u64, m: u64) -> u64 {
    if m == 0 {
        x
    } else {
        x - x % m
    }
}

/// What `__tcp_select_window()` and `tcp_select_window()` read from the socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveState {
    pub sk_rcvbuf: u32,
    pub sk_rmem_alloc: u32,
    pub sk_backlog_len: u32,
    pub space_rule: SpaceRule,
    pub window_clamp: u32,
    pub rcv_ssthresh: u32,
    pub rcv_mss: u32,
    pub rcv_wscale: u8,
    pub rcv_nxt: u32,
    /// `icsk_ack.pending & ICSK_ACK_NOMEM`.
    pub nomem: bool,
    /// `net.ipv4.tcp_shrink_window` of the socket's namespace.
    pub shrink_window: bool,
}

/// The offer stored by the previous selection: `tp->rcv_wnd` and `tp->rcv_wup`.
/// Together with the current `rcv_nxt` they give `tcp_receive_window()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorOffer {
    pub rcv_wnd: u32,
    pub rcv_wup: u32,
}

impl PriorOffer {
    /// `tcp_receive_window()`: what is left of the previous offer at `rcv_nxt`.
    pub fn remaining(&self, rcv_nxt: u32) -> u32 {
        let win = self
            .rcv_wup
            .wrapping_add(self.rcv_wnd)
            .wrapping_sub(rcv_nxt) as i32;
        win.max(0) as u32
    }
}

/// Which branch of `__tcp_select_window()` produced its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `full_space <= 0`: no buffer at all.
    NoSpace,
    /// Free space below half the full space and below `rcv_mss`, `allowed/16`
    /// (or `1 << wscale` on the shrink path): the SWS-avoidance zero.
    SwsZero,
    /// `rcv_wscale > 0`: the offerable space aligned to the scale unit (up,
    /// or down on the `tcp_shrink_window` path).
    WscaleAlign,
    /// `rcv_wscale == 0`: `rounddown(offerable, mss)`.
    MssRoundDown,
    /// `rcv_wscale == 0`: the previous `rcv_wnd` is within one MSS below the
    /// offerable space, kept (the hysteresis of the MSS rounding).
    KeptPrevious,
    /// `rcv_wscale == 0` and `mss == full_space`: the whole offerable space.
    MssIsFullSpace,
}

/// The kernel's choice, every intermediate value kept for classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    /// `tcp_space()`; may be negative.
    pub free_space: i64,
    /// `tcp_full_space()`.
    pub allowed_space: i64,
    /// `min(window_clamp, allowed_space)`.
    pub full_space: i64,
    /// `rcv_mss` clipped to `full_space`.
    pub mss: i64,
    /// What the final rounding or alignment started from: the free space,
    /// rounded down to the scale unit under pressure, cut to `rcv_ssthresh`.
    pub offerable: i64,
    /// `rcv_ssthresh` (the soft cap) was below the free space and cut it.
    pub capped: bool,
    /// `__tcp_select_window()`'s result and the rule behind it.
    pub proposed: u32,
    pub rule: Rule,
    /// `tcp_receive_window()` before this selection, when the previous offer is known.
    pub cur_win: Option<u32>,
    /// The never-shrink rule replaced `proposed` by `ALIGN(cur_win, 1 << wscale)`.
    pub never_shrink: bool,
    /// The NOMEM path forced a zero window (and shrank the offer).
    pub nomem: bool,
    /// `tp->rcv_wnd` after the selection (not clamped to the header).
    pub stored: u32,
    /// The header's window, unscaled back to bytes: `min(stored, 65535 << ws) >> ws << ws`.
    pub header: u32,
}

/// `tcp_space()` of a state, with `backlog` in place of `sk_backlog.len`.
fn free_space(s: &ReceiveState, backlog: u32) -> i64 {
    s.space_rule
        .win_from_space(i64::from(s.sk_rcvbuf) - i64::from(backlog) - i64::from(s.sk_rmem_alloc))
}

/// `__tcp_select_window()` on `free` bytes of free space. `prior_rcv_wnd` is
/// `tp->rcv_wnd` before the selection (used by the `rcv_wscale == 0` hysteresis).
fn select_proposal(s: &ReceiveState, free: i64, prior_rcv_wnd: u32) -> Selection {
    let allowed = s.space_rule.win_from_space(i64::from(s.sk_rcvbuf));
    let full = i64::from(s.window_clamp as i32).min(allowed);
    let unit = 1i64 << s.rcv_wscale;
    let ssthresh = i64::from(s.rcv_ssthresh);
    let mss = i64::from(s.rcv_mss as i32).min(full);
    let mut sel = Selection {
        free_space: free,
        allowed_space: allowed,
        full_space: full,
        mss,
        offerable: free,
        capped: false,
        proposed: 0,
        rule: Rule::NoSpace,
        cur_win: None,
        never_shrink: false,
        nomem: false,
        stored: 0,
        header: 0,
    };
    if mss <= 0 {
        return sel;
    }
    let shrink_path = s.shrink_window && s.rcv_wscale > 0;
    let mut offerable = free;
    if shrink_path {
        offerable = round_down_pow2(offerable, unit);
    }
    if offerable < full >> 1 {
        offerable = round_down_pow2(offerable, unit);
        if offerable < allowed >> 4 || offerable < mss || (shrink_path && offerable < unit) {
            sel.rule = Rule::SwsZero;
            return sel;
        }
    }
    sel.capped = offerable > ssthresh;
    if sel.capped {
        offerable = ssthresh;
    }
    sel.offerable = offerable;
    let (window, rule) = if shrink_path {
        // Down to the unit already; only the ssthresh cap is aligned up.
        let window = if sel.capped {
            align_up_pow2(offerable as u64, unit as u64) as i64
        } else {
            offerable
        };
        (window, Rule::WscaleAlign)
    } else if s.rcv_wscale > 0 {
        (
            align_up_pow2(offerable as u64, unit as u64) as i64,
            Rule::WscaleAlign,
        )
    } else {
        let kept = i64::from(prior_rcv_wnd as i32);
        if kept <= offerable - mss || kept > offerable {
            (offerable - offerable % mss, Rule::MssRoundDown)
        } else if mss == full && offerable > kept + (full >> 1) {
            (offerable, Rule::MssIsFullSpace)
        } else {
            (kept, Rule::KeptPrevious)
        }
    };
    sel.proposed = window.clamp(0, i64::from(u32::MAX)) as u32;
    sel.rule = rule;
    sel
}

/// `tcp_select_window()` around `__tcp_select_window()`: the NOMEM zero, the
/// never-shrink rule (unless `tcp_shrink_window` with a scale), and the header clamp.
/// `prior` is the previous selection's stored offer; None when it was not seen,
/// in which case the never-shrink rule cannot be applied.
pub fn select_window(s: &ReceiveState, prior: Option<PriorOffer>) -> Selection {
    select_with_free(s, free_space(s, s.sk_backlog_len), prior)
}

fn select_with_free(s: &ReceiveState, free: i64, prior: Option<PriorOffer>) -> Selection {
    let mut sel = select_proposal(s, free, prior.map_or(0, |p| p.rcv_wnd));
    sel.cur_win = prior.map(|p| p.remaining(s.rcv_nxt));
    sel.nomem = s.nomem;
    if s.nomem {
        return sel;
    }
    sel.stored = sel.proposed;
    if let Some(cur) = sel.cur_win {
        if sel.proposed < cur && (!s.shrink_window || s.rcv_wscale == 0) {
            sel.never_shrink = true;
            sel.stored = align_up_pow2(u64::from(cur), 1 << s.rcv_wscale) as u32;
        }
    }
    sel.header = header_window(sel.stored, s.rcv_wscale);
    sel
}

/// The selection that stored `rcv_wnd`, allowing for a backlog that grew
/// after it: `sk_backlog.len` is read at `net_dev_queue`, and when the owner
/// sends from process context (after a read, or while `release_sock()` works
/// through the backlog) softirq on another CPU keeps appending to it, so the
/// recorded value is only an upper bound of what `tcp_space()` subtracted.
/// (Nothing else the selection reads changes without the socket lock.)
/// Returns the selection with the smallest backlog (most free space) that
/// stores `rcv_wnd`, None if no backlog `<= s.sk_backlog_len` does.
pub fn select_window_backlog_bounded(
    s: &ReceiveState,
    prior: Option<PriorOffer>,
    rcv_wnd: u32,
) -> Option<Selection> {
    if s.nomem {
        return None;
    }
    let prior_rcv_wnd = prior.map_or(0, |p| p.rcv_wnd);
    let proposed = |free| select_proposal(s, free, prior_rcv_wnd).proposed;
    // The proposal does not decrease with free space (tested below), so the
    // most free space whose proposal stays at or below `rcv_wnd` is found by
    // bisection; never-shrink only lifts proposals below the old offer, which
    // the recorded (least) free space already covers.
    let (mut lo, mut hi) = (free_space(s, s.sk_backlog_len), free_space(s, 0));
    if proposed(lo) > rcv_wnd {
        return None;
    }
    if proposed(hi) > rcv_wnd {
        // proposed(lo) <= rcv_wnd < proposed(hi)
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if proposed(mid) > rcv_wnd {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi = lo;
    }
    Some(select_with_free(s, hi, prior)).filter(|sel| sel.stored == rcv_wnd)
}

/// The window a peer reads from the header, in bytes: the 16-bit field holds
/// `min(stored, 65535 << ws) >> ws`.
pub fn header_window(stored: u32, rcv_wscale: u8) -> u32 {
    let cap = u64::from(MAX_HEADER_WINDOW) << rcv_wscale;
    ((u64::from(stored).min(cap) >> rcv_wscale) << rcv_wscale) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The measured receiver of the notes (§6): SO_RCVBUF 65536 → sk_rcvbuf
    /// 131072, scaling_ratio 234 (8948/9780), so allowed = 131072·234 >> 8 = 119808.
    fn measured(rmem: u32, wscale: u8) -> ReceiveState {
        ReceiveState {
            sk_rcvbuf: 131072,
            sk_rmem_alloc: rmem,
            space_rule: SpaceRule::Ratio(234),
            window_clamp: 119808,
            rcv_ssthresh: 119808,
            rcv_mss: 8948,
            rcv_wscale: wscale,
            rcv_nxt: 1000,
            ..Default::default()
        }
    }

    /// A prior offer whose right edge is exactly `remaining` bytes past rcv_nxt 1000.
    fn prior(rcv_wnd: u32, remaining: u32) -> Option<PriorOffer> {
        Some(PriorOffer {
            rcv_wnd,
            rcv_wup: (1000 + remaining).wrapping_sub(rcv_wnd),
        })
    }

    #[test]
    fn adv_win_scale_rule_and_inverse() {
        // 6.1's tcp_win_from_space(): a > 0 keeps space - space >> a.
        assert_eq!(SpaceRule::AdvWinScale(1).win_from_space(66000), 33000);
        assert_eq!(SpaceRule::AdvWinScale(2).win_from_space(100000), 75000);
        assert_eq!(SpaceRule::AdvWinScale(-2).win_from_space(100000), 25000);
        assert_eq!(SpaceRule::AdvWinScale(1).win_from_space(-10), -5);
        for a in -3i8..=5 {
            let rule = SpaceRule::of(0, a);
            for window in [1u64, 1000, 8948, 26844, 65535, 1 << 20] {
                let space = rule.space_for_window(window).unwrap();
                assert!(
                    rule.win_from_space(space as i64) >= window as i64,
                    "{rule:?} {window}"
                );
                assert!(
                    rule.win_from_space(space as i64 - 1) < window as i64,
                    "{rule:?} {window}"
                );
            }
        }
        // A kernel with scaling_ratio records it; an older one records 0 there.
        assert_eq!(SpaceRule::of(234, 0), SpaceRule::Ratio(234));
        assert_eq!(SpaceRule::of(0, 1), SpaceRule::AdvWinScale(1));
    }

    #[test]
    fn win_from_space_and_inverse() {
        // 131072 · 234 = 30670848; >> 8 = 119808.
        assert_eq!(SpaceRule::Ratio(234).win_from_space(131072), 119808);
        // Default ratio 128 is one half: 66000 → 33000.
        assert_eq!(SpaceRule::Ratio(128).win_from_space(66000), 33000);
        // Negative space floors: −10 · 128 = −1280 >> 8 = −5.
        assert_eq!(SpaceRule::Ratio(128).win_from_space(-10), -5);
        // 27001 · 256 / 234 = 29539.56 → 29540 (29540·234 >> 8 = 27001, 29539 gives 27000).
        assert_eq!(SpaceRule::Ratio(234).space_for_window(27001), Some(29540));
        assert_eq!(SpaceRule::Ratio(234).win_from_space(29540), 27001);
        assert_eq!(SpaceRule::Ratio(234).win_from_space(29539), 27000);
        assert_eq!(SpaceRule::Ratio(0).space_for_window(1), None);
    }

    #[test]
    fn measured_26844_is_rounddown_of_27001() {
        // rmem 101532 → space 29540 → free 27001 < full/2 = 59904: SWS regime,
        // but 27001 ≥ rcv_mss and ≥ allowed/16 = 7488, so no zero; ws 0 →
        // rounddown(27001, 8948) = 3·8948 = 26844 (prior 62636 is not within one MSS).
        let sel = select_window(&measured(101532, 0), prior(62636, 30000));
        assert_eq!(sel.free_space, 27001);
        assert_eq!((sel.proposed, sel.rule), (26844, Rule::MssRoundDown));
        assert_eq!(sel.cur_win, Some(30000));
        // 26844 < cur_win 30000: the never-shrink rule keeps the old right edge.
        assert!(sel.never_shrink);
        assert_eq!(sel.stored, 30000);
        // With the old offer consumed (cur_win ≤ 26844) the rounded window goes out.
        let sel = select_window(&measured(101532, 0), prior(62636, 8948));
        assert_eq!(
            (sel.stored, sel.header, sel.never_shrink),
            (26844, 26844, false)
        );
    }

    #[test]
    fn mss_hysteresis_keeps_previous_offer() {
        // free 27001: a previous rcv_wnd of 20000 is in (27001−8948, 27001] = (18053, 27001], kept.
        let sel = select_window(&measured(101532, 0), prior(20000, 0));
        assert_eq!((sel.proposed, sel.rule), (20000, Rule::KeptPrevious));
        // 18053 itself is not (the kernel tests window <= free − mss).
        let sel = select_window(&measured(101532, 0), prior(18053, 0));
        assert_eq!((sel.proposed, sel.rule), (26844, Rule::MssRoundDown));
    }

    #[test]
    fn wscale_aligns_up_not_to_mss() {
        // rmem 29340 → space 101732 → 101732·234 >> 8 = 92989; ≥ full/2, below
        // ssthresh; ws 1 → ALIGN(92989, 2) = 92990 (measured).
        let sel = select_window(&measured(29340, 1), prior(0, 0));
        assert_eq!(sel.free_space, 92989);
        assert_eq!(
            (sel.proposed, sel.rule, sel.stored, sel.header),
            (92990, Rule::WscaleAlign, 92990, 92990)
        );
    }

    #[test]
    fn sws_zero_below_rcv_mss() {
        // rmem 128376 (ss: r128376) → space 2696 → 2696·234 >> 8 = 2464 < 8948: zero.
        let sel = select_window(&measured(128376, 0), prior(8948, 0));
        assert_eq!(sel.free_space, 2464);
        assert_eq!(
            (sel.proposed, sel.rule, sel.stored, sel.header),
            (0, Rule::SwsZero, 0, 0)
        );
        // Same state while 832 B of an earlier offer remain: never shrink, ALIGN(832, 1).
        let sel = select_window(&measured(128376, 0), prior(8948, 832));
        assert_eq!((sel.proposed, sel.never_shrink, sel.stored), (0, true, 832));
    }

    #[test]
    fn never_shrink_residual_aligned_to_scale() {
        // ws 1, free 2464 → round_down(2464, 2) = 2464 < mss: proposal 0; 831 B
        // remain of the old offer → ALIGN(831, 2) = 832.
        let sel = select_window(&measured(128376, 1), prior(9780, 831));
        assert_eq!(
            (sel.proposed, sel.never_shrink, sel.stored, sel.header),
            (0, true, 832, 832)
        );
        // With tcp_shrink_window=1 and a scale the residual is retracted to 0.
        let mut s = measured(128376, 1);
        s.shrink_window = true;
        let sel = select_window(&s, prior(9780, 831));
        assert_eq!((sel.never_shrink, sel.stored), (false, 0));
        // ... but without a scale the sysctl does nothing: the residual stays.
        let mut s = measured(128376, 0);
        s.shrink_window = true;
        assert_eq!(select_window(&s, prior(9780, 831)).stored, 831);
    }

    #[test]
    fn shrink_path_rounds_down_and_aligns_ssthresh_up() {
        let mut s = measured(29340, 3);
        s.shrink_window = true;
        // free 92989 → round_down(92989, 8) = 92984; not SWS; below ssthresh.
        assert_eq!(select_window(&s, None).proposed, 92984);
        // ssthresh 50001 → ALIGN(50001, 8) = 50008.
        s.rcv_ssthresh = 50001;
        let sel = select_window(&s, None);
        assert_eq!(
            (sel.proposed, sel.rule, sel.capped, sel.offerable),
            (50008, Rule::WscaleAlign, true, 50001)
        );
    }

    #[test]
    fn header_clamp_at_65535_without_scale() {
        // rmem 33000 → space 98072 → 98072·234 = 22948848 >> 8 = 89643 ≥ full/2.
        // ssthresh 85000 caps it: rounddown(85000, 8948) = 9·8948 = 80532, the
        // measured internal rcv_wnd; the 16-bit header says 65535.
        let mut s = measured(33000, 0);
        s.rcv_ssthresh = 85000;
        let sel = select_window(&s, prior(0, 0));
        assert_eq!(sel.free_space, 89643);
        // The cap comes first, the MSS rounding still applies after it.
        assert_eq!(
            (sel.proposed, sel.rule, sel.capped, sel.offerable),
            (80532, Rule::MssRoundDown, true, 85000)
        );
        assert_eq!((sel.stored, sel.header), (80532, 65535));
        // With ws 2 the cap is 65535 << 2 = 262140, no clamp.
        assert_eq!(header_window(80532, 2), 80532);
        assert_eq!(header_window(300000, 2), 262140);
    }

    #[test]
    fn nomem_forces_zero_and_shrinks() {
        let mut s = measured(29340, 1);
        s.nomem = true;
        let sel = select_window(&s, prior(92990, 50000));
        assert_eq!((sel.nomem, sel.stored, sel.header), (true, 0, 0));
    }

    #[test]
    fn mss_clipped_to_full_space_and_whole_free_space() {
        // A tiny clamp: window_clamp 8000 < rcv_mss 8948 → mss = full = 8000.
        // free 27001 ≥ 4000 → not SWS; capped? ssthresh 8000 → free = 8000.
        // ws 0, prior 0 ≤ 8000 − 8000 → rounddown(8000, 8000) = 8000.
        let mut s = measured(101532, 0);
        s.window_clamp = 8000;
        s.rcv_ssthresh = 8000;
        let sel = select_window(&s, prior(0, 0));
        assert_eq!((sel.mss, sel.proposed), (8000, 8000));
        // mss == full, prior 3000 is in (0, 8000], and free 8000 > 3000 + 4000 → free.
        let sel = select_window(&s, prior(3000, 0));
        assert_eq!(sel.proposed, 8000);
        // No buffer: window_clamp 0 → full 0 → zero.
        s.window_clamp = 0;
        assert_eq!(select_window(&s, None).rule, Rule::NoSpace);
    }

    /// `select_window_backlog_bounded` bisects on this: for every branch the
    /// proposal does not decrease as free space grows.
    #[test]
    fn proposal_never_decreases_with_free_space() {
        let mut states = Vec::new();
        for wscale in [0, 1, 3] {
            for shrink_window in [false, true] {
                for rcv_ssthresh in [119808, 50001, 26844] {
                    states.push(ReceiveState {
                        rcv_wscale: wscale,
                        shrink_window,
                        rcv_ssthresh,
                        ..measured(0, wscale)
                    });
                }
            }
        }
        // mss == full_space: the MssIsFullSpace branch.
        states.push(ReceiveState {
            window_clamp: 8000,
            rcv_ssthresh: 8000,
            ..measured(0, 0)
        });
        for s in &states {
            for prior in [0, 3000, 20000, 26844, 53688, 62636] {
                let mut last = 0;
                for free in (-1000..130_000).step_by(7) {
                    let p = select_proposal(s, free, prior).proposed;
                    assert!(
                        p >= last,
                        "{s:?} prior {prior}: free {free} gives {p} < {last}"
                    );
                    last = p;
                }
            }
        }
    }

    /// Measured (rwnd-limited scenario, MTU 1500, SO_RCVBUF 16384): the ACK
    /// carried 23168 = 16 × 1448 while the state read at net_dev_queue gives
    /// 17376, because 12416 B of backlog arrived on the other CPU in between.
    #[test]
    fn backlog_that_grew_after_the_selection() {
        let s = ReceiveState {
            sk_rcvbuf: 32768,
            sk_backlog_len: 12416,
            space_rule: SpaceRule::Ratio(229),
            window_clamp: 29312,
            rcv_ssthresh: 24560,
            rcv_mss: 1448,
            rcv_nxt: 1_000_000,
            ..Default::default()
        };
        // The previous offer 23168 has 11584 B left.
        let prior = Some(PriorOffer {
            rcv_wnd: 23168,
            rcv_wup: 1_000_000 + 11584 - 23168,
        });
        // (32768 − 12416) · 229 >> 8 = 18205 → rounddown(18205, 1448) = 12 · 1448 = 17376.
        let sel = select_window(&s, prior);
        assert_eq!((sel.free_space, sel.stored), (18205, 17376));
        // 23168 is kept while it lies in (offerable − 1448, offerable], that is
        // for offerable 23168..=24560 (the cap): space ≥ ⌈23168 · 256 / 229⌉ =
        // 25900, backlog ≤ 32768 − 25900 = 6868. The least backlog, 0, explains it.
        assert_eq!(SpaceRule::Ratio(229).win_from_space(32768 - 6868), 23168);
        assert_eq!(SpaceRule::Ratio(229).win_from_space(32768 - 6869), 23167);
        let sel = select_window_backlog_bounded(&s, prior, 23168).unwrap();
        assert_eq!(
            (
                sel.free_space,
                sel.offerable,
                sel.rule,
                sel.stored,
                sel.header
            ),
            (29312, 24560, Rule::KeptPrevious, 23168, 23168)
        );
        // 21720 = 15 · 1448 only from offerable 21720..=23167 (space 24283..=25899):
        // the most free space is 23167, at backlog 6869.
        let sel = select_window_backlog_bounded(&s, prior, 21720).unwrap();
        assert_eq!((sel.free_space, sel.rule), (23167, Rule::MssRoundDown));
        assert_eq!(
            SpaceRule::Ratio(229).win_from_space(32768 - 6869),
            sel.free_space
        );
        // No backlog at all: 29312 capped to 24560, 23168 kept; more is impossible.
        assert_eq!(select_window_backlog_bounded(&s, prior, 24616), None);
        // Nor a value between the rounding steps.
        assert_eq!(select_window_backlog_bounded(&s, prior, 20000), None);
    }

    #[test]
    fn paper_receiver_example() {
        // Feng et al. §3.5.1: 33000 free, receiver MSS 8948 → 26844.
        // ratio 128, rcvbuf 131072, rmem 65072 → space 66000 → free 33000;
        // allowed 65536, full 65536, 33000 ≥ 32768: no SWS regime.
        let s = ReceiveState {
            sk_rcvbuf: 131072,
            sk_rmem_alloc: 65072,
            space_rule: SpaceRule::Ratio(128),
            window_clamp: 65536,
            rcv_ssthresh: 65536,
            rcv_mss: 8948,
            ..Default::default()
        };
        let sel = select_window(&s, None);
        assert_eq!((sel.free_space, sel.proposed), (33000, 26844));
    }
}
