//! `ss -tinm` inside a namespace, parsed: the kernel's own view of a socket,
//! independent of anything tenge-trace computes.

use super::netns::{exec_command, run};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;

/// `skmem:(r…,rb…,t…,tb…,f…,w…,o…,bl…,d…)`: socket memory in bytes, `d` drops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skmem {
    pub rmem_alloc: u64,
    pub rcvbuf: u64,
    pub wmem_alloc: u64,
    pub sndbuf: u64,
    pub fwd_alloc: u64,
    pub wmem_queued: u64,
    pub optmem: u64,
    pub backlog: u64,
    pub drops: u64,
}

/// One established TCP socket as `ss -tinm` prints it. Fields `ss` leaves out
/// (it prints e.g. `ssthresh` and `wscale` only when they apply) are `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SsSocket {
    pub local: Option<SocketAddr>,
    pub peer: Option<SocketAddr>,
    pub recv_q: u64,
    pub send_q: u64,
    pub congestion: Option<String>,
    /// (snd_wscale, rcv_wscale).
    pub wscale: Option<(u8, u8)>,
    pub mss: Option<u32>,
    pub pmtu: Option<u32>,
    pub rcvmss: Option<u32>,
    pub advmss: Option<u32>,
    pub cwnd: Option<u32>,
    pub ssthresh: Option<u32>,
    pub rtt_ms: Option<f64>,
    pub rttvar_ms: Option<f64>,
    pub busy_ms: Option<u64>,
    pub rwnd_limited_ms: Option<u64>,
    pub rwnd_limited_pct: Option<f64>,
    pub sndbuf_limited_ms: Option<u64>,
    pub sndbuf_limited_pct: Option<f64>,
    pub rcv_space: Option<u32>,
    pub rcv_ssthresh: Option<u32>,
    pub snd_wnd: Option<u32>,
    pub rcv_wnd: Option<u32>,
    pub bytes_sent: Option<u64>,
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    pub retrans_total: Option<u32>,
    pub skmem: Option<Skmem>,
}

impl SsSocket {
    /// The local port (0 if `ss` printed none).
    pub fn local_port(&self) -> u16 {
        self.local.map_or(0, |a| a.port())
    }
}

/// Established TCP sockets in `netns` with source or destination port `port`.
pub fn query(netns: &str, port: u16) -> Result<Vec<SsSocket>> {
    let filter = format!("( sport = :{port} or dport = :{port} )");
    let output =
        run(exec_command(netns, "ss").args(["-H", "-tinm", "state", "established", &filter]))?;
    parse(&String::from_utf8_lossy(&output.stdout))
        .with_context(|| format!("parsing ss output of {netns}"))
}

/// Whether something in `netns` listens on TCP `port`.
pub fn is_listening(netns: &str, port: u16) -> Result<bool> {
    let filter = format!("( sport = :{port} )");
    let output = run(exec_command(netns, "ss").args(["-H", "-tln", &filter]))?;
    Ok(!output.stdout.iter().all(u8::is_ascii_whitespace))
}

/// Parses `ss -H -tinm state established` output: per socket, a line with
/// `Recv-Q Send-Q Local Peer` and a tab-indented line of details.
pub fn parse(text: &str) -> Result<Vec<SsSocket>> {
    let mut sockets: Vec<SsSocket> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            let Some(socket) = sockets.last_mut() else {
                bail!("details before a socket line: {line:?}");
            };
            parse_details(line, socket)?;
        } else {
            sockets.push(parse_socket_line(line)?);
        }
    }
    Ok(sockets)
}

fn parse_socket_line(line: &str) -> Result<SsSocket> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let [recv_q, send_q, local, peer, ..] = words[..] else {
        bail!("short socket line: {line:?}");
    };
    Ok(SsSocket {
        recv_q: recv_q
            .parse()
            .with_context(|| format!("Recv-Q in {line:?}"))?,
        send_q: send_q
            .parse()
            .with_context(|| format!("Send-Q in {line:?}"))?,
        local: parse_addr(local),
        peer: parse_addr(peer),
        ..SsSocket::default()
    })
}

/// `198.18.0.1:5201`, `[::ffff:198.18.0.2]:5201` (shown as IPv4),
/// `[fe80::1%veth]:22`; `*:*` and the like give `None`.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let without_scope = match (text.find('%'), text.rfind(']')) {
        (Some(p), Some(b)) if p < b => format!("{}{}", &text[..p], &text[b..]),
        _ => text.to_string(),
    };
    let addr: SocketAddr = without_scope.parse().ok()?;
    Some(SocketAddr::new(addr.ip().to_canonical(), addr.port()))
}

