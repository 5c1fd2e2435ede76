//! The engine's network port: the device's UDP socket (`recvmmsg`/`sendmmsg`, UDP GRO
//! messages cut into datagrams, GSO sends to IPv4 loopback peers with each datagram's ICRC
//! made for the IPv4 ID the kernel will give it), or in daemon mode the link to the daemon
//! (what it forwards, the peer rings it hands over, its death). The datapath leaves what it
//! sends in `Queues::txq` and takes each received datagram through `handle_datagram`
//! (docs/architecture.md §4).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use transport::wire::ROCE_V2_PORT;
use transport::{QpAttrMask, QpState, Time};

use crate::datapath::*;
use crate::device::Device;
use crate::state::*;
use crate::sys::{self, Epoll, MsgBatch, Sent};

/// Messages per `recvmmsg`.
const BATCH: usize = 32;
/// A daemon client's engine reads the daemon's socket at least this often while busy.
pub(super) const DAEMON_POLL_NS: u64 = 5_000_000;
/// Datagrams per `sendmmsg` (runs of them go as GSO sends: `sys::MsgBatch::send`).
const TX_BATCH: usize = 128;
/// Receive buffer: a message of datagrams the kernel coalesced (UDP GRO) is at most 64 KiB.
const RX_BUF: usize = (1 << 16) + size_of::<abi::daemon::DataHdr>();
/// The engine's per-device I/O state (not behind the device lock): the datapath's queues
/// and what the driver adds around them — the socket's message batches, GSO, when to read.
#[derive(Debug)]
pub(super) struct DevIo {
    pub(super) q: Queues,
    rx_bufs: Vec<Vec<u8>>,
    rx: MsgBatch,
    tx: MsgBatch,
    /// GSO sends (runs of datagrams in one system call) to IPv4 loopback peers, and how the
    /// kernel numbers their IDs (`Device::gso`; `None`: off, for good once the kernel
    /// refused one for want of segmentation offload). Elsewhere each datagram goes
    /// alone: how a NIC's segmentation offload numbers IPv4 IDs — which the ICRC covers, and
    /// rxe and RoCE NICs check — is not known here.
    gso: Option<sys::GsoIds>,
    /// When the daemon's socket was last read.
    pub(super) daemon_polled: Time,
}

impl DevIo {
    pub(super) fn new(gso: Option<sys::GsoIds>, tap: Arc<crate::tap::Tap>) -> DevIo {
        DevIo {
            q: Queues::new(tap),
            rx_bufs: (0..BATCH).map(|_| vec![0u8; RX_BUF]).collect(),
            rx: MsgBatch::new(BATCH),
            tx: MsgBatch::new(TX_BATCH),
            gso,
            daemon_polled: Time(0),
        }
    }
}

pub(super) fn flush_tx(
    dev: &Device,
    st: &mut DevState,
    io: &mut DevIo,
    now: Time,
    by_app: bool,
) -> bool {
    let mut progress = flush_rings(st, &mut io.q, now, by_app);
    let mut groups = [0usize; TX_BATCH];
    // After a refused GSO send, the next message goes datagram by datagram.
    let mut single_first = false;
    while !io.q.txq.is_empty() {
        let n = io.q.txq.len().min(TX_BATCH);
        let planned = plan_sends(&mut io.q.txq, n, io.gso, single_first, &mut groups);
        single_first = false;
        let txq = &io.q.txq;
        let r = io
            .tx
            .send(&dev.sock, &groups[..planned], |i| match txq.get(i) {
                Some(d) => (d.bytes(), d.dst),
                None => (&[][..], SocketAddr::new(dev.cfg.addr, ROCE_V2_PORT)),
            });
        match r {
            Sent::Took(0) => break, // socket buffer full: retry on the next pass
            Sent::Took(k) => {
                for _ in 0..k {
                    if let Some(d) = io.q.txq.pop_front() {
                        st.res.counters.socket_bytes += d.bytes().len() as u64;
                        if let Some(tap) = io.q.tap() {
                            tap.sent(d.dst, d.ident, d.bytes());
                        }
                        io.q.put_buf(d.buf);
                    }
                }
                progress = true;
            }
            Sent::Refused(k, e) if k > 1 => {
                // A GSO send refused: where segmentation offload is missing (EIO, EINVAL,
                // EOPNOTSUPP) send datagram by datagram from now on; otherwise (EMSGSIZE)
                // the next try sends the run's first datagram alone — the largest of the
                // run, so if one is too large it is — and only that one is dropped.
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
                ) {
                    io.gso = None;
                }
                single_first = true;
                progress = true;
            }
            Sent::Refused(..) => {
                // The first datagram was refused (e.g. EMSGSIZE with DF): drop it.
                if let Some(d) = io.q.txq.pop_front() {
                    io.q.put_buf(d.buf);
                }
                st.res.counters.xmit_discards += 1;
                progress = true;
            }
        }
    }
    progress
}

