//! `uroce doctor` on the real system: each check made to FAIL (or WARN) by changing the host
//! — a lowered RLIMIT_MEMLOCK, UDP 4791 taken, an iptables DROP rule, a small interface MTU,
//! strict rp_filter, a daemon socket this user may not connect to — and to PASS once the
//! change is undone. Tests that need root (network namespaces, another uid) say so and skip
//! without it; network changes happen only inside namespaces these tests create.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// A private, empty stats directory: the checks must not see other uroce processes.
fn stats_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("uroce-doctor-stats-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// `uroce doctor --json ARGS` with `UROCE_DEVICES=devices`, optionally wrapped in
/// `ip netns exec NS`; `tweak` adjusts the command (limits, uid).
fn doctor(
    devices: &str,
    netns: Option<&str>,
    args: &[&str],
    tweak: impl FnOnce(&mut Command),
) -> (Vec<Value>, i32) {
    doctor_bin(
        env!("CARGO_BIN_EXE_uroce").as_ref(),
        devices,
        netns,
        args,
        tweak,
    )
}

/// [`doctor`] with the `uroce` binary at `bin`.
fn doctor_bin(
    bin: &std::path::Path,
    devices: &str,
    netns: Option<&str>,
    args: &[&str],
    tweak: impl FnOnce(&mut Command),
) -> (Vec<Value>, i32) {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.arg("doctor").arg("--json").args(args);
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let own_stats = stats_dir(&format!("run{n}"));
    cmd.env("UROCE_DEVICES", devices)
        .env("UROCE_STATS_DIR", &own_stats)
        .env_remove("UROCE_DAEMON")
        .env_remove("XDG_RUNTIME_DIR");
    tweak(&mut cmd);
    let out = cmd.output().expect("run uroce doctor");
    let _ = std::fs::remove_dir_all(&own_stats);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let findings: Vec<Value> = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (findings, out.status.code().unwrap_or(-1))
}

/// The finding of `check` (for `device`, if given).
fn get<'a>(findings: &'a [Value], check: &str, device: Option<&str>) -> &'a Value {
    findings
        .iter()
        .find(|f| f["check"] == check && device.is_none_or(|d| f["device"] == d))
        .unwrap_or_else(|| panic!("no {check} finding in {findings:#?}"))
}

fn status<'a>(findings: &'a [Value], check: &str) -> &'a str {
    get(findings, check, None)["status"].as_str().unwrap()
}

