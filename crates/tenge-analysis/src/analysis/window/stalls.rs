//! Silly-window stalls: the window offered to a sender with data waiting stays
//! below one receiver MSS (zero included) until a window of a full MSS opens.

use serde::Serialize;

/// Where a stall was seen from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StallSide {
    /// The sender's ACKs (`tcp_rcv`): it knows its queue, so this is exact.
    Sender,
    /// The receiver's own offers (`window_adv`), used when the sender is not
    /// traced: the sender is assumed to have data waiting.
    Receiver,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SwsStall {
    pub start_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
    /// False when no window ended the stall: the trace ended inside it
    /// (`end_ns` is then the flow's last event), or its socket closed
    /// after its alert fired (`end_ns`: the close).
    pub ended: bool,
    pub observed_at: StallSide,
    /// The window that started the stall and the MSS it was compared with.
    pub window_at_start: u32,
    pub mss: u32,
    /// Persist-timer probes: len-0 segments at `snd_una − 1`, or `icsk_probes_out` rising (the larger count).
    pub zero_window_probes: u32,
    /// Data segments shorter than an MSS (the sender-side SWS signature).
    pub sub_mss_segments: u32,
    pub bytes_delivered: u64,
}

#[derive(Debug)]
struct Active {
    stall: SwsStall,
    probes_by_seq: u32,
    probes_out_rises: u32,
    last_probes_out: Option<u8>,
    alerted: bool,
}

/// One detector per side of a socket.
#[derive(Debug, Default)]
pub(super) struct StallDetector {
    /// Boxed: every event asks whether a stall is running, and the
    /// detectors of both sides then share one cache line.
    active: Option<Box<Active>>,
    pub done: Vec<SwsStall>,
}

/// What a window observation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transition {
    None,
    Started,
    /// The stall is in `done.last()`; `alerted` tells whether it was reported while running.
    Ended {
        alerted: bool,
    },
}

impl StallDetector {
    /// Feeds the window now offered to the sender. A stall starts when it is
    /// below `mss` while data waits and ends when it reaches `mss` again.
    pub fn window(
        &mut self,
        ts_ns: u64,
        window: u32,
        mss: u32,
        data_waiting: bool,
        side: StallSide,
    ) -> Transition {
        if mss == 0 {
            return Transition::None;
        }
        match &mut self.active {
            None if window < mss && data_waiting => {
                self.active = Some(Box::new(Active {
                    stall: SwsStall {
                        start_ns: ts_ns,
                        end_ns: ts_ns,
                        duration_ns: 0,
                        ended: false,
                        observed_at: side,
                        window_at_start: window,
                        mss,
                        zero_window_probes: 0,
                        sub_mss_segments: 0,
                        bytes_delivered: 0,
                    },
                    probes_by_seq: 0,
                    probes_out_rises: 0,
                    last_probes_out: None,
                    alerted: false,
                }));
                Transition::Started
            }
            Some(a) if window >= mss => {
                let alerted = a.alerted;
                self.close(ts_ns, true);
                Transition::Ended { alerted }
            }
            _ => Transition::None,
        }
    }

    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// A stall is running and its alert fired.
    pub fn is_alerted(&self) -> bool {
        self.active.as_ref().is_some_and(|a| a.alerted)
    }

    /// A zero-window probe recognised by its sequence number.
    pub fn probe(&mut self) {
        if let Some(a) = &mut self.active {
            a.probes_by_seq += 1;
        }
    }

    /// The sender's `icsk_probes_out`; each rise during the stall is one probe.
    pub fn probes_out(&mut self, probes_out: u8) {
        if let Some(a) = &mut self.active {
            if let Some(last) = a.last_probes_out {
                a.probes_out_rises += u32::from(probes_out.saturating_sub(last));
            }
            a.last_probes_out = Some(probes_out);
        }
    }

    pub fn sub_mss_segment(&mut self) {
        if let Some(a) = &mut self.active {
            a.stall.sub_mss_segments += 1;
        }
    }

    pub fn delivered(&mut self, bytes: u64) {
        if let Some(a) = &mut self.active {
            a.stall.bytes_delivered += bytes;
        }
    }

    /// When the stall in progress, not reported yet, will have lasted
    /// `min_duration_ns`.
    pub fn alert_due_ns(&self, min_duration_ns: u64) -> Option<u64> {
        let a = self.active.as_ref().filter(|a| !a.alerted)?;
        Some(a.stall.start_ns.saturating_add(min_duration_ns))
    }

    /// The stall in progress, if it has lasted `min_duration_ns` by `now` and
    /// was not reported yet; marks it reported. Call after every event.
    pub fn due_alert(&mut self, now_ns: u64, min_duration_ns: u64) -> Option<SwsStall> {
        let a = self.active.as_mut()?;
        if a.alerted || now_ns.saturating_sub(a.stall.start_ns) < min_duration_ns {
            return None;
        }
        a.alerted = true;
        let mut snapshot = a.stall.clone();
        snapshot.end_ns = now_ns;
        snapshot.duration_ns = now_ns - snapshot.start_ns;
        snapshot.zero_window_probes = a.probes_by_seq.max(a.probes_out_rises);
        Some(snapshot)
    }

    fn close(&mut self, ts_ns: u64, ended: bool) {
        if let Some(a) = self.active.take() {
            let mut s = a.stall;
            s.end_ns = ts_ns.max(s.start_ns);
            s.duration_ns = s.end_ns - s.start_ns;
            s.ended = ended;
            s.zero_window_probes = a.probes_by_seq.max(a.probes_out_rises);
            self.done.push(s);
        }
    }

    /// Stalls so far (the one in progress included), their time up to
    /// `now_ns`, and whether one is in progress.
    pub fn so_far(&self, now_ns: u64) -> (u64, u64, bool) {
        let done_ns: u64 = self.done.iter().map(|s| s.duration_ns).sum();
        match &self.active {
            Some(a) => (
                self.done.len() as u64 + 1,
                done_ns + now_ns.saturating_sub(a.stall.start_ns),
                true,
            ),
            None => (self.done.len() as u64, done_ns, false),
        }
    }

    /// Closes a stall still open when the trace ends.
    pub fn finish(&mut self, last_ns: u64) {
        self.close(last_ns, false);
    }
}
