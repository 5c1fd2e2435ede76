//! `uroce devinfo`: ibv_devinfo's field names and layout, the values of the configured
//! devices, `-v` limits and the GID table with its type, `-l`, and a missing device.

use std::process::{Command, Output};

fn devinfo(devices: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uroce"))
        .env("UROCE_DEVICES", devices)
        .arg("devinfo")
        .args(args)
        .output()
        .expect("run uroce")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// The value of the `\tNAME:\t…` line.
fn field<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .find(|l| l.trim_start().starts_with(&format!("{name}:")))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim())
}

// Each test its own addresses: a device address is bound by one process at a time and
// the tests run in parallel.

#[test]
fn default_output_has_ibv_devinfo_fields() {
    let o = devinfo("uroce0=127.77.70.1,uroce1=127.77.70.2", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    // Both devices, in the order configured.
    let ids: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("hca_id:\t"))
        .collect();
    assert_eq!(ids, ["uroce0", "uroce1"], "{out}");
    assert_eq!(field(&out, "transport"), Some("InfiniBand (0)"));
    assert_eq!(field(&out, "fw_ver"), Some("0.0.0"));
    let guid = field(&out, "node_guid").expect("node_guid");
    assert_eq!(guid.len(), 19, "{guid}");
    assert_eq!(guid.matches(':').count(), 3, "{guid}");
    assert!(field(&out, "vendor_id").is_some_and(|v| v.starts_with("0x")));
    assert_eq!(field(&out, "phys_port_cnt"), Some("1"));
    assert!(out.contains("\t\tport:\t1\n"), "{out}");
    assert_eq!(field(&out, "state"), Some("PORT_ACTIVE (4)"));
    assert!(field(&out, "active_mtu").is_some_and(|m| m.ends_with(")")));
    assert_eq!(field(&out, "link_layer"), Some("Ethernet"));
    assert_eq!(field(&out, "port_lid"), Some("0"));
    // Not verbose: no limits, no GIDs.
    assert!(!out.contains("max_qp:") && !out.contains("GID["), "{out}");
    // The exact tab layout of a line.
    assert!(out.contains("\tphys_port_cnt:\t\t\t1\n"), "{out}");
}

#[test]
fn verbose_one_device_shows_limits_and_gid_with_type() {
    let o = devinfo(
        "uroce0=127.77.71.1,uroce1=127.77.71.2",
        &["-v", "-d", "uroce1"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    assert!(out.starts_with("hca_id:\turoce1\n"), "{out}");
    assert!(!out.contains("uroce0"), "{out}");
    for name in [
        "max_qp",
        "max_qp_wr",
        "max_cqe",
        "max_mr",
        "max_pd",
        "max_qp_rd_atom",
        "max_srq",
        "gid_tbl_len",
    ] {
        let v = field(&out, name).unwrap_or_else(|| panic!("{name} missing:\n{out}"));
        assert!(v.parse::<u64>().is_ok_and(|n| n > 0), "{name} = {v}");
    }
    assert_eq!(field(&out, "atomic_cap"), Some("ATOMIC_HCA (1)"));
    assert!(
        out.contains("\t\t\tGID[  0]:\t\t::ffff:127.77.71.2, RoCE v2\n"),
        "{out}"
    );
}

#[test]
fn list_and_missing_device() {
    let devs = "uroce0=127.77.72.1,uroce1=127.77.72.2";
    let o = devinfo(devs, &["-l"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o), "2 HCAs found:\n\turoce0\n\turoce1\n\n");
    let o = devinfo(devs, &["-d", "nope"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("IB device 'nope' wasn't found"));
}
