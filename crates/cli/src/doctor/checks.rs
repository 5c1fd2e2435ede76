//! The checks: each a pure function of a [`Host`] snapshot (what `host.rs` measured, or what
//! a test crafted), returning findings with a status, the measured value, why it matters and
//! the fix.

use std::net::IpAddr;

use serde::Serialize;
use uroce::stats::Snapshot;

use super::firewall::{self, Verdict};

/// How a finding affects the exit status: PASS and INFO do not, WARN gives 3, FAIL 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Info,
    Warn,
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Info => "INFO",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One result line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable name of the check (`mtu`, `memlock`, ...).
    pub check: &'static str,
    /// The device it is about, for per-device checks.
    pub device: Option<String>,
    pub status: Status,
    /// What was measured.
    pub value: String,
    /// Why that status.
    pub detail: String,
    /// What to do about it (empty when nothing needs doing).
    pub fix: String,
}

fn finding(
    check: &'static str,
    device: Option<&str>,
    status: Status,
    value: impl Into<String>,
    detail: impl Into<String>,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        check,
        device: device.map(str::to_string),
        status,
        value: value.into(),
        detail: detail.into(),
        fix: fix.into(),
    }
}

/// A network interface of the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub addrs: Vec<IpAddr>,
    pub loopback: bool,
    pub up: bool,
    /// `/sys/class/net/IF/mtu`.
    pub mtu: Option<u32>,
    /// `/sys/class/net/IF/device/numa_node`: `None` when the interface has no device
    /// (virtual, loopback); `Some(-1)` when the platform reports none.
    pub numa_node: Option<i32>,
    /// `/proc/sys/net/ipv4/conf/IF/rp_filter`.
    pub rp_filter: Option<u8>,
    /// The queueing discipline (`ip link` output).
    pub qdisc: Option<String>,
}

/// Who holds UDP 4791 on a device's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bind {
    /// Nothing: this process could bind it (and let go at once).
    Free,
    /// A running uroce process (it publishes counters for `uroce stat`).
    Uroce { pid: u32, program: String },
    /// Something else; the owner when `/proc` tells.
    Other { owner: Option<(u32, String)> },
    /// The address is not on any interface of this host (EADDRNOTAVAIL).
    NotLocal,
    /// Another error.
    Error(String),
}

/// One configured device, as measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    pub addr: IpAddr,
    /// The device's active MTU in bytes (IBTA MTU).
    pub active_mtu: u32,
    pub bind: Bind,
    /// `ip route get ADDR`: its first line, or why it failed; `None` without ip(8).
    pub route: Option<Result<String, String>>,
}

/// The RLIMIT_MEMLOCK soft limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Memlock {
    /// Not read.
    #[default]
    Unknown,
    Unreadable(String),
    Unlimited,
    Bytes(u64),
}

/// Mode bits, owner uid and gid of a file.
pub type Owner = (u32, u32, u32);

/// A daemon socket found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketFile {
    pub path: String,
    /// Mode bits, uid and gid of the socket and of each directory above it (which need
    /// search permission), socket first; `None` where it could not be stat'ed.
    pub chain: Vec<(String, Option<Owner>)>,
    /// Whether it is a socket at all.
    pub is_socket: bool,
}

/// One source of packet-filter rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// `iptables`, `ip6tables` or `nft`.
    pub tool: &'static str,
    /// Its output, or why it could not be read.
    pub text: Result<String, String>,
}

/// Everything the checks look at.
#[derive(Clone, Debug, Default)]
pub struct Host {
    pub uid: u32,
    pub gids: Vec<u32>,
    pub devices: Vec<Device>,
    pub ifaces: Vec<Iface>,
    /// `/proc/sys/net/ipv4/conf/all/rp_filter`.
    pub rp_filter_all: Option<u8>,
    /// `$UROCE_DAEMON`, if set (it must exist then).
    pub daemon_env: Option<String>,
    /// `$UROCE_ECN`, if set (`0`/`off` turns devices' ECN congestion control off).
    pub ecn_env: Option<String>,
    pub sockets: Vec<SocketFile>,
    /// RLIMIT_MEMLOCK soft limit.
    pub memlock: Memlock,
    pub mr_size: Option<u64>,
    pub want_hugepages: bool,
    /// `HugePages_Free` and `Hugepagesize` (bytes) from `/proc/meminfo`.
    pub hugepages: Option<(u64, u64)>,
    /// The selected mode of `/sys/kernel/mm/transparent_hugepage/enabled`.
    pub thp: Option<String>,
    /// CPUs this process may run on (sched_getaffinity).
    pub affinity: Vec<usize>,
    /// NUMA nodes and their CPUs (`/sys/devices/system/node/nodeN/cpulist`).
    pub nodes: Vec<(i32, Vec<usize>)>,
    pub clocksource: Option<String>,
    pub rules: Vec<Rules>,
    /// Running uroce processes (`uroce stat`'s view), and how many did not answer.
    pub running: Vec<Snapshot>,
    pub unanswered: usize,
    /// Device names asked for with `-d` (empty: all).
    pub only: Vec<String>,
}

/// Bytes for humans: 1 GiB, 64 MiB, 4 KiB, 100 B.
pub fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (u, s) in UNITS {
        if n >= s {
            return if n % s == 0 {
                format!("{} {u}", n / s)
            } else {
                format!("{:.1} {u}", n as f64 / s as f64)
            };
        }
    }
    format!("{n} B")
}

impl Host {
    /// The interface that holds `addr`, or the loopback interface for 127/8 and ::1.
    pub fn iface_of(&self, addr: IpAddr) -> Option<&Iface> {
        self.ifaces
            .iter()
            .find(|i| i.addrs.contains(&addr))
            .or_else(|| {
                if addr.is_loopback() {
                    self.ifaces.iter().find(|i| i.loopback)
                } else {
                    None
                }
            })
    }
}