/// Words printed without a value that are not the congestion control name.
const BARE_FLAGS: &[&str] = &[
    "ts",
    "sack",
    "ecn",
    "ecnseen",
    "fastopen",
    "app_limited",
    "tcp-ulp-tls",
    "tcp-ulp-mptcp",
];
/// Keys printed as `key value` rather than `key:value`.
const SPACED_KEYS: &[&str] = &["send", "pacing_rate", "delivery_rate", "max_pacing_rate"];

fn parse_details(line: &str, s: &mut SsSocket) -> Result<()> {
    let mut fields: HashMap<&str, &str> = HashMap::new();
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if let Some((key, value)) = word.split_once(':') {
            fields.insert(key, value);
        } else if SPACED_KEYS.contains(&word) {
            words.next();
        } else if s.congestion.is_none() && !BARE_FLAGS.contains(&word) {
            s.congestion = Some(word.to_string());
        }
    }
    let num = |key: &str| -> Result<Option<u64>> {
        fields
            .get(key)
            .map(|v| v.parse::<u64>().with_context(|| format!("{key}:{v}")))
            .transpose()
    };
    let num32 = |key: &str| -> Result<Option<u32>> { Ok(num(key)?.map(|v| v as u32)) };
    s.mss = num32("mss")?;
    s.pmtu = num32("pmtu")?;
    s.rcvmss = num32("rcvmss")?;
    s.advmss = num32("advmss")?;
    s.cwnd = num32("cwnd")?;
    s.ssthresh = num32("ssthresh")?;
    s.rcv_space = num32("rcv_space")?;
    s.rcv_ssthresh = num32("rcv_ssthresh")?;
    s.snd_wnd = num32("snd_wnd")?;
    s.rcv_wnd = num32("rcv_wnd")?;
    s.bytes_sent = num("bytes_sent")?;
    s.bytes_acked = num("bytes_acked")?;
    s.bytes_received = num("bytes_received")?;
    if let Some(rtt) = fields.get("rtt") {
        let (mean, var) = rtt.split_once('/').unwrap_or((rtt, ""));
        s.rtt_ms = Some(mean.parse().with_context(|| format!("rtt:{rtt}"))?);
        s.rttvar_ms = var.parse().ok();
    }
    if let Some(wscale) = fields.get("wscale") {
        let (snd, rcv) = wscale
            .split_once(',')
            .with_context(|| format!("wscale:{wscale}"))?;
        s.wscale = Some((snd.parse()?, rcv.parse()?));
    }
    if let Some(busy) = fields.get("busy") {
        s.busy_ms = Some(parse_ms(busy)?);
    }
    if let Some(v) = fields.get("rwnd_limited") {
        let (ms, pct) = parse_ms_pct(v)?;
        (s.rwnd_limited_ms, s.rwnd_limited_pct) = (Some(ms), Some(pct));
    }
    if let Some(v) = fields.get("sndbuf_limited") {
        let (ms, pct) = parse_ms_pct(v)?;
        (s.sndbuf_limited_ms, s.sndbuf_limited_pct) = (Some(ms), Some(pct));
    }
    if let Some(v) = fields.get("retrans") {
        // `retrans:<in flight>/<total>`
        let total = v.split_once('/').map_or(*v, |(_, t)| t);
        s.retrans_total = Some(total.parse().with_context(|| format!("retrans:{v}"))?);
    }
    if let Some(v) = fields.get("skmem") {
        s.skmem = Some(parse_skmem(v)?);
    }
    Ok(())
}

/// `316ms`
fn parse_ms(v: &str) -> Result<u64> {
    let ms = v
        .strip_suffix("ms")
        .with_context(|| format!("{v}: no ms"))?;
    Ok(ms.parse()?)
}

/// `316ms(34.8%)`
fn parse_ms_pct(v: &str) -> Result<(u64, f64)> {
    let (ms, rest) = v.split_once('(').with_context(|| format!("{v}: no (%)"))?;
    let pct = rest.trim_end_matches(')').trim_end_matches('%');
    Ok((parse_ms(ms)?, pct.parse()?))
}

