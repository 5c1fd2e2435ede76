//! Measuring the host: fills a [`Host`] for the checks. Files under `/proc` and `/sys` are
//! read through [`Fs`], whose root a test can point at a crafted tree; the rest (binding a
//! socket, the interface list, running `ip`/`iptables`/`nft`, asking running uroce
//! processes) is done on the live system.

use std::ffi::CStr;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::checks::{Bind, Device, Host, Iface, Memlock, Owner, Rules, SocketFile};
use super::firewall::ROCE_PORT;

/// How long to wait for each running uroce process's counters (as `uroce stat`).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// Reads files below a root directory (`/` on a live system).
#[derive(Clone, Debug)]
pub struct Fs {
    pub root: PathBuf,
}

impl Fs {
    pub fn live() -> Fs {
        Fs {
            root: PathBuf::from("/"),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    pub fn read(&self, p: &str) -> Option<String> {
        fs::read_to_string(self.path(p)).ok()
    }

    fn read_num<T: std::str::FromStr>(&self, p: &str) -> Option<T> {
        self.read(p)?.trim().parse().ok()
    }

    fn list(&self, p: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.path(p))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// `0-3,8,10-11` → CPUs.
pub fn parse_cpulist(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
            // A bound on a hostile or broken file: no machine has a million CPUs.
            out.extend(a..=b.min(a + (1 << 20)));
        }
    }
    out
}

/// A `Key:\tvalue` line of `/proc/self/status` or `/proc/meminfo`.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(str::trim))
}

/// `HugePages_Free` and `Hugepagesize` (bytes) from `/proc/meminfo`.
pub fn parse_hugepages(meminfo: &str) -> Option<(u64, u64)> {
    let free = field(meminfo, "HugePages_Free")?.parse().ok()?;
    let size_kb: u64 = field(meminfo, "Hugepagesize")?
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((free, size_kb * 1024))
}

/// The bracketed choice of `always [madvise] never`.
pub fn parse_thp(s: &str) -> Option<String> {
    let a = s.find('[')?;
    let b = s[a..].find(']')? + a;
    Some(s[a + 1..b].to_string())
}

/// The soft "Max locked memory" of `/proc/self/limits` (what getrlimit(RLIMIT_MEMLOCK)
/// returns, readable without a system call of our own).
pub fn parse_memlock(limits: &str) -> Memlock {
    let Some(line) = limits.lines().find(|l| l.starts_with("Max locked memory")) else {
        return Memlock::Unreadable("no Max locked memory line in /proc/self/limits".into());
    };
    match line["Max locked memory".len()..].split_whitespace().next() {
        Some("unlimited") => Memlock::Unlimited,
        Some(soft) => soft.parse().map_or_else(
            |e| Memlock::Unreadable(format!("{soft}: {e}")),
            Memlock::Bytes,
        ),
        None => Memlock::Unreadable("empty Max locked memory line".into()),
    }
}