/// Every check, in the order they print.
pub fn all(h: &Host) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in &h.devices {
        out.push(device_address(h, d));
        out.push(udp_port(d));
        out.extend(firewall(h, d));
        out.push(mtu(h, d));
        out.push(numa(h, d));
        out.push(rp_filter(h, d));
        out.push(route(d));
        out.push(ecn(h, d));
    }
    out.push(daemon_socket(h));
    out.push(memlock(h));
    out.push(hugepages(h));
    out.push(cpus(h));
    out.push(clocksource(h));
    out.extend(counters(h));
    out
}

/// Device reachable in embedded mode: its address is on an interface of this host.
pub fn device_address(h: &Host, d: &Device) -> Finding {
    let dev = Some(d.name.as_str());
    match (h.iface_of(d.addr), &d.bind) {
        (_, Bind::NotLocal) | (None, _) => finding(
            "device",
            dev,
            Status::Fail,
            format!("{} is on no interface", d.addr),
            "an embedded device binds UDP 4791 on its address; the kernel refuses \
                an address this host does not have (EADDRNOTAVAIL)",
            format!(
                "add the address (ip addr add {}/{} dev IFACE) or set \
                    UROCE_DEVICES={}=<an address of this host>",
                d.addr,
                if d.addr.is_ipv4() { 24 } else { 64 },
                d.name
            ),
        ),
        (Some(i), _) => finding(
            "device",
            dev,
            Status::Pass,
            format!("{} on {}", d.addr, i.name),
            "embedded mode: the device runs inside each process that opens it",
            "",
        ),
    }
}

/// UDP 4791 on the device's address: free, or held by a uroce process.
pub fn udp_port(d: &Device) -> Finding {
    let dev = Some(d.name.as_str());
    let at = format!("{}:{}", d.addr, firewall::ROCE_PORT);
    match &d.bind {
        Bind::Free => finding(
            "udp-4791",
            dev,
            Status::Pass,
            format!("{at} free"),
            "a uroce process can bind it",
            "",
        ),
        Bind::Uroce { pid, program } => finding(
            "udp-4791",
            dev,
            Status::Pass,
            format!("{at} bound by uroce process {pid} ({program})"),
            "the device is running; another process opening the same device name \
                and address will fail to bind until it exits (no daemon to share it \
                yet)",
            "",
        ),
        Bind::Other { owner } => finding(
            "udp-4791",
            dev,
            Status::Fail,
            match owner {
                Some((pid, comm)) => format!("{at} bound by another program: pid {pid} ({comm})"),
                None => format!("{at} bound by another program (owner not visible to this user)"),
            },
            "a uroce device cannot start on this address: another socket holds \
                the port (rdma_rxe on this address, or a test tool)",
            match owner {
                Some((pid, comm)) => format!(
                    "stop {comm} (pid {pid}) or give the device another address in \
                    UROCE_DEVICES"
                ),
                None => format!(
                    "find the owner with `ss -ulpn sport = :{}` as root, stop it or use \
                    another address",
                    firewall::ROCE_PORT
                ),
            },
        ),
        Bind::NotLocal => finding(
            "udp-4791",
            dev,
            Status::Fail,
            format!("{at} cannot be bound: address not local"),
            "see the device check",
            "give the device an address of this host",
        ),
        Bind::Error(e) => finding(
            "udp-4791",
            dev,
            Status::Warn,
            format!("{at}: {e}"),
            "binding a test socket failed",
            "run as a user allowed to bind UDP sockets",
        ),
    }
}

/// Whether iptables/nftables rules drop RoCEv2 to the device.
pub fn firewall(h: &Host, d: &Device) -> Vec<Finding> {
    let dev = Some(d.name.as_str());
    let Some(iface) = h.iface_of(d.addr).map(|i| i.name.as_str()) else {
        return vec![finding(
            "firewall",
            dev,
            Status::Info,
            "no interface",
            "the device's address is on no interface",
            "see the device check",
        )];
    };
    let pkt = firewall::Packet {
        addr: d.addr,
        iface,
    };
    let mut seen = Vec::new();
    let mut verdict = Verdict::Accepted(None);
    let mut unreadable = Vec::new();
    for r in &h.rules {
        let relevant = match r.tool {
            "iptables" => d.addr.is_ipv4(),
            "ip6tables" => d.addr.is_ipv6(),
            _ => true,
        };
        if !relevant {
            continue;
        }
        match &r.text {
            Ok(text) => {
                let v = if r.tool == "nft" {
                    firewall::nft(text, &pkt)
                } else {
                    firewall::iptables(text, &pkt)
                };
                seen.push(r.tool);
                if !matches!(v, Verdict::Accepted(_)) {
                    verdict = firewall::worse(verdict, v);
                }
            }
            Err(e) => unreadable.push(format!("{}: {e}", r.tool)),
        }
    }
    let target = format!(
        "udp dport {} to {} on {}",
        firewall::ROCE_PORT,
        d.addr,
        if iface.is_empty() { "?" } else { iface }
    );
    let f = match verdict {
        Verdict::Dropped(rule) => finding(
            "firewall",
            dev,
            Status::Fail,
            format!("{target}: dropped by `{rule}`"),
            "the packet filter discards RoCEv2 to this device: peers see retries, \
                then IBV_WC_RETRY_EXC_ERR",
            format!(
                "accept it first: iptables -I INPUT -p udp --dport {0} -j ACCEPT \
                (nft: add rule inet filter input udp dport {0} accept), or delete \
                that rule",
                firewall::ROCE_PORT
            ),
        ),
        Verdict::MayDrop(rule) => finding(
            "firewall",
            dev,
            Status::Warn,
            format!("{target}: may be dropped by `{rule}`"),
            "a DROP/REJECT rule with conditions this check cannot evaluate \
                (source, conntrack state, ...) may apply to RoCEv2",
            format!(
                "make sure udp dport {} is accepted before it",
                firewall::ROCE_PORT
            ),
        ),
        Verdict::Accepted(_) if seen.is_empty() && !unreadable.is_empty() => finding(
            "firewall",
            dev,
            Status::Warn,
            format!("{target}: rules not readable"),
            unreadable.join("; "),
            "run `uroce doctor` as root to read the packet-filter rules",
        ),
        Verdict::Accepted(_) if seen.is_empty() => finding(
            "firewall",
            dev,
            Status::Pass,
            format!("{target}: no packet filter tool (iptables, nft) found"),
            "no rules could be read; with neither tool installed none are usually loaded",
            "",
        ),
        Verdict::Accepted(_) => finding(
            "firewall",
            dev,
            Status::Pass,
            format!("{target}: not dropped ({})", seen.join(", ")),
            if unreadable.is_empty() {
                String::new()
            } else {
                format!("unreadable: {}", unreadable.join("; "))
            },
            "",
        ),
    };
    vec![f]
}