/// `(r0,rb131072,t0,tb499200,f0,w0,o0,bl0,d0)`
fn parse_skmem(v: &str) -> Result<Skmem> {
    let mut m = Skmem::default();
    for item in v.trim_matches(|c| c == '(' || c == ')').split(',') {
        let digits = item
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(item.len());
        let (key, value) = item.split_at(digits);
        let value: u64 = value.parse().with_context(|| format!("skmem {item}"))?;
        let slot = match key {
            "r" => &mut m.rmem_alloc,
            "rb" => &mut m.rcvbuf,
            "t" => &mut m.wmem_alloc,
            "tb" => &mut m.sndbuf,
            "f" => &mut m.fwd_alloc,
            "w" => &mut m.wmem_queued,
            "o" => &mut m.optmem,
            "bl" => &mut m.backlog,
            "d" => &mut m.drops,
            _ => continue,
        };
        *slot = value;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// iperf3 -w 33000 between two lab namespaces, MTU 9000, window scaling
    /// off on the receiver (iproute2 6.1, kernel 6.18): sender side.
    const IPERF_SENDER: &str = "0      26844   198.19.255.1:53850 198.19.255.2:5201\n\t skmem:(r0,rb66000,t0,tb66000,f996,w27676,o0,bl0,d0) bbr rto:204 rtt:0.017/0.008 mss:8948 pmtu:9000 rcvmss:536 advmss:8948 cwnd:34 ssthresh:24 bytes_sent:1511760789 bytes_retrans:53688 bytes_acked:1511653414 segs_out:173063 segs_in:38180 data_segs_out:173061 bbr:(bw:30678855312bps,mrtt:0.004,pacing_gain:1.25,cwnd_gain:2) send 143168000000bps lastrcv:1004 pacing_rate 30372066760bps delivery_rate 26844000000bps delivered:173056 busy:908ms rwnd_limited:316ms(34.8%) sndbuf_limited:24ms(2.6%) unacked:6 retrans:0/6 dsack_dups:6 rcv_space:24052 rcv_ssthresh:24052 notsent:26844 minrtt:0.004 snd_wnd:53688\n";
    /// The receiving end of the same connection (iperf3 listens on `::`).
    const IPERF_RECEIVER: &str = "26844  0      [::ffff:198.19.255.2]:5201 [::ffff:198.19.255.1]:53850\n\t skmem:(r27676,rb66000,t0,tb66000,f996,w0,o0,bl0,d6) bbr rto:204 rtt:0.014/0.007 ato:40 mss:8948 pmtu:9000 rcvmss:8948 advmss:8948 cwnd:10 bytes_received:1521745957 segs_out:38428 segs_in:174212 data_segs_in:174210 bbr:(bw:0bps,mrtt:0.014) send 51131428571bps lastsnd:1012 pacing_rate 146126024320bps delivered:1 app_limited rcv_rtt:0.007 rcv_space:89480 rcv_ssthresh:58050 minrtt:0.014 rcv_ooopack:6 snd_wnd:26880                                                                                                   \n";

    /// The lab's sws-stall scenario, read in `hold` (`ss -tinm`, header cut).
    const LAB_SWS_SENDER: &str = "0      0       198.19.111.1:52062 198.19.111.2:38785\n\t skmem:(r0,rb131072,t0,tb1248000,f0,w0,o0,bl0,d0) bbr rto:204 rtt:1.788/3.404 mss:8948 pmtu:9000 rcvmss:536 advmss:8948 cwnd:34 ssthresh:24 bytes_sent:1066472 bytes_retrans:17896 bytes_acked:1048577 segs_out:126 segs_in:27 data_segs_out:120 bbr:(bw:14316799144bps,mrtt:0.008,pacing_gain:1.25,cwnd_gain:2) send 1361217002bps lastsnd:16 lastrcv:3028 lastack:16 pacing_rate 17717038936bps delivery_rate 14316800000bps delivered:121 busy:3012ms rwnd_limited:3012ms(100.0%) retrans:0/2 dsack_dups:2 rcv_space:56588 rcv_ssthresh:56588 minrtt:0.008 snd_wnd:65535\n";
    /// The lab's healthy scenario, receiving end (window scaling on).
    const LAB_HEALTHY_RECEIVER: &str = "0      0       198.18.198.2:33095 198.18.198.1:44018\n\t skmem:(r0,rb1569443,t0,tb499200,f0,w0,o0,bl0,d0) bbr wscale:10,10 rto:204 rtt:0.019/0.009 ato:40 mss:8948 pmtu:9000 rcvmss:8948 advmss:8948 cwnd:10 bytes_received:268435456 segs_out:4105 segs_in:30003 data_segs_in:30001 bbr:(bw:0bps,mrtt:0.019) send 37675789474bps lastsnd:1160 lastrcv:12 lastack:12 pacing_rate 107671805472bps delivered:1 app_limited rcv_rtt:0.031 rcv_space:375816 rcv_ssthresh:1466124 minrtt:0.019 snd_wnd:63488\n";

    #[test]
    fn parses_lab_runs() {
        let s = &parse(LAB_SWS_SENDER).unwrap()[0];
        assert_eq!(s.peer, Some("198.19.111.2:38785".parse().unwrap()));
        assert_eq!(
            (s.busy_ms, s.rwnd_limited_ms, s.rwnd_limited_pct),
            (Some(3012), Some(3012), Some(100.0))
        );
        assert_eq!((s.sndbuf_limited_ms, s.retrans_total), (None, Some(2)));
        assert_eq!((s.rtt_ms, s.rttvar_ms), (Some(1.788), Some(3.404)));
        assert_eq!(s.snd_wnd, Some(65535));

        let r = &parse(LAB_HEALTHY_RECEIVER).unwrap()[0];
        assert_eq!(r.wscale, Some((10, 10)));
        assert_eq!(r.congestion.as_deref(), Some("bbr"));
        assert_eq!((r.rcv_space, r.rcv_ssthresh), (Some(375816), Some(1466124)));
        assert_eq!(r.skmem.unwrap().rcvbuf, 1569443);
    }

    #[test]
    fn parses_a_window_limited_sender() {
        let s = &parse(IPERF_SENDER).unwrap()[0];
        assert_eq!(s.local, Some("198.19.255.1:53850".parse().unwrap()));
        assert_eq!(s.peer, Some("198.19.255.2:5201".parse().unwrap()));
        assert_eq!((s.recv_q, s.send_q), (0, 26844));
        assert_eq!(s.congestion.as_deref(), Some("bbr"));
        assert_eq!(
            (s.mss, s.rcvmss, s.advmss),
            (Some(8948), Some(536), Some(8948))
        );
        assert_eq!(
            (s.cwnd, s.ssthresh, s.pmtu),
            (Some(34), Some(24), Some(9000))
        );
        assert_eq!((s.rtt_ms, s.rttvar_ms), (Some(0.017), Some(0.008)));
        assert_eq!(s.busy_ms, Some(908));
        assert_eq!(
            (s.rwnd_limited_ms, s.rwnd_limited_pct),
            (Some(316), Some(34.8))
        );
        assert_eq!(
            (s.sndbuf_limited_ms, s.sndbuf_limited_pct),
            (Some(24), Some(2.6))
        );
        assert_eq!((s.snd_wnd, s.rcv_wnd, s.wscale), (Some(53688), None, None));
        assert_eq!(s.retrans_total, Some(6));
        assert_eq!(s.bytes_acked, Some(1511653414));
        let m = s.skmem.unwrap();
        assert_eq!(
            (m.rcvbuf, m.sndbuf, m.fwd_alloc, m.wmem_queued),
            (66000, 66000, 996, 27676)
        );
    }

    #[test]
    fn parses_a_v4_mapped_receiver() {
        let s = &parse(IPERF_RECEIVER).unwrap()[0];
        assert_eq!(s.local, Some("198.19.255.2:5201".parse().unwrap()));
        assert_eq!(s.local_port(), 5201);
        assert_eq!(s.recv_q, 26844);
        assert_eq!(
            (s.rcvmss, s.rcv_space, s.rcv_ssthresh),
            (Some(8948), Some(89480), Some(58050))
        );
        assert_eq!(
            (s.ssthresh, s.busy_ms, s.rwnd_limited_ms),
            (None, None, None)
        );
        assert_eq!(s.bytes_received, Some(1521745957));
        let m = s.skmem.unwrap();
        assert_eq!((m.rmem_alloc, m.drops), (27676, 6));
    }

    #[test]
    fn parses_several_sockets_and_rejects_orphan_details() {
        let both = format!("{IPERF_SENDER}{IPERF_RECEIVER}");
        assert_eq!(parse(&both).unwrap().len(), 2);
        assert!(parse("\t skmem:(r0) cubic mss:1448\n").is_err());
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn addresses_with_scope_and_wildcards() {
        assert_eq!(
            parse_addr("[fe80::1%veth-snd]:22"),
            Some("[fe80::1]:22".parse().unwrap())
        );
        assert_eq!(parse_addr("*:*"), None);
    }
}