fn value(findings: &[Value], check: &str) -> String {
    get(findings, check, None)["value"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Set RLIMIT_MEMLOCK (soft and hard) in the child before it runs the doctor.
fn with_memlock(cmd: &mut Command, bytes: u64) {
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit,
    // which is async-signal-safe, on a value copied into it.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn current_memlock_hard() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    assert_eq!(rc, 0);
    lim.rlim_max
}

#[test]
fn memlock_below_mr_size_fails_and_above_passes() {
    let dev = "t0=127.0.0.1";
    let (f, code) = doctor(dev, None, &["--mr-size", "4M"], |c| {
        with_memlock(c, 1 << 20)
    });
    assert_eq!(
        status(&f, "memlock"),
        "fail",
        "{:#?}",
        get(&f, "memlock", None)
    );
    assert!(value(&f, "memlock").contains("RLIMIT_MEMLOCK 1 MiB vs 4 MiB"));
    assert!(get(&f, "memlock", None)["fix"]
        .as_str()
        .unwrap()
        .contains("ulimit -l 4096"));
    assert_eq!(code, 1, "a FAIL exits 1");

    // Raised to the hard limit (at most 16 MiB; raising the hard limit itself needs
    // CAP_SYS_RESOURCE, which a container's root may lack), --mr-size below it.
    let raised = current_memlock_hard().min(16 << 20);
    if raised < 2 << 20 {
        eprintln!("SKIPPED (PASS half): hard RLIMIT_MEMLOCK below 2 MiB");
        return;
    }
    let mr = format!("{}K", raised / 2048);
    let (f, _) = doctor(dev, None, &["--mr-size", &mr], |c| with_memlock(c, raised));
    assert_eq!(
        status(&f, "memlock"),
        "pass",
        "{:#?}",
        get(&f, "memlock", None)
    );
    let want = format!("RLIMIT_MEMLOCK {} MiB", raised >> 20);
    assert!(
        value(&f, "memlock").contains(&want),
        "{}",
        value(&f, "memlock")
    );
}

#[test]
fn port_taken_by_another_program_fails_and_free_passes() {
    let addr = "127.88.17.1";
    let dev = format!("t0={addr}");
    let taken = std::net::UdpSocket::bind((addr, 4791)).expect("bind the test port");
    let (f, code) = doctor(&dev, None, &[], |_| {});
    let port = get(&f, "udp-4791", Some("t0"));
    assert_eq!(port["status"], "fail", "{port:#?}");
    let v = port["value"].as_str().unwrap();
    assert!(v.contains("bound by another program"), "{v}");
    if is_root() {
        // /proc shows every process's sockets to root: the owner is this test.
        assert!(v.contains(&format!("pid {}", std::process::id())), "{v}");
    }
    assert_eq!(code, 1);
    drop(taken);
    let (f, _) = doctor(&dev, None, &[], |_| {});
    let port = get(&f, "udp-4791", Some("t0"));
    assert_eq!(port["status"], "pass", "{port:#?}");
    assert_eq!(get(&f, "device", Some("t0"))["status"], "pass");
}

#[test]
fn address_not_on_this_host_fails() {
    // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): on no interface here.
    let (f, code) = doctor("t0=192.0.2.77", None, &[], |_| {});
    assert_eq!(get(&f, "device", Some("t0"))["status"], "fail");
    assert!(get(&f, "udp-4791", Some("t0"))["value"]
        .as_str()
        .unwrap()
        .contains("address not local"));
    assert_eq!(get(&f, "route", Some("t0"))["status"], "fail");
    assert_eq!(code, 1);
}

#[test]
fn hugepages_short_of_mr_size_fail() {
    // No test machine has a tebibyte of free huge pages.
    let (f, code) = doctor(
        "t0=127.0.0.1",
        None,
        &["--hugepages", "--mr-size", "1T"],
        |_| {},
    );
    let h = get(&f, "hugepages", None);
    assert_eq!(h["status"], "fail", "{h:#?}");
    assert!(
        h["fix"].as_str().unwrap().contains("vm.nr_hugepages="),
        "{h:#?}"
    );
    assert_eq!(code, 1);
    // Not asked for: information only (the transparent huge page mode).
    let (f, _) = doctor("t0=127.0.0.1", None, &[], |_| {});
    assert_eq!(status(&f, "hugepages"), "info");
}

#[test]
fn one_allowed_cpu_warns() {
    let (f, _) = doctor("t0=127.0.0.1", None, &[], |c| {
        // SAFETY: runs in the forked child before exec; sched_setaffinity is a plain
        // system call on a set built on the stack.
        unsafe {
            c.pre_exec(|| {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let c = get(&f, "cpus", None);
    assert_eq!(c["status"], "warn", "{c:#?}");
    assert!(
        c["value"]
            .as_str()
            .unwrap()
            .starts_with("1 CPUs available (0)"),
        "{c:#?}"
    );
    assert!(c["fix"].as_str().unwrap().contains("park_when_contended"));
}

#[test]
fn text_output_and_exit_status() {
    let bin = env!("CARGO_BIN_EXE_uroce");
    let dir = stats_dir("text");
    let out = Command::new(bin)
        .args(["doctor", "--mr-size", "1K"])
        .env("UROCE_DEVICES", "t0=127.0.0.1")
        .env("UROCE_STATS_DIR", &dir)
        .env_remove("UROCE_DAEMON")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("PASS  device t0")),
        "{text}"
    );
    assert!(
        lines.last().unwrap().ends_with(" fail"),
        "summary line: {text}"
    );
    // Every WARN/FAIL with a fix has it on the next line, indented.
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("WARN") || l.starts_with("FAIL") {
            assert!(lines[i + 1].starts_with("      fix: "), "{text}");
        }
    }
    let worst = if text.contains("\nFAIL") || text.starts_with("FAIL") {
        1
    } else if text.contains("\nWARN") || text.starts_with("WARN") {
        3
    } else {
        0
    };
    assert_eq!(out.status.code(), Some(worst), "{text}");
    // A device that is not configured is a usage error.
    let out = Command::new(bin)
        .args(["doctor", "-d", "nope"])
        .env("UROCE_DEVICES", "t0=127.0.0.1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

// ---------------------------------------------------------------------------------------
// Network namespaces (root)

/// A network namespace of this test, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Option<Netns> {
        if !is_root() {
            eprintln!("SKIPPED: {tag}: needs root for a network namespace");
            return None;
        }
        if !have("ip") {
            eprintln!("SKIPPED: {tag}: ip(8) missing");
            return None;
        }
        let name = format!("udoc-{}-{tag}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(std::process::Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIPPED: {tag}: ip netns add failed");
            return None;
        }
        let ns = Netns(name);
        ns.sh("ip link set lo up");
        Some(ns)
    }

    /// Run a shell command inside the namespace; it must succeed.
    fn sh(&self, script: &str) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, "sh", "-c", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn doctor(&self, devices: &str) -> (Vec<Value>, i32) {
        doctor(devices, Some(&self.0), &[], |_| {})
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn iptables_drop_rule_in_a_namespace_fails() {
    if !have("iptables") {
        eprintln!("SKIPPED: iptables missing (apt-get install iptables)");
        return;
    }
    let Some(ns) = Netns::new("fw") else { return };
    let (f, _) = ns.doctor("t0=127.0.0.1");
    let fw = get(&f, "firewall", Some("t0"));
    assert_eq!(fw["status"], "pass", "{fw:#?}");
    ns.sh("iptables -A INPUT -p udp --dport 4791 -j DROP");
    let (f, code) = ns.doctor("t0=127.0.0.1");
    let fw = get(&f, "firewall", Some("t0"));
    assert_eq!(fw["status"], "fail", "{fw:#?}");
    assert!(
        fw["value"].as_str().unwrap().contains("4791"),
        "names the rule: {fw:#?}"
    );
    assert_eq!(code, 1);
    // An accept in front of it, as the fix says, makes it pass again.
    ns.sh("iptables -I INPUT -p udp --dport 4791 -j ACCEPT");
    let (f, _) = ns.doctor("t0=127.0.0.1");
    assert_eq!(get(&f, "firewall", Some("t0"))["status"], "pass");
    // A default DROP policy without an accept for 4791 drops it too.
    ns.sh("iptables -F INPUT && iptables -P INPUT DROP");
    let (f, _) = ns.doctor("t0=127.0.0.1");
    assert_eq!(get(&f, "firewall", Some("t0"))["status"], "fail");
}

#[test]
fn small_interface_mtu_in_a_namespace_fails() {
    let Some(ns) = Netns::new("mtu") else { return };
    ns.sh(
        // A veth pair: the dummy module is not always there, veth is.
        "ip link add d0 type veth peer name d1 && ip addr add 10.77.1.1/24 dev d0 \
         && ip link set d0 mtu 576 up && ip link set d1 up",
    );
    let (f, code) = ns.doctor("t0=10.77.1.1");
    let m = get(&f, "mtu", Some("t0"));
    assert_eq!(m["status"], "fail", "{m:#?}");
    assert!(
        m["value"].as_str().unwrap().contains("d0 MTU 576"),
        "{m:#?}"
    );
    assert!(m["fix"]
        .as_str()
        .unwrap()
        .contains("ip link set dev d0 mtu"));
    assert_eq!(code, 1);
    assert_eq!(get(&f, "device", Some("t0"))["status"], "pass");
    assert_eq!(get(&f, "route", Some("t0"))["status"], "pass");
    assert_eq!(
        get(&f, "numa", Some("t0"))["status"],
        "pass",
        "veth: no NUMA node"
    );
    ns.sh("ip link set d0 mtu 1500");
    let (f, _) = ns.doctor("t0=10.77.1.1");
    assert_eq!(get(&f, "mtu", Some("t0"))["status"], "pass");
}

#[test]
fn strict_rp_filter_with_two_interfaces_warns() {
    let Some(ns) = Netns::new("rpf") else { return };
    ns.sh("ip link add d0 type veth peer name d1 \
         && ip addr add 10.77.2.1/24 dev d0 && ip addr add 10.77.3.1/24 dev d1 \
         && ip link set d0 up && ip link set d1 up \
         && echo 0 > /proc/sys/net/ipv4/conf/d0/rp_filter \
         && echo 1 > /proc/sys/net/ipv4/conf/all/rp_filter");
    let (f, _) = ns.doctor("t0=10.77.2.1");
    let r = get(&f, "rp_filter", Some("t0"));
    assert_eq!(r["status"], "warn", "{r:#?}");
    assert!(r["fix"].as_str().unwrap().contains("rp_filter=2"));
    ns.sh("echo 2 > /proc/sys/net/ipv4/conf/all/rp_filter");
    let (f, _) = ns.doctor("t0=10.77.2.1");
    assert_eq!(get(&f, "rp_filter", Some("t0"))["status"], "pass", "loose");
    ns.sh(
        "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter && echo 0 > /proc/sys/net/ipv4/conf/d0/rp_filter",
    );
    let (f, _) = ns.doctor("t0=10.77.2.1");
    assert_eq!(get(&f, "rp_filter", Some("t0"))["status"], "pass");
}

#[test]
fn daemon_socket_mode_decides_for_an_unprivileged_user() {
    if !is_root() {
        eprintln!("SKIPPED: daemon socket test needs root to run the doctor as nobody");
        return;
    }
    let dir = std::env::temp_dir().join(format!("uroce-doctor-daemon-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("uverbs0");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // `nobody` runs a copy of the binary in that directory: the checkout it was built in
    // may sit under a directory only its owner may enter (a home directory, mktemp -d).
    let bin = dir.join("uroce");
    std::fs::copy(env!("CARGO_BIN_EXE_uroce"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |c: &mut Command| {
        c.env("UROCE_DAEMON", &path);
        // SAFETY: runs in the forked child before exec; setgroups, setgid and setuid are
        // async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                let nobody: libc::uid_t = 65534;
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(nobody) != 0
                    || libc::setuid(nobody) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    };
    for (mode, want) in [(0o600, "fail"), (0o660, "fail"), (0o666, "pass")] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let (f, code) = doctor_bin(&bin, "t0=127.0.0.1", None, &[], as_nobody);
        let d = get(&f, "daemon-socket", None);
        assert_eq!(d["status"], want, "mode {mode:o}: {d:#?}");
        if want == "fail" {
            assert!(d["fix"].as_str().unwrap().contains("chmod"), "{d:#?}");
            assert_eq!(code, 1);
        }
        if have("iptables") {
            // The rules cannot be read without root: said, not guessed.
            let fw = get(&f, "firewall", Some("t0"));
            assert_eq!(fw["status"], "warn", "{fw:#?}");
            assert!(
                fw["value"].as_str().unwrap().contains("not readable"),
                "{fw:#?}"
            );
        }
    }
    // Root may connect whatever the mode.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (f, _) = doctor("t0=127.0.0.1", None, &[], |c| {
        c.env("UROCE_DAEMON", &path);
    });
    assert_eq!(get(&f, "daemon-socket", None)["status"], "pass");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child process killed when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn running_device_holds_the_port_and_its_error_counters_warn() {
    let addr = "127.88.17.9";
    let devices = format!("s0={addr}");
    let dir = stats_dir("running");
    // A perftest server: opens its device, then waits for a client that never comes. Its
    // TCP port may be taken by another test: then it exits and the next port is tried.
    let start = |port: u32| {
        let child = Command::new(env!("CARGO_BIN_EXE_uroce"))
            .args(["bench", "write_bw", "-p", &port.to_string()])
            .env("UROCE_DEVICES", &devices)
            .env("UROCE_STATS_DIR", &dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start a uroce server");
        Child(child)
    };
    let mut port = 20_000 + std::process::id() % 20_000;
    let mut server = start(port);
    let run = || {
        doctor(&devices, None, &[], |c| {
            c.env("UROCE_STATS_DIR", &dir);
        })
        .0
    };
    let held_by = |f: &[Value], pid: u32| {
        get(f, "udp-4791", Some("s0"))["value"]
            .as_str()
            .unwrap()
            .contains(&format!("bound by uroce process {pid} "))
    };
    // Poll (bounded by a count, not a clock) until the server's device is up.
    let mut f = run();
    for _ in 0..150 {
        // The process publishes before its device is listed: wait for both.
        let listed = f
            .iter()
            .any(|x| x["check"] == "counters" && x["device"] == "s0");
        if held_by(&f, server.0.id()) && listed {
            break;
        }
        if server.0.try_wait().unwrap().is_some() {
            port += 1;
            server = start(port);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        f = run();
    }
    let p = get(&f, "udp-4791", Some("s0"));
    assert_eq!(p["status"], "pass", "{p:#?}");
    assert!(held_by(&f, server.0.id()), "{p:#?}");
    let c = get(&f, "counters", Some("s0"));
    assert_eq!(c["status"], "pass", "{c:#?}");

    // A datagram that is no RoCEv2 packet: the device drops it as malformed.
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&[0xAB; 40], (addr, 4791)).unwrap();
    for _ in 0..100 {
        f = run();
        if get(&f, "counters", Some("s0"))["status"] == "warn" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let c = get(&f, "counters", Some("s0"));
    assert_eq!(c["status"], "warn", "{c:#?}");
    let v = c["value"].as_str().unwrap();
    assert!(
        v.contains("port_rcv_errors=") || v.contains("rcvd_icrc_err="),
        "{v}"
    );
    assert!(!c["fix"].as_str().unwrap().is_empty());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nft_drop_rule_in_a_namespace_fails() {
    if !have("nft") {
        eprintln!("SKIPPED: nft missing (apt-get install nftables)");
        return;
    }
    let Some(ns) = Netns::new("nft") else { return };
    ns.sh("nft add table inet udoc && nft add chain inet udoc input '{ type filter hook input priority 0; policy accept; }'");
    let (f, _) = ns.doctor("t0=127.0.0.1");
    assert_eq!(get(&f, "firewall", Some("t0"))["status"], "pass");
    ns.sh("nft add rule inet udoc input udp dport '{ 53, 4791 }' counter drop");
    let (f, code) = ns.doctor("t0=127.0.0.1");
    let fw = get(&f, "firewall", Some("t0"));
    assert_eq!(fw["status"], "fail", "{fw:#?}");
    assert!(fw["value"].as_str().unwrap().contains("4791"), "{fw:#?}");
    assert_eq!(code, 1);
    // Only from some sources: cannot be decided, so a warning.
    ns.sh("nft flush chain inet udoc input && nft add rule inet udoc input ip saddr 10.0.0.0/8 udp dport 4791 drop");
    let (f, _) = ns.doctor("t0=127.0.0.1");
    assert_eq!(get(&f, "firewall", Some("t0"))["status"], "warn");
}

#[test]
fn ipv6_loopback_device() {
    let (f, _) = doctor("t6=::1", None, &[], |_| {});
    // (udp-4791 is not asserted free: another program may use [::1]:4791 meanwhile.)
    for check in ["device", "mtu", "rp_filter"] {
        let x = get(&f, check, Some("t6"));
        assert_eq!(x["status"], "pass", "{x:#?}");
    }
    // A socket on [::1]:4791 is found in /proc/net/udp6.
    let taken = std::net::UdpSocket::bind("[::1]:4791");
    let Ok(_taken) = taken else {
        eprintln!("SKIPPED (taken half): [::1]:4791 busy");
        return;
    };
    let (f, _) = doctor("t6=::1", None, &[], |_| {});
    let p = get(&f, "udp-4791", Some("t6"));
    assert_eq!(p["status"], "fail", "{p:#?}");
}
