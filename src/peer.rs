//! Who is at the other end of a TCP connection the daemon accepted: a process on another host, a
//! process on this one, or one the daemon itself started (an agent, a session shell command, or
//! anything they run). The last may never act as a client of the daemon (`docs/operations.md#the-agent-is-never-a-client`):
//! the front desk refuses it, whatever credential it presents.
//!
//! How, at each accepted connection, in two steps that cost tens of microseconds:
//!
//! 1. **The peer's socket.** One `NETLINK_SOCK_DIAG` query asks the kernel for the TCP socket whose
//!    local end is the connection's remote end and whose remote end is ours. It exists only when the
//!    client is on this host, in this network namespace (which every loopback client is); the
//!    answer carries its inode. Not found from a loopback address, or found with no inode (its
//!    process closed it already), the peer is [`Origin::Gone`]: nobody can be told apart, so it is
//!    not served either.
//! 2. **Its owner.** The daemon is a child subreaper, and so is every guard below it
//!    (`crate::exec`): whatever an agent starts stays the daemon's descendant, even after `setsid`
//!    or a double fork. So only the daemon's descendants are searched (`/proc/<pid>/task/*/children`
//!    from the daemon down, never all of `/proc`), each one's open files for `socket:[<inode>]`. A
//!    descendant whose open files cannot be read (another user's, after `sudo`) counts as the owner
//!    when its user is the socket's: unknown is never trusted.
//!
//! Nothing is cached: a process may open a socket right before it connects, so an earlier answer
//! says nothing about the next connection. What it does not cover (a process the agent has another
//! service start outside the daemon's tree, such as `systemd-run`, `at` or `ssh localhost`) is
//! written in `docs/operations.md#the-agent-is-never-a-client`.
//!
//! A leaf: it imports nothing from the crate.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

/// Processes below the daemon searched at most; past it the peer counts as one of them (an agent
/// that forks thousands of processes is not trusted because the search gave up).
pub const MAX_DESCENDANTS: usize = 4096;
/// Open files read per descendant at most, with the same rule.
pub const MAX_FDS_PER_PROCESS: usize = 65_536;

/// `SOCK_DIAG_BY_FAMILY` (`linux/sock_diag.h`).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST` (`linux/netlink.h`).
const NLM_F_REQUEST: u16 = 1;
/// `IPPROTO_TCP`.
const IPPROTO_TCP: u8 = 6;
/// `AF_INET`, `AF_INET6` as `sdiag_family` takes them.
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// Size of `struct nlmsghdr`.
const NLMSG_HDR: usize = 16;
/// Size of `struct inet_diag_req_v2`.
const REQ_V2: usize = 56;
/// Offsets in the answer (`struct nlmsghdr` then `struct inet_diag_msg`) of `idiag_uid` and
/// `idiag_inode`.
const UID_AT: usize = NLMSG_HDR + 64;
const INODE_AT: usize = NLMSG_HDR + 68;
/// The answer to one exact lookup: one `inet_diag_msg` and its attributes (none asked for).
const ANSWER_BYTES: usize = 1024;
/// How long the kernel's answer may take: it answers at once, so this only keeps a question it
/// cannot parse from holding the connection (the peer then counts as unknown).
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Who is at the other end of an accepted connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Another host (or another network namespace): no process of this daemon.
    Remote,
    /// A process on this host that the daemon did not start.
    Local,
    /// A process the daemon started, or one of theirs: `child` is the daemon's own child it
    /// descends from (the guard of an agent or of a shell command).
    Daemons { child: u32 },
    /// A loopback peer whose socket is gone, or has no owner any more, by the time it is looked
    /// at: it cannot be told apart from one of the daemon's processes.
    Gone,
}

impl Origin {
    /// Whether the peer may be served as a client at all.
    pub fn may_be_a_client(self) -> bool {
        matches!(self, Origin::Remote | Origin::Local)
    }
}

/// The peer of the connection whose ends are `local` (the daemon's) and `remote`, as seen from
/// process `daemon` (the daemon's pid; tests pass their own).
pub fn identify(local: SocketAddr, remote: SocketAddr, daemon: u32) -> Origin {
    let found = peer_socket(local, remote);
    if let Err(e) = &found {
        tracing::warn!(error = %e, "cannot look up a connection's peer socket");
    }
    classify(found, is_loopback(remote.ip()), |socket| owner_below(daemon, socket, MAX_DESCENDANTS))
}