/// Bytes of headers around an IBTA-MTU payload in one RoCEv2 datagram, counted as the
/// interface MTU counts them (the IP packet): IP, UDP 8, BTH 12, the largest extension
/// headers of a payload-carrying packet (RDMA WRITE first/only with immediate: RETH 16 +
/// ImmDt 4; IBTA Vol 1 chapter 9, Linux rxe_opcode.c), ICRC 4 (IBTA Annex A17, RoCEv2).
pub fn roce_overhead(addr: IpAddr) -> u32 {
    let ip = if addr.is_ipv4() { 20 } else { 40 };
    ip + 8 + 12 + 16 + 4 + 4
}

/// Interface MTU vs the device's active MTU.
pub fn mtu(h: &Host, d: &Device) -> Finding {
    let dev = Some(d.name.as_str());
    let need = d.active_mtu + roce_overhead(d.addr);
    let Some(i) = h.iface_of(d.addr) else {
        return finding(
            "mtu",
            dev,
            Status::Fail,
            "no interface",
            "the device's address is on no interface",
            "see the device check",
        );
    };
    let Some(m) = i.mtu else {
        return finding(
            "mtu",
            dev,
            Status::Warn,
            format!("{}: MTU unreadable", i.name),
            "",
            "",
        );
    };
    let value = format!(
        "{} MTU {m}, device active MTU {} needs {need}",
        i.name, d.active_mtu
    );
    if m >= need {
        finding(
            "mtu",
            dev,
            Status::Pass,
            value,
            "a full-size RoCEv2 packet fits in one IP packet",
            "",
        )
    } else {
        finding(
            "mtu",
            dev,
            Status::Fail,
            value,
            "full-size packets exceed the interface MTU; they leave with DF set \
                and the kernel refuses them (EMSGSIZE, counted as xmit_discards): \
                transfers larger than the interface allows never complete",
            format!(
                "ip link set dev {} mtu {} (and on the path), or give the device a \
                smaller active MTU",
                i.name,
                need.max(1500)
            ),
        )
    }
}

/// NUMA node of the interface vs the CPUs this process may run on.
pub fn numa(h: &Host, d: &Device) -> Finding {
    let dev = Some(d.name.as_str());
    let Some(i) = h.iface_of(d.addr) else {
        return finding("numa", dev, Status::Info, "no interface", "", "");
    };
    let node = match i.numa_node {
        None => {
            return finding(
                "numa",
                dev,
                Status::Pass,
                format!("{}: virtual interface", i.name),
                "no NUMA locality to check",
                "",
            );
        }
        Some(n) if n < 0 => {
            return finding(
                "numa",
                dev,
                Status::Pass,
                format!("{}: numa_node -1", i.name),
                "the platform reports no NUMA node for this device (one node, or no \
                locality information)",
                "",
            );
        }
        Some(n) => n,
    };
    let Some((_, cpus)) = h.nodes.iter().find(|(n, _)| *n == node) else {
        return finding(
            "numa",
            dev,
            Status::Warn,
            format!("{}: node {node}, its CPU list unreadable", i.name),
            "",
            "",
        );
    };
    let local = h.affinity.iter().filter(|c| cpus.contains(c)).count();
    let value = format!(
        "{} on node {node} (CPUs {}); this process may run on {}",
        i.name,
        cpulist(cpus),
        cpulist(&h.affinity)
    );
    let fix = format!(
        "run the application on node {node}: numactl --cpunodebind={node} \
        --membind={node} PROGRAM (or taskset -c {})",
        cpulist(cpus)
    );
    if local == h.affinity.len() {
        finding(
            "numa",
            dev,
            Status::Pass,
            value,
            "every CPU this process may use is local to the interface",
            "",
        )
    } else if local == 0 {
        finding(
            "numa",
            dev,
            Status::Warn,
            value,
            "no allowed CPU is local to the interface: every packet crosses the interconnect",
            fix,
        )
    } else {
        finding(
            "numa",
            dev,
            Status::Warn,
            value,
            "some allowed CPUs are remote from the interface",
            fix,
        )
    }
}

/// `0-3,8` style.
pub fn cpulist(cpus: &[usize]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(",")
    }
}