/// Cut the first `n` queued datagrams into messages (`groups`; returns how many): runs to an
/// IPv4 loopback peer that one GSO send can carry (`sys::gso_run`), every other datagram
/// alone (and the first alone if `single_first`). Each datagram's ICRC is made the one for
/// the IPv4 ID the kernel will give it: its place in its run if the kernel counts, else 0.
fn plan_sends(
    txq: &mut VecDeque<Datagram>,
    n: usize,
    gso: Option<sys::GsoIds>,
    single_first: bool,
    groups: &mut [usize],
) -> usize {
    let mut i = 0;
    let mut h = 0;
    while i < n && h < groups.len() {
        let loopback_v4 = txq
            .get(i)
            .is_some_and(|d| matches!(d.dst.ip(), IpAddr::V4(a) if a.is_loopback()));
        let g = match gso {
            Some(_) if !(single_first && i == 0) && loopback_v4 => sys::gso_run(i, n, |k| {
                txq.get(k)
                    .map_or((0, SocketAddr::from(([0, 0, 0, 0], 0))), |d| (d.len, d.dst))
            }),
            _ => 1,
        };
        for (pos, k) in (i..i + g).enumerate() {
            let ident = match gso {
                Some(sys::GsoIds::Counting) if g > 1 => u16::try_from(pos).unwrap_or(0),
                _ => 0,
            };
            if let Some(d) = txq.get_mut(k) {
                d.set_ident(ident);
            }
        }
        if let Some(slot) = groups.get_mut(h) {
            *slot = g;
        }
        h += 1;
        i += g;
    }
    h
}

pub(super) fn receive(
    dev: &Device,
    st: &mut DevState,
    io: &mut DevIo,
    epoll: &Epoll,
    now: Time,
) -> bool {
    if let Some(link) = &dev.daemon {
        return receive_forwarded(dev, link, st, io, epoll, now);
    }
    let mut any = false;
    // A coalesced message (UDP GRO) is, on loopback, one GSO send, whose ICRCs a counting
    // kernel's sender made for IDs 0, 1, 2, … (`plan_sends`): the first guess at each ID.
    let counting = io.gso == Some(sys::GsoIds::Counting);
    for _ in 0..4 {
        let n = io.rx.recv(dev.sock.as_fd(), &mut io.rx_bufs).unwrap_or(0);
        for i in 0..n {
            let Some(m) = io.rx.received(i) else {
                continue;
            };
            if m.truncated {
                st.res.counters.port_rcv_errors += 1;
                continue;
            }
            let Some(data) = io.rx_bufs.get(i).and_then(|b| b.get(..m.len)) else {
                continue;
            };
            st.res.counters.socket_bytes += data.len() as u64;
            receive_message(st, io.q.tap(), data, &m, counting, 0, now);
        }
        any |= n > 0;
        if n < BATCH {
            break;
        }
    }
    any
}