/// Who the peer is, from what the kernel said of its socket (`found`), whether its address is
/// loopback, and `owner`: which of the daemon's children the socket's owner descends from.
fn classify(
    found: io::Result<Option<PeerSocket>>,
    loopback: bool,
    owner: impl FnOnce(PeerSocket) -> Option<u32>,
) -> Origin {
    match found {
        // An orphan: its process closed it; nobody left to tell apart.
        Ok(Some(socket)) if socket.inode == 0 => Origin::Gone,
        Ok(Some(socket)) => match owner(socket) {
            Some(child) => Origin::Daemons { child },
            None => Origin::Local,
        },
        Ok(None) if loopback => Origin::Gone,
        Ok(None) => Origin::Remote,
        // The kernel would not say (no netlink here): a loopback peer is not trusted blind.
        Err(_) if loopback => Origin::Gone,
        Err(_) => Origin::Remote,
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// The peer's TCP socket, as `sock_diag` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PeerSocket {
    inode: u32,
    uid: u32,
}

/// The socket whose local end is `remote` and remote end `local`, in this network namespace. A
/// dual-stack listener sees IPv4 peers as `::ffff:a.b.c.d`; their sockets are IPv4 ones.
fn peer_socket(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<PeerSocket>> {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    rustix::net::sockopt::set_socket_timeout(&fd, rustix::net::sockopt::Timeout::Recv, Some(ANSWER_WAIT))?;
    match (unmap(local.ip()), unmap(remote.ip())) {
        (IpAddr::V4(l), IpAddr::V4(r)) => {
            let found = ask(&fd, AF_INET, &r.octets(), remote.port(), &l.octets(), local.port())?;
            if found.is_some() {
                return Ok(found);
            }
            // A client may connect over IPv6 to a mapped address: its socket is an IPv6 one.
            let (l6, r6) = (l.to_ipv6_mapped().octets(), r.to_ipv6_mapped().octets());
            ask(&fd, AF_INET6, &r6, remote.port(), &l6, local.port())
        }
        (l, r) => ask(&fd, AF_INET6, &v6(r).octets(), remote.port(), &v6(l).octets(), local.port()),
    }
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// One exact `inet_diag` lookup: the TCP socket of `family` with local end `src:sport` and remote
/// end `dst:dport` (addresses in network order, 4 or 16 bytes).
fn ask(
    fd: &OwnedFd,
    family: u8,
    src: &[u8],
    sport: u16,
    dst: &[u8],
    dport: u16,
) -> io::Result<Option<PeerSocket>> {
    let request = request(family, src, sport, dst, dport);
    let kernel = SocketAddrNetlink::new(0, 0);
    rustix::net::sendto(fd, &request, SendFlags::empty(), &kernel)?;
    let mut answer = [0u8; ANSWER_BYTES];
    let (n, _) = rustix::net::recv(fd, &mut answer[..], RecvFlags::empty())?;
    Ok(parse(&answer[..n.min(ANSWER_BYTES)]))
}

/// `struct nlmsghdr` + `struct inet_diag_req_v2` for an exact lookup (no cookie), in the host's
/// byte order but for the ports and addresses, which are in network order.
fn request(family: u8, src: &[u8], sport: u16, dst: &[u8], dport: u16) -> [u8; NLMSG_HDR + REQ_V2] {
    let mut m = [0u8; NLMSG_HDR + REQ_V2];
    m[0..4].copy_from_slice(&((NLMSG_HDR + REQ_V2) as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    // nlmsg_seq, nlmsg_pid: 0 (one question at a time on this socket).
    let r = NLMSG_HDR;
    m[r] = family;
    m[r + 1] = IPPROTO_TCP;
    // idiag_ext, pad: 0. idiag_states: every state.
    m[r + 4..r + 8].copy_from_slice(&u32::MAX.to_ne_bytes());
    let id = r + 8;
    m[id..id + 2].copy_from_slice(&sport.to_be_bytes());
    m[id + 2..id + 4].copy_from_slice(&dport.to_be_bytes());
    m[id + 4..id + 4 + src.len().min(16)].copy_from_slice(&src[..src.len().min(16)]);
    m[id + 20..id + 20 + dst.len().min(16)].copy_from_slice(&dst[..dst.len().min(16)]);
    // idiag_if: 0 (any); idiag_cookie: INET_DIAG_NOCOOKIE, so no cookie is compared.
    m[id + 40..id + 48].copy_from_slice(&[0xff; 8]);
    m
}

/// The socket an answer reports; `None` for the kernel's "no such socket" (an `NLMSG_ERROR`) or
/// anything too short to be an answer.
fn parse(answer: &[u8]) -> Option<PeerSocket> {
    let kind = u16::from_ne_bytes(answer.get(4..6)?.try_into().ok()?);
    if kind != SOCK_DIAG_BY_FAMILY {
        return None;
    }
    let word =
        |at: usize| -> Option<u32> { Some(u32::from_ne_bytes(answer.get(at..at + 4)?.try_into().ok()?)) };
    Some(PeerSocket { uid: word(UID_AT)?, inode: word(INODE_AT)? })
}

/// The daemon's child that `socket`'s owner descends from, if any of the daemon's descendants
/// holds it (or could, unreadable, under the socket's user).
/// Searches at most `max` processes ([`MAX_DESCENDANTS`]; tests pass less).
fn owner_below(daemon: u32, socket: PeerSocket, max: usize) -> Option<u32> {
    let wanted = format!("socket:[{}]", socket.inode);
    let mut seen = 0usize;
    // (pid, the daemon's child it descends from)
    let mut todo: Vec<(u32, u32)> = children(daemon).into_iter().map(|c| (c, c)).collect();
    while let Some((pid, top)) = todo.pop() {
        seen += 1;
        if seen > max {
            tracing::warn!(
                limit = max,
                "more processes below the daemon than are searched: a local peer counts as one of them"
            );
            return Some(top);
        }
        if holds(pid, &wanted, socket.uid) {
            return Some(top);
        }
        todo.extend(children(pid).into_iter().map(|c| (c, top)));
    }
    None
}

/// The children of `pid`, from each of its threads' `children` file (a process exiting meanwhile
/// has none).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else { continue };
        out.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out
}

/// Whether process `pid` has `wanted` (`socket:[inode]`) open; a process whose open files cannot
/// be read holds it when it runs as the socket's user `uid`.
fn holds(pid: u32, wanted: &str, uid: u32) -> bool {
    let dir = format!("/proc/{pid}/fd");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return process_uid(pid) == Some(uid),
        // Gone meanwhile: it holds nothing now.
        Err(_) => return false,
    };
    entries
        .flatten()
        .take(MAX_FDS_PER_PROCESS)
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == Path::new(wanted)))
}

/// The real user of `pid` (`Uid:` in its status).
fn process_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_ascii_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::process::{Command, Stdio};

    use super::*;

    /// `NLMSG_ERROR` (`linux/netlink.h`): the kernel's "no such socket".
    const NLMSG_ERROR: u16 = 2;

    fn me() -> u32 {
        std::process::id()
    }

    /// A bash child of this process running `script`, which finds the listener's port in `$PORT`.
    fn bash(listener: &TcpListener, script: &str) -> std::process::Child {
        let port = listener.local_addr().expect("addr").port();
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .spawn()
            .expect("bash")
    }

    #[test]
    fn a_peer_in_this_process_is_local_and_not_the_daemons() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (accepted, remote) = listener.accept().expect("accept");
        let local = accepted.local_addr().expect("local");
        assert_eq!(remote, client.local_addr().expect("client's end"));
        assert_eq!(identify(local, remote, me()), Origin::Local);
        assert!(Origin::Local.may_be_a_client());
    }

    #[test]
    fn a_peer_this_process_started_is_the_daemons_and_one_that_closed_is_gone() {
        use std::net::Shutdown;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        // Only a grandchild holds the socket (the subshell opens it and becomes `cat`; bash, this
        // process's child, only waits): found below the child, and named by it.
        let mut child =
            bash(&listener, "( exec 3<>/dev/tcp/127.0.0.1/$PORT; exec cat <&3 >/dev/null ) & wait");
        let (accepted, remote) = listener.accept().expect("accept");
        let local = accepted.local_addr().expect("local");
        let origin = identify(local, remote, me());
        assert_eq!(origin, Origin::Daemons { child: child.id() });
        assert!(!origin.may_be_a_client());
        // The end of our side ends `cat`, which closes its socket: nobody owns that end any more.
        accepted.shutdown(Shutdown::Write).expect("shutdown");
        let _ = child.wait();
        let mut accepted = accepted;
        let mut rest = Vec::new();
        let _ = accepted.read_to_end(&mut rest);
        assert_eq!(identify(local, remote, me()), Origin::Gone);
        let _ = accepted.write_all(b"x");
    }

    /// What the kernel says of the peer's socket decides, for a loopback address and another.
    #[test]
    fn a_socket_is_classified_by_what_the_kernel_said_and_who_holds_it() {
        let socket = |inode| Ok(Some(PeerSocket { inode, uid: 0 }));
        let nobody = |_| None;
        let child = |_| Some(42);
        assert_eq!(classify(socket(0), true, child), Origin::Gone, "an orphan socket");
        assert_eq!(classify(socket(0), false, nobody), Origin::Gone);
        assert_eq!(classify(socket(7), true, child), Origin::Daemons { child: 42 });
        assert_eq!(classify(socket(7), true, nobody), Origin::Local);
        assert_eq!(classify(Ok(None), true, child), Origin::Gone);
        assert_eq!(classify(Ok(None), false, child), Origin::Remote);
        assert_eq!(classify(Err(io::Error::other("no netlink")), true, child), Origin::Gone);
        assert_eq!(classify(Err(io::Error::other("no netlink")), false, child), Origin::Remote);
    }

    /// A child that holds other files (its stdio, a socket of its own) is not the owner of this
    /// process's connection; and past the search's bound every local peer counts as a child's.
    #[test]
    fn a_child_holding_other_sockets_is_not_the_owner_and_the_search_is_bounded() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut child = bash(&listener, "exec 3<>/dev/tcp/127.0.0.1/$PORT; exec cat <&3 >/dev/null");
        let (theirs, _) = listener.accept().expect("the child's connection");
        let mine = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (accepted, remote) = listener.accept().expect("accept");
        assert_eq!(remote, mine.local_addr().expect("mine"));
        let local = accepted.local_addr().expect("local");
        assert_eq!(identify(local, remote, me()), Origin::Local, "the child holds another socket");
        let socket = peer_socket(local, remote).expect("netlink").expect("found");
        assert_eq!(owner_below(me(), socket, MAX_DESCENDANTS), None);
        assert_eq!(owner_below(me(), socket, 0), Some(child.id()), "past the bound: counted as the child's");
        drop(theirs);
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_processes_user_is_read_from_its_status() {
        let uid = rustix::process::getuid().as_raw();
        assert_eq!(process_uid(me()), Some(uid));
        assert_eq!(process_uid(u32::MAX), None, "no such process");
    }

    #[test]
    fn a_peer_no_socket_answers_for_is_remote_unless_its_address_is_loopback() {
        let local: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        assert_eq!(identify(local, "127.0.0.1:1".parse().expect("addr"), me()), Origin::Gone);
        assert_eq!(identify(local, "[::1]:1".parse().expect("addr"), me()), Origin::Gone);
        let far: SocketAddr = "192.0.2.7:40000".parse().expect("addr");
        assert_eq!(identify("192.0.2.1:7776".parse().expect("addr"), far, me()), Origin::Remote);
        assert!(!Origin::Gone.may_be_a_client());
        assert!(Origin::Remote.may_be_a_client());
    }

    #[test]
    fn an_answer_is_read_only_when_it_is_one() {
        assert_eq!(parse(&[]), None);
        let mut error = [0u8; 36];
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert_eq!(parse(&error), None);
        let mut found = [0u8; NLMSG_HDR + 72];
        found[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        found[UID_AT..UID_AT + 4].copy_from_slice(&1000u32.to_ne_bytes());
        found[INODE_AT..INODE_AT + 4].copy_from_slice(&4242u32.to_ne_bytes());
        assert_eq!(parse(&found), Some(PeerSocket { uid: 1000, inode: 4242 }));
        assert_eq!(parse(&found[..INODE_AT + 3]), None, "cut short");
    }

    #[test]
    fn a_request_names_both_ends_in_network_order() {
        let m = request(AF_INET, &[127, 0, 0, 2], 40000, &[127, 0, 0, 1], 7776);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().expect("4")) as usize, m.len());
        let id = NLMSG_HDR + 8;
        assert_eq!((m[NLMSG_HDR], m[NLMSG_HDR + 1]), (AF_INET, IPPROTO_TCP));
        assert_eq!(&m[id..id + 4], &[0x9c, 0x40, 0x1e, 0x60]);
        assert_eq!(&m[id + 4..id + 8], &[127, 0, 0, 2]);
        assert_eq!(&m[id + 20..id + 24], &[127, 0, 0, 1]);
        assert_eq!(&m[id + 40..id + 48], &[0xff; 8]);
    }
}