/// Reverse-path filtering on the interface.
pub fn rp_filter(h: &Host, d: &Device) -> Finding {
    let dev = Some(d.name.as_str());
    if d.addr.is_ipv6() {
        return finding(
            "rp_filter",
            dev,
            Status::Pass,
            "IPv6",
            "rp_filter is an IPv4 setting",
            "",
        );
    }
    let Some(i) = h.iface_of(d.addr) else {
        return finding("rp_filter", dev, Status::Info, "no interface", "", "");
    };
    if i.loopback {
        return finding(
            "rp_filter",
            dev,
            Status::Pass,
            format!("{}: loopback", i.name),
            "packets between local addresses keep the route they were sent with: \
            no reverse-path check",
            "",
        );
    }
    // The kernel uses the larger of conf/all and conf/IF
    // (Documentation/networking/ip-sysctl.rst, rp_filter).
    let eff = h.rp_filter_all.unwrap_or(0).max(i.rp_filter.unwrap_or(0));
    let others = h.ifaces.iter().filter(|x| !x.loopback && x.up).count();
    let value = format!(
        "rp_filter all={} {}={} (effective {eff}), {others} non-loopback interfaces up",
        h.rp_filter_all.map_or("?".into(), |v| v.to_string()),
        i.name,
        i.rp_filter.map_or("?".into(), |v| v.to_string())
    );
    if eff == 1 && others > 1 {
        finding(
            "rp_filter",
            dev,
            Status::Warn,
            value,
            "strict reverse-path filtering drops packets whose source is routed \
                back through another interface: with several interfaces (asymmetric \
                or multi-rail RoCE), replies from peers can vanish",
            format!(
                "sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{}.rp_filter=2 \
                (loose)",
                i.name
            ),
        )
    } else {
        finding("rp_filter", dev, Status::Pass, value, "", "")
    }
}

/// The route table agrees the device's address is local.
pub fn route(d: &Device) -> Finding {
    let dev = Some(d.name.as_str());
    match &d.route {
        None => finding(
            "route",
            dev,
            Status::Info,
            "ip(8) not available",
            "route not checked",
            "install iproute2",
        ),
        Some(Ok(line)) if line.starts_with("local ") => finding(
            "route",
            dev,
            Status::Pass,
            line.clone(),
            "the address is local",
            "",
        ),
        Some(Ok(line)) => finding(
            "route",
            dev,
            Status::Fail,
            line.clone(),
            "the route table does not deliver this address locally: packets to \
            the device leave the host",
            format!(
                "add the address to an interface: ip addr add {} dev IFACE",
                d.addr
            ),
        ),
        Some(Err(e)) => finding(
            "route",
            dev,
            Status::Fail,
            format!("ip route get {}: {e}", d.addr),
            "no route to the device's address",
            format!("ip addr add {} dev IFACE", d.addr),
        ),
    }
}

/// ECN/DSCP: what the interface does, and whether uroce devices mark and react (DCQCN,
/// docs/wire.md §11; `UROCE_ECN`).
pub fn ecn(h: &Host, d: &Device) -> Finding {
    let dev = Some(d.name.as_str());
    let qdisc = h
        .iface_of(d.addr)
        .and_then(|i| i.qdisc.clone().map(|q| format!("{}: qdisc {q}", i.name)));
    let on = h.ecn_env.as_deref().is_none_or(nic::ecn_setting);
    let qdisc = qdisc.map(|q| format!("; {q}")).unwrap_or_default();
    if on {
        finding(
            "ecn",
            dev,
            Status::Info,
            format!("device ECN: on (ECT(0), CNPs, DCQCN){qdisc}"),
            "packets leave ECN-capable (ECT(0), DSCP 0); a CE-marked packet makes \
                the receiving QP send a CNP, a CNP makes the sender cut its rate \
                (DCQCN, paced per QP); counters np_ecn_marked_roce_packets, \
                np_cnp_sent, rp_cnp_handled. The switches must mark ECN (not drop) \
                above a queue threshold for this to help; net.ipv4.tcp_ecn concerns \
                TCP only",
            "",
        )
    } else {
        finding(
            "ecn",
            dev,
            Status::Info,
            format!(
                "device ECN: off (UROCE_ECN={}){qdisc}",
                h.ecn_env.as_deref().unwrap_or("")
            ),
            "packets leave not-ECT and CNPs are only counted: on a congested \
                fabric, drops are recovered by retransmission alone",
            "unset UROCE_ECN (ECN congestion control is on by default)",
        )
    }
}

/// Daemon socket permissions, or embedded mode.
pub fn daemon_socket(h: &Host) -> Finding {
    if h.sockets.is_empty() {
        return match &h.daemon_env {
            Some(p) => finding(
                "daemon-socket",
                None,
                Status::Fail,
                format!("UROCE_DAEMON={p}: missing"),
                "UROCE_DAEMON names a socket that does not exist",
                "start the daemon or unset UROCE_DAEMON",
            ),
            None => finding(
                "daemon-socket",
                None,
                Status::Info,
                "embedded mode",
                "no daemon socket (UROCE_DAEMON, /run/uroce/uverbs*, \
                $XDG_RUNTIME_DIR/uroce/uverbs*): every process runs its devices \
                itself",
                "",
            ),
        };
    }
    let mut bad = Vec::new();
    let mut ok = Vec::new();
    for s in &h.sockets {
        match socket_access(h, s) {
            Ok(()) => ok.push(s.path.clone()),
            Err(why) => bad.push((s, why)),
        }
    }
    if let Some((s, why)) = bad.first() {
        let (owner_gid, owner_uid) = s
            .chain
            .first()
            .and_then(|c| c.1)
            .map_or((0, 0), |(_, u, g)| (g, u));
        return finding(
            "daemon-socket",
            None,
            Status::Fail,
            format!("{}: {why}", s.path),
            format!(
                "uid {} cannot connect (connect(2) on a Unix socket needs write \
                permission on it and search permission on every directory above): \
                Permission denied, as opening /dev/infiniband/uverbs0 without the \
                rdma group",
                h.uid
            ),
            format!(
                "chmod 0660 {0} && chgrp GROUP {0}, then add the user to it (usermod \
                -aG GROUP USER; the socket is owned by uid {owner_uid} gid \
                {owner_gid}), or chmod 0666 {0}",
                s.path
            ),
        );
    }
    finding(
        "daemon-socket",
        None,
        Status::Pass,
        ok.join(", "),
        format!("uid {} may connect", h.uid),
        "",
    )
}