/// One received message: a datagram, or datagrams of `m.segment` bytes back to back
/// (UDP GRO; `first` is the first one's place in its GSO send).
fn receive_message(
    st: &mut DevState,
    tap: Option<&crate::tap::Tap>,
    data: &[u8],
    m: &sys::Received,
    counting: bool,
    first: u16,
    now: Time,
) {
    for (j, d) in data.chunks(m.segment.unwrap_or(m.len).max(1)).enumerate() {
        let likely = if counting {
            u16::try_from(j).unwrap_or(0).wrapping_add(first)
        } else {
            0
        };
        handle_datagram(st, tap, d, m.from, likely, m.ce(), now);
    }
}

/// What the daemon forwarded (`crate::daemon_client`): each message an
/// `abi::daemon::DataHdr` and the datagram(s). End of stream: the daemon is gone.
fn receive_forwarded(
    dev: &Device,
    link: &crate::daemon_client::DaemonLink,
    st: &mut DevState,
    io: &mut DevIo,
    epoll: &Epoll,
    now: Time,
) -> bool {
    use abi::daemon::DataHdr;
    use zerocopy::FromBytes;
    if link.fatal.load(SeqCst) {
        return false;
    }
    let counting = io.gso == Some(sys::GsoIds::Counting);
    let mut any = false;
    for _ in 0..4 {
        let n = match io.rx.recv(link.data.as_fd(), &mut io.rx_bufs) {
            Ok(n) => n,
            Err(_) => {
                daemon_gone(dev, link, st, epoll);
                return true;
            }
        };
        for i in 0..n {
            let len = io.rx.received_len(i);
            if len == 0 {
                daemon_gone(dev, link, st, epoll);
                return true;
            }
            let Some(msg) = io.rx_bufs.get(i).and_then(|b| b.get(..len)) else {
                continue;
            };
            let Ok((h, data)) = DataHdr::read_from_prefix(msg) else {
                st.res.counters.port_rcv_errors += 1;
                continue;
            };
            if h.flags & DataHdr::RING != 0 {
                // A packet ring from another process of the device (crate::peer_ring).
                for fd in io.rx.take_fds(i) {
                    match crate::peer_ring::RxRing::attach(&fd) {
                        Ok(r) => st.peer_rx.push(r),
                        Err(e) => eprintln!("uroce: {}: peer ring: {e}", dev.cfg.name),
                    }
                }
                continue;
            }
            let m = sys::Received {
                len: data.len(),
                from: SocketAddr::new(abi::daemon::addr_of_gid(h.src), h.src_port),
                truncated: false,
                segment: (h.segment > 0).then_some(usize::from(h.segment)),
                tos: (h.flags & DataHdr::TOS_VALID != 0).then_some(h.tos),
            };
            receive_message(st, io.q.tap(), data, &m, counting, h.first_index, now);
        }
        any |= n > 0;
        if n < BATCH {
            break;
        }
    }
    any
}