/// `1G`, `512M`, `64k`, `1GiB`, `4096` → bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 1G, 512M, 4096)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        u => return Err(format!("unknown unit `{u}` in `{s}` (K, M, G, T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// The interfaces and their addresses, from getifaddrs(3).
fn ifaddrs() -> io::Result<Vec<(String, u32, Option<IpAddr>)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs stores the head of a list it allocated into `head`; the list is
    // only read below and released once with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let addr = if ifa.ifa_addr.is_null() {
            None
        } else {
            // SAFETY: a non-null ifa_addr points to a sockaddr whose family tells its type;
            // sockaddr_in / sockaddr_in6 are read only for AF_INET / AF_INET6.
            unsafe {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))))
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
                    }
                    _ => None,
                }
            }
        };
        out.push((name, ifa.ifa_flags, addr));
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once; nothing borrowed from it lives on.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// `qdisc` of each interface from `ip -o link show`.
fn qdiscs() -> Vec<(String, String)> {
    let Ok(out) = Command::new("ip").args(["-o", "link", "show"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let name = l.split(": ").nth(1)?.split('@').next()?.to_string();
            let q = l
                .split(" qdisc ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .to_string();
            Some((name, q))
        })
        .collect()
}

/// An interface's settings under `/sys/class/net/IF` and `/proc/sys/net/ipv4/conf/IF`;
/// `flags` are its `IFF_*` flags.
pub fn iface_files(fs: &Fs, name: &str, flags: u32) -> Iface {
    Iface {
        name: name.to_string(),
        loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
        up: flags & libc::IFF_UP as u32 != 0,
        mtu: fs.read_num(&format!("/sys/class/net/{name}/mtu")),
        numa_node: fs.read_num(&format!("/sys/class/net/{name}/device/numa_node")),
        rp_filter: fs.read_num(&format!("/proc/sys/net/ipv4/conf/{name}/rp_filter")),
        ..Iface::default()
    }
}

fn interfaces(fs: &Fs) -> Vec<Iface> {
    let mut out: Vec<Iface> = Vec::new();
    for (name, flags, addr) in ifaddrs().unwrap_or_default() {
        let i = match out.iter().position(|i| i.name == name) {
            Some(i) => i,
            None => {
                out.push(iface_files(fs, &name, flags));
                out.len() - 1
            }
        };
        if let Some(a) = addr {
            out[i].addrs.push(a);
        }
    }
    for (name, q) in qdiscs() {
        if let Some(i) = out.iter_mut().find(|i| i.name == name) {
            i.qdisc = Some(q);
        }
    }
    out
}

/// The sockets bound to local port 4791 in `/proc/net/udp` or `udp6`, as (address, inode).
pub fn parse_proc_udp(text: &str, v6: bool) -> Vec<(IpAddr, u64)> {
    let mut out = Vec::new();
    for l in text.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(local), Some(inode)) = (f.get(1), f.get(9)) else {
            continue;
        };
        let Some((a, port)) = local.split_once(':') else {
            continue;
        };
        if u16::from_str_radix(port, 16).ok() != Some(ROCE_PORT) {
            continue;
        }
        // Each 32-bit word is printed as the kernel holds it (network order bytes read as a
        // native integer), so its native-endian bytes are the address bytes.
        let words: Option<Vec<u32>> = (0..a.len() / 8)
            .map(|i| u32::from_str_radix(&a[i * 8..i * 8 + 8], 16).ok())
            .collect();
        let Some(words) = words else { continue };
        let addr = match (v6, words.as_slice()) {
            (false, [w]) => IpAddr::V4(Ipv4Addr::from(w.to_ne_bytes())),
            (true, [a, b, c, d]) => {
                let mut o = [0u8; 16];
                for (i, w) in [a, b, c, d].iter().enumerate() {
                    o[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
                }
                IpAddr::V6(Ipv6Addr::from(o))
            }
            _ => continue,
        };
        if let Ok(inode) = inode.parse() {
            out.push((addr, inode));
        }
    }
    out
}

/// Inodes of the UDP 4791 sockets bound to `addr` or to the wildcard address, from
/// `/proc/net/udp{,6}` (every socket of this network namespace, whoever owns it).
fn udp_inodes(fs: &Fs, addr: IpAddr) -> Vec<u64> {
    let mut inodes = Vec::new();
    for (file, v6) in [("/proc/net/udp", false), ("/proc/net/udp6", true)] {
        let text = fs.read(file).unwrap_or_default();
        for (a, inode) in parse_proc_udp(&text, v6) {
            let mapped = match a {
                IpAddr::V6(v) => v.to_ipv4_mapped().map(IpAddr::V4),
                _ => None,
            };
            if a == addr || a.is_unspecified() || mapped == Some(addr) {
                inodes.push(inode);
            }
        }
    }
    inodes
}

/// The process holding one of the sockets `inodes`, when `/proc` lets this user see it
/// (root sees every process's descriptors, a user only their own).
fn socket_owner(fs: &Fs, inodes: &[u64]) -> Option<(u32, String)> {
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for pid in fs
        .list("/proc")
        .iter()
        .filter_map(|p| p.parse::<u32>().ok())
    {
        let fd_dir = fs.path(&format!("/proc/{pid}/fd"));
        let Ok(rd) = fs::read_dir(&fd_dir) else {
            continue;
        };
        for e in rd.filter_map(|e| e.ok()) {
            if let Ok(target) = fs::read_link(e.path()) {
                if wanted.iter().any(|w| target.as_os_str() == w.as_str()) {
                    let comm = fs
                        .read(&format!("/proc/{pid}/comm"))
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                    return Some((pid, comm));
                }
            }
        }
    }
    None
}