/// Whether this user may connect to the socket: `Err` says which permission is missing.
pub fn socket_access(h: &Host, s: &SocketFile) -> Result<(), String> {
    if !s.is_socket {
        return Err("not a socket".into());
    }
    for (i, (path, st)) in s.chain.iter().enumerate() {
        let Some((mode, uid, gid)) = *st else {
            return Err(format!("{path}: cannot stat"));
        };
        let want = if i == 0 { 0o2 } else { 0o1 }; // write on the socket, search above
        if !allowed(h, mode, uid, gid, want) {
            return Err(format!(
                "{path} mode {:04o} uid {uid} gid {gid}: no {} permission for uid {}",
                mode & 0o7777,
                if i == 0 { "write" } else { "search" },
                h.uid
            ));
        }
    }
    Ok(())
}

/// POSIX permission check: owner bits if the owner, else group bits if in the group, else
/// other bits; root passes.
pub fn allowed(h: &Host, mode: u32, uid: u32, gid: u32, want: u32) -> bool {
    if h.uid == 0 {
        return true;
    }
    let bits = if h.uid == uid {
        mode >> 6
    } else if h.gids.contains(&gid) {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

/// The largest memory the checks compare limits against when `--mr-size` is not given:
/// a modest set of RDMA buffers.
pub const DEFAULT_MR_SIZE: u64 = 64 << 20;

/// RLIMIT_MEMLOCK vs the memory to register.
pub fn memlock(h: &Host) -> Finding {
    let want = h.mr_size.unwrap_or(DEFAULT_MR_SIZE);
    let note = "uroce registers memory without pinning it and does not need this \
        limit; rdma-core on a real NIC pins every registered page and \
        ibv_reg_mr fails with ENOMEM above it";
    let limit = match &h.memlock {
        Memlock::Unknown => {
            return finding(
                "memlock",
                None,
                Status::Warn,
                "RLIMIT_MEMLOCK unknown",
                note,
                "",
            )
        }
        Memlock::Unreadable(e) => {
            return finding(
                "memlock",
                None,
                Status::Warn,
                format!("RLIMIT_MEMLOCK: {e}"),
                note,
                "",
            )
        }
        Memlock::Unlimited => {
            return finding(
                "memlock",
                None,
                Status::Pass,
                "RLIMIT_MEMLOCK unlimited",
                note,
                "",
            )
        }
        Memlock::Bytes(l) => *l,
    };
    let value = format!(
        "RLIMIT_MEMLOCK {} vs {} to register{}",
        bytes(limit),
        bytes(want),
        if h.mr_size.is_none() {
            " (default; --mr-size to set)"
        } else {
            ""
        }
    );
    if limit >= want {
        return finding("memlock", None, Status::Pass, value, note, "");
    }
    let fix = format!(
        "ulimit -l {} (or unlimited) in the launching shell; persistently `* \
        - memlock unlimited` in /etc/security/limits.conf, \
        LimitMEMLOCK=infinity for a systemd service",
        want.div_ceil(1024)
    );
    let status = if h.mr_size.is_some() {
        Status::Fail
    } else {
        Status::Warn
    };
    finding("memlock", None, status, value, note, fix)
}

/// Huge pages for the memory to register (with `--hugepages`), and THP.
pub fn hugepages(h: &Host) -> Finding {
    let thp = h.thp.as_deref().unwrap_or("unknown");
    if !h.want_hugepages {
        return finding(
            "hugepages",
            None,
            Status::Info,
            format!("transparent huge pages: {thp}"),
            "explicit huge pages not requested (--hugepages)",
            "",
        );
    }
    let want = h.mr_size.unwrap_or(DEFAULT_MR_SIZE);
    let Some((free, size)) = h.hugepages else {
        return finding(
            "hugepages",
            None,
            Status::Fail,
            "no HugePages_Free in /proc/meminfo",
            "the kernel offers no huge pages",
            "a kernel with CONFIG_HUGETLBFS",
        );
    };
    let have = free.saturating_mul(size);
    let value = format!(
        "{free} free huge pages of {} = {} vs {} to register; THP {thp}",
        bytes(size),
        bytes(have),
        bytes(want)
    );
    if have >= want {
        finding("hugepages", None, Status::Pass, value, "", "")
    } else {
        let pages = want.div_ceil(size.max(1));
        finding(
            "hugepages",
            None,
            Status::Fail,
            value,
            "mapping buffers from hugetlbfs fails (and, on real NICs, ibv_reg_mr \
                then fails with ENOMEM)",
            format!(
                "sysctl -w vm.nr_hugepages={pages} (at boot: hugepages={pages} on the \
                kernel command line)"
            ),
        )
    }
}

/// CPU count against the engine and polling threads.
pub fn cpus(h: &Host) -> Finding {
    let n = h.affinity.len();
    let value = format!("{n} CPUs available ({})", cpulist(&h.affinity));
    if n <= 2 {
        finding(
            "cpus",
            None,
            Status::Warn,
            value,
            "the engine thread and the application's pollers (and a peer process \
                on the same host) share cores: a spinning thread can take the core \
                the other needs, so latency grows with scheduler slices",
            "keep nic::DeviceConfig::park_when_contended and app_progress on (the \
                defaults: the engine parks when preempted and the poller does its \
                work); pin client and server to different CPUs (taskset -c); do not \
                set dedicated_engine per device",
        )
    } else {
        finding(
            "cpus",
            None,
            Status::Pass,
            value,
            "room for the engine and the application's pollers",
            "",
        )
    }
}

/// The clock source: the engine and the transport's timers read the clock on every pass.
pub fn clocksource(h: &Host) -> Finding {
    let Some(cs) = h.clocksource.as_deref() else {
        return finding(
            "clocksource",
            None,
            Status::Info,
            "unknown",
            "no /sys/devices/system/clocksource/clocksource0/current_clocksource",
            "",
        );
    };
    // Clock sources the vDSO reads without a system call (a vdso_clock_mode in their
    // kernel clocksource driver: tsc, kvm-clock, the arm64 arch timer, Hyper-V TSC page).
    let fast = matches!(
        cs,
        "tsc" | "kvm-clock" | "arch_sys_counter" | "hyperv_clocksource_tsc_page"
    );
    if fast {
        finding(
            "clocksource",
            None,
            Status::Pass,
            cs,
            "clock reads stay in user space (vDSO)",
            "",
        )
    } else {
        finding(
            "clocksource",
            None,
            Status::Warn,
            cs,
            "clock reads are system calls or slow device reads: every engine pass \
                and timer check costs more",
            "use tsc if the CPU has an invariant TSC: echo tsc > \
                /sys/devices/system/clocksource/clocksource0/current_clocksource \
                (boot: clocksource=tsc)",
        )
    }
}

/// Error counters of running devices and what they mean (the usual RoCE troubleshooting
/// table: CQ overflow, RNR, sequence errors and retries, drops).
pub fn counters(h: &Host) -> Vec<Finding> {
    const GROUPS: &[(&[&str], &str, &str)] = &[
        (
            &["cq_overflow"],
            "completions were lost to a full CQ (the QP went to error): latency \
            spikes then failures",
            "create larger CQs (at least the sum of the queues' depths) or poll \
            them more often",
        ),
        (
            &[
                "rcvd_rnr_err",
                "send_rnr_err",
                "retry_rnr_exceeded_err",
                "rcv_no_wqe_drop",
            ],
            "a SEND arrived before a receive was posted (Receiver Not Ready): the \
            sender backs off for the RNR timer",
            "post receives before the peer sends (and keep the RQ full); raise \
            rnr_retry / min_rnr_timer",
        ),
        (
            &[
                "rcvd_seq_err",
                "out_of_seq_request",
                "retry_exceeded_err",
                "retransmissions",
                "local_ack_timeouts",
            ],
            "packets were lost or reordered on the path: go-back-N retransmission \
            stalls the QP for the ACK timeout",
            "look for loss on the path: interface drops (ip -s link), the \
            firewall check above, PFC/ECN on the switches; raise \
            timeout/retry_cnt only as a stopgap",
        ),
        (
            &["rcvd_icrc_err", "port_rcv_errors"],
            "received packets failed the ICRC or were malformed",
            "a peer computes the ICRC differently or something rewrites packets \
            (NAT, a middlebox changing DSCP/TTL is fine, ports or payload are \
            not); capture with tcpdump udp port 4791 and `uroce decode`",
        ),
        (
            &[
                "dropped_pkts",
                "xmit_discards",
                "rcvd_unknown_qp",
                "rcvd_addr_mismatch",
            ],
            "packets were dropped (the kernel refused a send, or no QP/peer \
            matched)",
            "xmit_discards: the interface MTU (mtu check); unknown QP / address \
            mismatch: a peer talking to a destroyed QP or through NAT. Drops \
            without ECN marks: enable ECN marking on the path (uroce devices \
            react to it with DCQCN unless UROCE_ECN=0)",
        ),
    ];
    let mut out = Vec::new();
    if h.running.is_empty() {
        out.push(finding(
            "counters",
            None,
            Status::Info,
            if h.unanswered > 0 {
                format!(
                    "no running uroce process answered ({} did not)",
                    h.unanswered
                )
            } else {
                "no running uroce process".to_string()
            },
            "error counters are read from running processes, as `uroce stat` does",
            "",
        ));
        return out;
    }
    for p in &h.running {
        for d in &p.devices {
            if !h.only.is_empty() && !h.only.contains(&d.name) {
                continue;
            }
            let who = format!("{} in pid {} ({})", d.name, p.pid, p.program);
            let mut any = false;
            for (names, why, fix) in GROUPS {
                let hits: Vec<String> = names
                    .iter()
                    .filter_map(|n| {
                        d.counters
                            .get(n)
                            .filter(|v| *v > 0)
                            .map(|v| format!("{n}={v}"))
                    })
                    .collect();
                if hits.is_empty() {
                    continue;
                }
                any = true;
                out.push(finding(
                    "counters",
                    Some(&d.name),
                    Status::Warn,
                    format!("{who}: {}", hits.join(" ")),
                    *why,
                    *fix,
                ));
            }
            if !any {
                out.push(finding(
                    "counters",
                    Some(&d.name),
                    Status::Pass,
                    format!("{who}: no error counters set"),
                    "",
                    "",
                ));
            }
        }
    }
    if out.is_empty() {
        out.push(finding(
            "counters",
            None,
            Status::Info,
            "no running device of the chosen names",
            "",
            "",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce::stats::{CounterSet, DeviceSnapshot, SNAPSHOT_VERSION};

    fn dev(addr: &str) -> Device {
        Device {
            name: "uroce0".into(),
            addr: addr.parse().unwrap(),
            active_mtu: 1024,
            bind: Bind::Free,
            route: Some(Ok(format!("local {addr} dev lo table local src {addr}"))),
        }
    }

    fn host() -> Host {
        Host {
            uid: 1000,
            gids: vec![1000],
            ifaces: vec![
                Iface {
                    name: "lo".into(),
                    addrs: vec!["127.0.0.1".parse().unwrap()],
                    loopback: true,
                    up: true,
                    mtu: Some(65536),
                    ..Iface::default()
                },
                Iface {
                    name: "eth0".into(),
                    addrs: vec!["10.0.0.5".parse().unwrap()],
                    up: true,
                    mtu: Some(1500),
                    numa_node: Some(1),
                    rp_filter: Some(0),
                    qdisc: Some("mq".into()),
                    ..Iface::default()
                },
                Iface {
                    name: "eth1".into(),
                    addrs: vec!["10.1.0.5".parse().unwrap()],
                    up: true,
                    mtu: Some(1500),
                    rp_filter: Some(0),
                    ..Iface::default()
                },
            ],
            rp_filter_all: Some(0),
            memlock: Memlock::Bytes(8 << 20),
            affinity: vec![0, 1, 2, 3],
            nodes: vec![(0, vec![0, 1]), (1, vec![2, 3])],
            clocksource: Some("tsc".into()),
            ..Host::default()
        }
    }

    #[test]
    fn device_address_local_or_not() {
        let h = host();
        assert_eq!(
            device_address(&h, &dev("127.77.1.2")).status,
            Status::Pass,
            "127/8 is local via lo"
        );
        assert_eq!(device_address(&h, &dev("10.0.0.5")).status, Status::Pass);
        assert_eq!(device_address(&h, &dev("10.9.9.9")).status, Status::Fail);
        let mut d = dev("127.0.0.1");
        d.bind = Bind::NotLocal;
        assert_eq!(device_address(&h, &d).status, Status::Fail);
    }

    #[test]
    fn port_states() {
        let mut d = dev("127.0.0.1");
        assert_eq!(udp_port(&d).status, Status::Pass);
        d.bind = Bind::Uroce {
            pid: 7,
            program: "ib_write_bw".into(),
        };
        assert_eq!(udp_port(&d).status, Status::Pass);
        d.bind = Bind::Other {
            owner: Some((9, "nc".into())),
        };
        let f = udp_port(&d);
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.value.contains("bound by another program: pid 9 (nc)"),
            "{}",
            f.value
        );
    }

    #[test]
    fn mtu_fits_or_not() {
        let mut h = host();
        assert_eq!(
            mtu(&h, &dev("10.0.0.5")).status,
            Status::Pass,
            "1500 ≥ 1088"
        );
        h.ifaces[1].mtu = Some(576);
        let f = mtu(&h, &dev("10.0.0.5"));
        assert_eq!(f.status, Status::Fail);
        assert!(f.fix.contains("ip link set dev eth0 mtu"));
        let mut d = dev("10.0.0.5");
        d.active_mtu = 256;
        assert_eq!(mtu(&h, &d).status, Status::Pass, "576 ≥ 320");
        assert_eq!(roce_overhead("::1".parse().unwrap()), 84);
    }

    #[test]
    fn numa_locality() {
        let mut h = host();
        assert_eq!(
            numa(&h, &dev("127.0.0.1")).status,
            Status::Pass,
            "lo: no device"
        );
        assert_eq!(
            numa(&h, &dev("10.0.0.5")).status,
            Status::Warn,
            "CPUs 0-3, node 1 has 2-3"
        );
        h.affinity = vec![2, 3];
        assert_eq!(numa(&h, &dev("10.0.0.5")).status, Status::Pass);
        h.affinity = vec![0];
        let f = numa(&h, &dev("10.0.0.5"));
        assert_eq!(f.status, Status::Warn);
        assert!(f.fix.contains("--cpunodebind=1"));
        h.ifaces[1].numa_node = Some(-1);
        assert_eq!(numa(&h, &dev("10.0.0.5")).status, Status::Pass);
        assert_eq!(cpulist(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    }

    #[test]
    fn rp_filter_strict_with_two_interfaces() {
        let mut h = host();
        assert_eq!(rp_filter(&h, &dev("10.0.0.5")).status, Status::Pass);
        h.rp_filter_all = Some(1);
        assert_eq!(rp_filter(&h, &dev("10.0.0.5")).status, Status::Warn);
        assert_eq!(
            rp_filter(&h, &dev("127.0.0.1")).status,
            Status::Pass,
            "loopback"
        );
        h.rp_filter_all = Some(2);
        assert_eq!(
            rp_filter(&h, &dev("10.0.0.5")).status,
            Status::Pass,
            "loose"
        );
        h.rp_filter_all = Some(0);
        h.ifaces[1].rp_filter = Some(1);
        assert_eq!(
            rp_filter(&h, &dev("10.0.0.5")).status,
            Status::Warn,
            "per-interface strict"
        );
        h.ifaces.truncate(2);
        assert_eq!(
            rp_filter(&h, &dev("10.0.0.5")).status,
            Status::Pass,
            "one interface"
        );
    }

    #[test]
    fn route_local_or_not() {
        assert_eq!(route(&dev("127.0.0.1")).status, Status::Pass);
        let mut d = dev("10.9.9.9");
        d.route = Some(Ok("10.9.9.9 via 10.0.0.1 dev eth0 src 10.0.0.5".into()));
        assert_eq!(route(&d).status, Status::Fail);
        d.route = Some(Err("RTNETLINK answers: Network is unreachable".into()));
        assert_eq!(route(&d).status, Status::Fail);
    }

    #[test]
    fn firewall_rules() {
        let mut h = host();
        let d = dev("10.0.0.5");
        assert_eq!(firewall(&h, &d)[0].status, Status::Pass);
        h.rules = vec![Rules {
            tool: "iptables",
            text: Err("Permission denied (you must be root)".into()),
        }];
        assert_eq!(firewall(&h, &d)[0].status, Status::Warn);
        h.rules = vec![Rules {
            tool: "iptables",
            text: Ok("-P INPUT ACCEPT\n-A INPUT -p udp -m udp --dport 4791 -j DROP\n".into()),
        }];
        let f = &firewall(&h, &d)[0];
        assert_eq!(f.status, Status::Fail);
        assert!(f.value.contains("--dport 4791 -j DROP"), "{}", f.value);
        assert_eq!(
            firewall(&h, &dev("::1"))[0].status,
            Status::Pass,
            "iptables is IPv4 only"
        );
        h.rules = vec![Rules {
            tool: "iptables",
            text: Ok("-P INPUT ACCEPT\n".into()),
        }];
        assert_eq!(firewall(&h, &d)[0].status, Status::Pass);
    }

    #[test]
    fn daemon_socket_permissions() {
        let mut h = host();
        assert_eq!(daemon_socket(&h).status, Status::Info, "embedded mode");
        h.daemon_env = Some("/run/x".into());
        assert_eq!(daemon_socket(&h).status, Status::Fail, "named but missing");
        let sock = |mode: u32, uid: u32, gid: u32| SocketFile {
            path: "/run/uroce/uverbs0".into(),
            chain: vec![
                ("/run/uroce/uverbs0".into(), Some((mode, uid, gid))),
                ("/run/uroce".into(), Some((0o755, 0, 0))),
            ],
            is_socket: true,
        };
        h.sockets = vec![sock(0o600, 0, 0)];
        let f = daemon_socket(&h);
        assert_eq!(f.status, Status::Fail);
        assert!(f.fix.contains("chmod 0660"));
        h.sockets = vec![sock(0o666, 0, 0)];
        assert_eq!(daemon_socket(&h).status, Status::Pass);
        h.sockets = vec![sock(0o660, 0, 1000)];
        assert_eq!(daemon_socket(&h).status, Status::Pass, "group member");
        h.sockets = vec![sock(0o660, 0, 27)];
        assert_eq!(daemon_socket(&h).status, Status::Fail);
        h.sockets = vec![sock(0o600, 1000, 27)];
        assert_eq!(daemon_socket(&h).status, Status::Pass, "owner");
        h.sockets[0].chain[1].1 = Some((0o700, 0, 0));
        assert_eq!(
            daemon_socket(&h).status,
            Status::Fail,
            "directory not searchable"
        );
        h.uid = 0;
        assert_eq!(daemon_socket(&h).status, Status::Pass, "root");
    }

    #[test]
    fn memlock_against_mr_size() {
        let mut h = host();
        assert_eq!(memlock(&h).status, Status::Warn, "8 MiB < 64 MiB default");
        h.mr_size = Some(1 << 20);
        assert_eq!(memlock(&h).status, Status::Pass);
        h.mr_size = Some(1 << 30);
        let f = memlock(&h);
        assert_eq!(f.status, Status::Fail);
        assert!(f.fix.contains("ulimit -l 1048576"), "{}", f.fix);
        h.memlock = Memlock::Unlimited;
        assert_eq!(memlock(&h).status, Status::Pass);
    }

    #[test]
    fn hugepages_against_mr_size() {
        let mut h = host();
        h.thp = Some("madvise".into());
        assert_eq!(hugepages(&h).status, Status::Info);
        h.want_hugepages = true;
        h.mr_size = Some(1 << 30);
        h.hugepages = Some((10, 2 << 20));
        let f = hugepages(&h);
        assert_eq!(f.status, Status::Fail);
        assert!(f.fix.contains("vm.nr_hugepages=512"), "{}", f.fix);
        h.hugepages = Some((512, 2 << 20));
        assert_eq!(hugepages(&h).status, Status::Pass);
    }

    #[test]
    fn cpus_and_clock() {
        let mut h = host();
        assert_eq!(cpus(&h).status, Status::Pass);
        h.affinity = vec![0, 1];
        let f = cpus(&h);
        assert_eq!(f.status, Status::Warn);
        assert!(f.fix.contains("park_when_contended"));
        assert_eq!(clocksource(&h).status, Status::Pass);
        h.clocksource = Some("hpet".into());
        assert_eq!(clocksource(&h).status, Status::Warn);
    }

    #[test]
    fn counters_of_running_devices() {
        let mut h = host();
        assert_eq!(counters(&h)[0].status, Status::Info);
        let snap = |pairs: &[(&str, u64)]| Snapshot {
            version: SNAPSHOT_VERSION,
            pid: 42,
            program: "ib_write_bw".into(),
            cmdline: vec![],
            time_ms: 0,
            devices: vec![DeviceSnapshot {
                name: "uroce0".into(),
                addr: "127.0.0.1".parse().unwrap(),
                port: 1,
                counters: CounterSet::from_pairs(pairs.iter().copied()),
                objects: Default::default(),
                qps: vec![],
                cqs: vec![],
            }],
            exited: false,
        };
        h.running = vec![snap(&[("sent_pkts", 100), ("cq_overflow", 0)])];
        assert_eq!(counters(&h)[0].status, Status::Pass);
        h.running = vec![snap(&[
            ("cq_overflow", 2),
            ("rcvd_rnr_err", 1),
            ("rcvd_seq_err", 3),
            ("rcvd_icrc_err", 1),
            ("dropped_pkts", 1),
        ])];
        let f = counters(&h);
        assert_eq!(f.len(), 5, "{f:?}");
        assert!(f.iter().all(|f| f.status == Status::Warn));
        assert!(f[0].fix.contains("larger CQs"));
        h.only = vec!["other".into()];
        assert_eq!(counters(&h)[0].status, Status::Info);
    }

    #[test]
    fn ecn_is_honest() {
        let mut h = host();
        let f = ecn(&h, &dev("10.0.0.5"));
        assert_eq!(f.status, Status::Info);
        assert!(f.value.contains("ECN: on") && f.value.contains("qdisc mq"));
        h.ecn_env = Some("0".into());
        let f = ecn(&h, &dev("10.0.0.5"));
        assert!(f.value.contains("ECN: off (UROCE_ECN=0)"), "{}", f.value);
        assert!(f.fix.contains("unset UROCE_ECN"));
    }
}