/// The daemon closed our link: the device is dead (docs/daemon.md §7).
/// Stop reading, give the daemon's port back, flush every QP, and tell every context.
fn daemon_gone(
    dev: &Device,
    link: &crate::daemon_client::DaemonLink,
    st: &mut DevState,
    epoll: &Epoll,
) {
    if link.fatal.swap(true, SeqCst) {
        return;
    }
    let _ = epoll.delete(link.data.as_raw_fd());
    let _ = sys::release_udp(dev.sock.as_fd(), dev.cfg.addr.is_ipv6());
    let DevState {
        qps, res, ready, ..
    } = st;
    for idx in qps.indices_where(|_| true) {
        if let Some(q) = qps.get_mut(idx) {
            if !matches!(q.qp.state(), QpState::Err | QpState::Reset) {
                let _ = q.qp.modify(&err_attr(), QpAttrMask::STATE);
            }
        }
        make_ready(qps, ready, idx);
    }
    let ctxs: Vec<_> = res.ctxs.keys().copied().collect();
    for c in ctxs {
        res.post_async(c, 1, crate::state::event::DEVICE_FATAL);
    }
    eprintln!(
        "uroce: {}: the daemon at {} went away; the device is fatal (reopen it once a \
         daemon serves it again)",
        dev.cfg.name,
        link.socket.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use transport::wire::icrc::{self, ICRC_LEN};
    use transport::wire::ip::{IpRepr, UdpRepr};

    const SRC: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

    /// A datagram of `len` transport bytes to `dst`:4791 with its ICRC for ID 0, as `route`
    /// queues it.
    fn dgram(fill: u8, len: usize, dst: Ipv4Addr) -> Datagram {
        let mut buf = vec![fill; len];
        let ip = IpRepr::v4_socket(SRC, dst, 0, 64);
        let crc = icrc::compute_for(&ip, &UdpRepr::roce(ROCE_V2_PORT), &buf).unwrap();
        buf.extend_from_slice(&icrc::icrc_wire_bytes(crc));
        Datagram {
            buf,
            len: len + ICRC_LEN,
            dst: SocketAddr::new(dst.into(), ROCE_V2_PORT),
            ident: 0,
        }
    }

    /// The IPv4 ID each queued datagram's ICRC is right for (exactly, over the bytes).
    fn idents(q: &VecDeque<Datagram>) -> Vec<u16> {
        q.iter()
            .map(|d| {
                let IpAddr::V4(dst) = d.dst.ip() else {
                    unreachable!()
                };
                let (t, w) = d.bytes().split_at(d.len - ICRC_LEN);
                (0..=u16::MAX)
                    .find(|&ident| {
                        let ip = IpRepr::V4 {
                            src: SRC,
                            dst,
                            dscp_ecn: 0,
                            ttl: 64,
                            ident,
                            dont_frag: true,
                        };
                        icrc::compute_for(&ip, &UdpRepr::roce(ROCE_V2_PORT), t)
                            == Ok(icrc::read_icrc(w))
                    })
                    .expect("some ID")
            })
            .collect()
    }

    #[test]
    fn gso_runs_only_to_ipv4_loopback_and_icrcs_follow_the_kernel_s_numbering() {
        let lo = Ipv4Addr::new(127, 0, 0, 2);
        let far = Ipv4Addr::new(10, 0, 0, 2);
        let queue = || -> VecDeque<Datagram> {
            let mut q: VecDeque<Datagram> = (0..4).map(|i| dgram(i, 1024, lo)).collect();
            q.push_back(dgram(4, 100, lo)); // shorter: ends the run
            q.push_back(dgram(5, 1024, far)); // not loopback: alone
            q.push_back(dgram(6, 1024, far));
            q.push_back(dgram(7, 64, lo));
            q.push_back(dgram(8, 64, lo));
            q
        };
        let mut groups = [0usize; TX_BATCH];

        // A counting kernel: IDs 0, 1, 2, … within each run, 0 for datagrams alone.
        let mut q = queue();
        let h = plan_sends(&mut q, 9, Some(sys::GsoIds::Counting), false, &mut groups);
        assert_eq!(groups[..h], [5, 1, 1, 2]);
        assert_eq!(idents(&q), [0, 1, 2, 3, 4, 0, 0, 0, 1]);
        // Planned again differently (after a refusal: the first alone, then GSO off), the
        // ICRCs follow.
        let h = plan_sends(&mut q, 9, Some(sys::GsoIds::Counting), true, &mut groups);
        assert_eq!(groups[..h], [1, 4, 1, 1, 2]);
        assert_eq!(idents(&q), [0, 0, 1, 2, 3, 0, 0, 0, 1]);
        let h = plan_sends(&mut q, 9, None, false, &mut groups);
        assert_eq!(groups[..h], [1; 9]);
        assert_eq!(idents(&q), [0; 9]);

        // A kernel that keeps the ID: the same runs, every ICRC stays the one for ID 0.
        let mut q = queue();
        let h = plan_sends(&mut q, 9, Some(sys::GsoIds::Fixed), false, &mut groups);
        assert_eq!(groups[..h], [5, 1, 1, 2]);
        assert_eq!(idents(&q), [0; 9]);
        // Only the first `n` are planned.
        let mut q = queue();
        let h = plan_sends(&mut q, 3, Some(sys::GsoIds::Counting), false, &mut groups);
        assert_eq!(groups[..h], [3]);
        assert_eq!(idents(&q), [0, 1, 2, 0, 0, 0, 0, 0, 0]);
    }
}