fn bind_state(
    fs: &Fs,
    addr: IpAddr,
    iface: Option<&str>,
    running: &[uroce::stats::Snapshot],
) -> Bind {
    let sa = match addr {
        IpAddr::V6(v) if v.is_unicast_link_local() => {
            let scope = iface
                .and_then(|n| std::ffi::CString::new(n).ok())
                .map_or(0, |c| {
                    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
                    unsafe { libc::if_nametoindex(c.as_ptr()) }
                });
            SocketAddr::V6(SocketAddrV6::new(v, ROCE_PORT, 0, scope))
        }
        a => SocketAddr::new(a, ROCE_PORT),
    };
    let by_uroce = |pid: Option<u32>| {
        running
            .iter()
            .find(|p| {
                Some(p.pid) == pid || (pid.is_none() && p.devices.iter().any(|d| d.addr == addr))
            })
            .map(|p| Bind::Uroce {
                pid: p.pid,
                program: p.program.clone(),
            })
    };
    let in_use = |inodes: &[u64]| {
        let owner = socket_owner(fs, inodes);
        by_uroce(owner.as_ref().map(|o| o.0))
            .or_else(|| {
                if owner.is_none() {
                    by_uroce(None)
                } else {
                    None
                }
            })
            .unwrap_or(Bind::Other { owner })
    };
    // Known taken: no need to try. Otherwise bind for an instant, which also tells whether
    // the address is local; a uroce process starting in that very instant would be refused
    // the port, so the socket is closed at once.
    let inodes = udp_inodes(fs, addr);
    if !inodes.is_empty() {
        return in_use(&inodes);
    }
    match UdpSocket::bind(sa) {
        Ok(_) => Bind::Free,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            // Taken between the look at /proc and the bind.
            in_use(&udp_inodes(fs, addr))
        }
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Bind::NotLocal,
        Err(e) => Bind::Error(e.to_string()),
    }
}

