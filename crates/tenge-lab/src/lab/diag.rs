//! One TCP socket's receive queue through sock_diag (`inet_diag`, the
//! netlink interface `ss` reads), looked up by its addresses: the kernel
//! reads `rcv_nxt − copied_seq` without the socket lock, in microseconds.
//! /proc/net/tcp shows the same value, but only after walking the whole
//! established hash (262144 buckets here: 3.4 ms per read, so a poll's
//! value came from some fixed time after its stamp); `SIOCINQ` takes the
//! socket lock, and so lands just after a reader released it.

use std::fs::File;
use std::io;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h; libc does not name it).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `struct nlmsghdr`.
const NLMSG_HDR: usize = 16;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, then the
/// 48-byte `inet_diag_sockid`.
const REQ_LEN: usize = 8 + 48;
/// Where `idiag_rqueue` sits in `struct inet_diag_msg`: family, state,
/// timer, retrans, the sockid, `idiag_expires`.
const MSG_RQUEUE: usize = 4 + 48 + 4;

/// A sock_diag netlink socket in the calling thread's network namespace.
pub struct SockDiag {
    socket: File,
}

impl SockDiag {
    pub fn open() -> io::Result<SockDiag> {
        // SAFETY: plain socket(2); the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new descriptor this function owns.
        Ok(SockDiag {
            socket: File::from(unsafe { OwnedFd::from_raw_fd(fd) }),
        })
    }

    /// The receive queue (bytes received, not yet read) of the TCP socket
    /// bound to `local` and connected to `remote`.
    pub fn unread(&self, local: SocketAddr, remote: SocketAddr) -> io::Result<u32> {
        // A netlink datagram socket takes write(2) and read(2) as send and recv.
        let mut socket = &self.socket;
        socket.write_all(&request(local, remote))?;
        let mut reply = [0u8; 512];
        let got = socket.read(&mut reply)?;
        parse_unread(&reply[..got])
    }
}

/// A request for the one socket `local` ↔ `remote` (`inet_diag_find_one_icsk`),
/// no extensions (no `tcp_info`, which takes the socket lock), any cookie.
fn request(local: SocketAddr, remote: SocketAddr) -> Vec<u8> {
    let len = NLMSG_HDR + REQ_LEN;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&[0; 8]); // sequence, port id
    let family = match local {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    m.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    m.extend_from_slice(&local.port().to_be_bytes());
    m.extend_from_slice(&remote.port().to_be_bytes());
    for addr in [local, remote] {
        m.extend_from_slice(&address_bytes(addr));
    }
    m.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    m.extend_from_slice(&u64::MAX.to_ne_bytes()); // INET_DIAG_NOCOOKIE
    m
}

/// An address as `idiag_src`/`idiag_dst` hold it: 16 bytes, IPv4 in the first 4.
fn address_bytes(addr: SocketAddr) -> [u8; 16] {
    let mut out = [0; 16];
    match addr {
        SocketAddr::V4(a) => out[..4].copy_from_slice(&a.ip().octets()),
        SocketAddr::V6(a) => out.copy_from_slice(&a.ip().octets()),
    }
    out
}

/// `idiag_rqueue` of an `inet_diag_msg` reply, or the error the kernel sent.
fn parse_unread(reply: &[u8]) -> io::Result<u32> {
    let u32_at = |at: usize| -> io::Result<u32> {
        reply
            .get(at..at + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "short sock_diag reply"))
    };
    let kind = u32_at(4)? & 0xffff;
    if kind == libc::NLMSG_ERROR as u32 {
        let errno = u32_at(NLMSG_HDR)? as i32;
        return Err(io::Error::from_raw_os_error(-errno));
    }
    if kind != u32::from(SOCK_DIAG_BY_FAMILY) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("sock_diag replied with message type {kind}"),
        ));
    }
    u32_at(NLMSG_HDR + MSG_RQUEUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn the_receive_queue_is_what_was_sent_and_not_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let (local, remote) = (
            receiver.local_addr().unwrap(),
            receiver.peer_addr().unwrap(),
        );
        let diag = SockDiag::open().unwrap();
        assert_eq!(diag.unread(local, remote).unwrap(), 0);
        sender.write_all(&[7; 3000]).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while diag.unread(local, remote).unwrap() < 3000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the bytes never arrived"
            );
        }
        receiver.read_exact(&mut [0; 1000]).unwrap();
        assert_eq!(diag.unread(local, remote).unwrap(), 2000);
        // No such socket: the kernel's error, not a number.
        let gone = SocketAddr::from(([127, 0, 0, 1], 1));
        assert!(diag.unread(gone, remote).is_err());
    }
}