fn route_of(addr: IpAddr) -> Option<Result<String, String>> {
    let out = Command::new("ip")
        .args(["route", "get", &addr.to_string()])
        .output()
        .ok()?;
    if out.status.success() {
        let s = String::from_utf8_lossy(&out.stdout);
        Some(Ok(s
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")))
    } else {
        Some(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

/// Output of a rules listing tool; `None` when the tool is not installed.
fn rules_of(tool: &'static str, args: &[&str]) -> Option<Rules> {
    let out = match Command::new(tool).args(args).output() {
        Ok(o) => o,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            return Some(Rules {
                tool,
                text: Err(e.to_string()),
            })
        }
    };
    let text = if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(err.lines().next().unwrap_or("failed").trim().to_string())
    };
    Some(Rules { tool, text })
}

/// Mode, uid and gid of `p` and of each directory above it.
fn stat_chain(p: &Path) -> Vec<(String, Option<Owner>)> {
    let mut out = Vec::new();
    let mut cur = Some(p);
    while let Some(c) = cur {
        if c.as_os_str().is_empty() {
            break;
        }
        let st = fs::metadata(c).ok().map(|m| (m.mode(), m.uid(), m.gid()));
        out.push((c.display().to_string(), st));
        cur = c.parent();
    }
    out
}

fn daemon_sockets(daemon_env: Option<&str>) -> Vec<SocketFile> {
    let mut paths: Vec<PathBuf> = Vec::new();
    if let Some(p) = daemon_env {
        paths.push(PathBuf::from(p));
    }
    let mut dirs = vec![PathBuf::from("/run/uroce")];
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| Path::new(x).is_absolute()) {
        dirs.push(Path::new(&x).join("uroce"));
    }
    for d in dirs {
        // Only uverbs* names: the same directory holds `uroce stat`'s <pid>.sock files.
        if let Ok(rd) = fs::read_dir(&d) {
            let mut found: Vec<PathBuf> = rd
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("uverbs"))
                .map(|e| e.path())
                .collect();
            found.sort();
            paths.extend(found);
        }
    }
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| fs::symlink_metadata(p).is_ok())
        .map(|p| SocketFile {
            path: p.display().to_string(),
            is_socket: fs::metadata(&p).is_ok_and(|m| m.file_type().is_socket()),
            chain: stat_chain(&p),
        })
        .collect()
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Want {
    pub devices: Vec<(String, IpAddr, u32)>,
    pub only: Vec<String>,
    pub mr_size: Option<u64>,
    pub hugepages: bool,
}

/// Measure the live host.
pub fn measure(want: &Want) -> Host {
    let fs = Fs::live();
    let status = fs.read("/proc/self/status").unwrap_or_default();
    let uid = field(&status, "Uid")
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(u32::MAX);
    let mut gids: Vec<u32> = field(&status, "Groups")
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .collect();
    if let Some(g) = field(&status, "Gid").and_then(|s| s.split_whitespace().nth(1)?.parse().ok()) {
        gids.push(g);
    }
    let ifaces = interfaces(&fs);
    let collected = uroce::stats::collect(ANSWER_TIMEOUT);
    let devices = want
        .devices
        .iter()
        .map(|(name, addr, active_mtu)| {
            let iface = ifaces
                .iter()
                .find(|i| i.addrs.contains(addr))
                .map(|i| i.name.as_str());
            Device {
                name: name.clone(),
                addr: *addr,
                active_mtu: *active_mtu,
                bind: bind_state(&fs, *addr, iface, &collected.processes),
                route: route_of(*addr),
            }
        })
        .collect();
    let daemon_env = std::env::var("UROCE_DAEMON").ok().filter(|s| !s.is_empty());
    let mut rules = Vec::new();
    rules.extend(rules_of("iptables", &["-S"]));
    rules.extend(rules_of("ip6tables", &["-S"]));
    rules.extend(rules_of("nft", &["list", "ruleset"]));
    let mut h = Host {
        uid,
        gids,
        devices,
        ifaces,
        rp_filter_all: fs.read_num("/proc/sys/net/ipv4/conf/all/rp_filter"),
        sockets: daemon_sockets(daemon_env.as_deref()),
        daemon_env,
        ecn_env: std::env::var(nic::ECN_ENV).ok(),
        mr_size: want.mr_size,
        want_hugepages: want.hugepages,
        rules,
        running: collected.processes,
        unanswered: collected.unanswered.len(),
        only: want.only.clone(),
        ..Host::default()
    };
    read_files(&fs, &mut h);
    h
}

/// The parts of [`Host`] that come from files under `/proc` and `/sys` only.
pub fn read_files(fs: &Fs, h: &mut Host) {
    if let Some(l) = fs.read("/proc/self/limits") {
        h.memlock = parse_memlock(&l);
    }
    h.hugepages = fs
        .read("/proc/meminfo")
        .as_deref()
        .and_then(parse_hugepages);
    h.thp = fs
        .read("/sys/kernel/mm/transparent_hugepage/enabled")
        .as_deref()
        .and_then(parse_thp);
    h.affinity = fs
        .read("/proc/self/status")
        .as_deref()
        .and_then(|s| field(s, "Cpus_allowed_list").map(parse_cpulist))
        .unwrap_or_default();
    h.nodes = fs
        .list("/sys/devices/system/node")
        .iter()
        .filter_map(|n| {
            let id: i32 = n.strip_prefix("node")?.parse().ok()?;
            let cpus = fs.read(&format!("/sys/devices/system/node/{n}/cpulist"))?;
            Some((id, parse_cpulist(&cpus)))
        })
        .collect();
    h.clocksource = fs
        .read("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim().to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(parse_cpulist("0-2,5,7-8\n"), vec![0, 1, 2, 5, 7, 8]);
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("1X").is_err() && parse_size("G").is_err());
        assert_eq!(
            parse_thp("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax locked memory         8388608              8388608              bytes     \n";
        assert_eq!(parse_memlock(limits), Memlock::Bytes(8 << 20));
        assert_eq!(
            parse_memlock(&limits.replace("8388608 ", "unlimited")),
            Memlock::Unlimited
        );
        let udp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n  1: 0100007F:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 12345 2 0000000000000000 0\n  2: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 999 2 0000000000000000 0\n";
        assert_eq!(
            parse_proc_udp(udp, false),
            vec![("127.0.0.1".parse().unwrap(), 12345)]
        );
        let udp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n  1: 00000000000000000000000001000000:12B7 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 777 2 0000000000000000 0\n";
        assert_eq!(
            parse_proc_udp(udp6, true),
            vec![("::1".parse().unwrap(), 777)]
        );
    }

    #[test]
    fn files_from_a_crafted_root() {
        let root = std::env::temp_dir().join(format!("uroce-doctor-root-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let put = |p: &str, body: &str| {
            let f = root.join(p);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, body).unwrap();
        };
        put(
            "proc/self/limits",
            "Max locked memory         65536                65536                bytes\n",
        );
        put("proc/meminfo", "MemTotal: 1 kB\nHugePages_Total:      16\nHugePages_Free:       8\nHugepagesize:       2048 kB\n");
        put(
            "sys/kernel/mm/transparent_hugepage/enabled",
            "[always] madvise never\n",
        );
        put("proc/self/status", "Name:\tx\nCpus_allowed_list:\t0-3\n");
        put("sys/devices/system/node/node0/cpulist", "0-1\n");
        put("sys/devices/system/node/node1/cpulist", "2-3\n");
        put(
            "sys/devices/system/clocksource/clocksource0/current_clocksource",
            "hpet\n",
        );
        let mut h = Host::default();
        read_files(&Fs { root: root.clone() }, &mut h);
        assert_eq!(h.memlock, Memlock::Bytes(65536));
        assert_eq!(h.hugepages, Some((8, 2 << 20)));
        assert_eq!(h.thp.as_deref(), Some("always"));
        assert_eq!(h.affinity, vec![0, 1, 2, 3]);
        assert_eq!(h.nodes, vec![(0, vec![0, 1]), (1, vec![2, 3])]);
        assert_eq!(h.clocksource.as_deref(), Some("hpet"));
        use super::super::checks::{clocksource, memlock, Status};
        h.mr_size = Some(1 << 20);
        assert_eq!(memlock(&h).status, Status::Fail);
        assert_eq!(clocksource(&h).status, Status::Warn);
        // An interface: a NIC on NUMA node 1 with a 576-byte MTU and strict rp_filter.
        put("sys/class/net/eth9/mtu", "576\n");
        put("sys/class/net/eth9/device/numa_node", "1\n");
        put("proc/sys/net/ipv4/conf/eth9/rp_filter", "1\n");
        put("proc/sys/net/ipv4/conf/all/rp_filter", "0\n");
        put("proc/sys/net/ipv4/conf/eth8/rp_filter", "0\n");
        let fsr = Fs { root: root.clone() };
        let mut eth9 = iface_files(&fsr, "eth9", libc::IFF_UP as u32);
        assert_eq!(
            (eth9.mtu, eth9.numa_node, eth9.rp_filter),
            (Some(576), Some(1), Some(1))
        );
        assert!(eth9.up && !eth9.loopback);
        eth9.addrs = vec!["10.0.0.9".parse().unwrap()];
        let eth8 = iface_files(&fsr, "eth8", libc::IFF_UP as u32);
        assert_eq!(eth8.numa_node, None, "no device directory: virtual");
        h.ifaces = vec![eth9, eth8];
        h.rp_filter_all = fsr.read_num("/proc/sys/net/ipv4/conf/all/rp_filter");
        let d = super::super::checks::Device {
            name: "t".into(),
            addr: "10.0.0.9".parse().unwrap(),
            active_mtu: 1024,
            bind: super::super::checks::Bind::Free,
            route: None,
        };
        use super::super::checks::{mtu, numa, rp_filter};
        assert_eq!(mtu(&h, &d).status, Status::Fail);
        assert_eq!(rp_filter(&h, &d).status, Status::Warn);
        assert_eq!(
            numa(&h, &d).status,
            Status::Warn,
            "allowed CPUs 0-3, node 1 has only 2-3"
        );
        h.affinity = vec![2, 3];
        assert_eq!(numa(&h, &d).status, Status::Pass);
        let _ = fs::remove_dir_all(&root);
    }
}
