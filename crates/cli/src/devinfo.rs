//! `uroce devinfo`: the device's attributes in the layout of rdma-core 44's `ibv_devinfo`
//! (`libibverbs/examples/devinfo.c`): `hca_id`, transport, firmware, GUIDs, vendor ids,
//! ports with state, MTUs, LIDs and link layer; with `-v` the device limits, the port's
//! extended attributes and the GID table with each entry's type (`RoCE v2`).
//!
//! Field names, tabs and value formats follow `print_hca_cap()` so that scripts written
//! against `ibv_devinfo` read this output unchanged. The values come from the device's
//! QUERY_DEVICE, QUERY_PORT and QUERY_GID commands (verbs [`uroce::Context`]); nothing is
//! invented here. The firmware version is formatted as the rxe provider does
//! (`major.minor.sub` from bits 63..32, 31..16 and 15..0 of the raw value).

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use uroce::{AtomicCap, Context, DeviceAttr, GidType, LinkLayer, Mtu, PortAttr, PortState};

/// `uroce devinfo` options (those of `ibv_devinfo`).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Use device NAME (default: every configured device; see UROCE_DEVICES).
    #[arg(short = 'd', long = "ib-dev", value_name = "NAME")]
    device: Option<String>,
    /// Show only this port (default: all ports).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT")]
    port: Option<u8>,
    /// Print only the device names.
    #[arg(short = 'l', long = "list")]
    list: bool,
    /// Print all the attributes of the device(s).
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
}

/// Runs `uroce devinfo`. Exit status as `ibv_devinfo`: 0, or non-zero when a device is
/// missing or a query fails.
pub fn run(args: Args) -> Result<ExitCode> {
    let devices = uroce::devices().context("reading the device list")?;
    if args.list {
        let mut out = format!(
            "{} HCA{} found:\n",
            devices.len(),
            if devices.len() == 1 { "" } else { "s" }
        );
        for d in &devices {
            let _ = writeln!(out, "\t{}", d.name());
        }
        out.push('\n');
        print!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    if args.port == Some(0) {
        anyhow::bail!("port numbers start at 1");
    }
    let chosen: Vec<_> = match &args.device {
        Some(name) => {
            let d = devices
                .into_iter()
                .find(|d| d.name() == name)
                .ok_or_else(|| anyhow::anyhow!("IB device '{name}' wasn't found"))?;
            vec![d]
        }
        None => devices,
    };
    if chosen.is_empty() {
        anyhow::bail!("No IB devices found");
    }
    for dev in chosen {
        let ctx = dev
            .open()
            .with_context(|| format!("Failed to open device {}", dev.name()))?;
        let text = describe(&ctx, dev.name(), args.port, args.verbose)?;
        print!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The whole `print_hca_cap()` block for one device.
fn describe(ctx: &Context, name: &str, only_port: Option<u8>, verbose: bool) -> Result<String> {
    let a = ctx.query_device().context("Failed to query device props")?;
    if let Some(p) = only_port {
        if p > a.phys_port_cnt {
            anyhow::bail!("Invalid port requested for device");
        }
    }
    let mut out = String::new();
    device_lines(&mut out, name, &a);
    if verbose {
        verbose_device_lines(&mut out, &a, ctx.num_comp_vectors());
    }
    for port in 1..=a.phys_port_cnt {
        if only_port.is_some_and(|p| p != port) {
            continue;
        }
        let pa = ctx
            .query_port(port)
            .with_context(|| format!("Failed to query port {port} props"))?;
        port_lines(&mut out, port, &pa);
        if verbose {
            verbose_port_lines(&mut out, &pa);
            gid_lines(&mut out, ctx, port, &pa)?;
        }
        out.push('\n');
    }
    Ok(out)
}

/// `%04x:%04x:%04x:%04x` of a host-order GUID (devinfo's `guid_str`).
fn guid_str(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

/// The provider's firmware string (rxe: `"%d.%d.%d"`).
fn fw_ver_str(raw: u64) -> String {
    format!(
        "{}.{}.{}",
        (raw >> 32) & 0xffff,
        (raw >> 16) & 0xffff,
        raw & 0xffff
    )
}

fn device_lines(out: &mut String, name: &str, a: &DeviceAttr) {
    let _ = writeln!(out, "hca_id:\t{name}");
    // uroce devices are RoCE devices: transport IB (IBV_TRANSPORT_IB = 0), as rxe.
    let _ = writeln!(out, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(out, "\tfw_ver:\t\t\t\t{}", fw_ver_str(a.fw_ver));
    let _ = writeln!(out, "\tnode_guid:\t\t\t{}", guid_str(a.node_guid));
    let _ = writeln!(out, "\tsys_image_guid:\t\t\t{}", guid_str(a.sys_image_guid));
    let _ = writeln!(out, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id);
    let _ = writeln!(out, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
    let _ = writeln!(out, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver);
    let _ = writeln!(out, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
}

/// devinfo's `print_device_cap_flags`: one line per known flag, then the unknown rest.
fn cap_flag_lines(out: &mut String, flags: u32) {
    const NAMES: [(u32, &str); 24] = [
        (1 << 0, "RESIZE_MAX_WR"),
        (1 << 1, "BAD_PKEY_CNTR"),
        (1 << 2, "BAD_QKEY_CNTR"),
        (1 << 3, "RAW_MULTI"),
        (1 << 4, "AUTO_PATH_MIG"),
        (1 << 5, "CHANGE_PHY_PORT"),
        (1 << 6, "UD_AV_PORT_ENFORCE"),
        (1 << 7, "CURR_QP_STATE_MOD"),
        (1 << 8, "SHUTDOWN_PORT"),
        (1 << 9, "INIT_TYPE"),
        (1 << 10, "PORT_ACTIVE_EVENT"),
        (1 << 11, "SYS_IMAGE_GUID"),
        (1 << 12, "RC_RNR_NAK_GEN"),
        (1 << 13, "SRQ_RESIZE"),
        (1 << 14, "N_NOTIFY_CQ"),
        (1 << 17, "MEM_WINDOW"),
        (1 << 18, "UD_IP_CSUM"),
        (1 << 20, "XRC"),
        (1 << 21, "MEM_MGT_EXTENSIONS"),
        (1 << 23, "MEM_WINDOW_TYPE_2A"),
        (1 << 24, "MEM_WINDOW_TYPE_2B"),
        (1 << 25, "RC_IP_CSUM"),
        (1 << 26, "RAW_IP_CSUM"),
        (1 << 29, "MANAGED_FLOW_STEERING"),
    ];
    let mut known = 0u32;
    for (bit, name) in NAMES {
        known |= bit;
        if flags & bit != 0 {
            let _ = writeln!(out, "\t\t\t\t\t{name}");
        }
    }
    if flags & !known != 0 {
        let _ = writeln!(out, "\t\t\t\t\tUnknown flags: 0x{:X}", flags & !known);
    }
}

fn atomic_cap_str(c: AtomicCap) -> &'static str {
    match c {
        AtomicCap::NONE => "ATOMIC_NONE",
        AtomicCap::HCA => "ATOMIC_HCA",
        AtomicCap::GLOB => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    }
}

fn verbose_device_lines(out: &mut String, a: &DeviceAttr, comp_vectors: u32) {
    let _ = writeln!(out, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size);
    let _ = writeln!(out, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap);
    let _ = writeln!(out, "\tmax_qp:\t\t\t\t{}", a.max_qp);
    let _ = writeln!(out, "\tmax_qp_wr:\t\t\t{}", a.max_qp_wr);
    let _ = writeln!(out, "\tdevice_cap_flags:\t\t0x{:08x}", a.device_cap_flags);
    cap_flag_lines(out, a.device_cap_flags);
    let _ = writeln!(out, "\tmax_sge:\t\t\t{}", a.max_sge);
    let _ = writeln!(out, "\tmax_sge_rd:\t\t\t{}", a.max_sge_rd);
    let _ = writeln!(out, "\tmax_cq:\t\t\t\t{}", a.max_cq);
    let _ = writeln!(out, "\tmax_cqe:\t\t\t{}", a.max_cqe);
    let _ = writeln!(out, "\tmax_mr:\t\t\t\t{}", a.max_mr);
    let _ = writeln!(out, "\tmax_pd:\t\t\t\t{}", a.max_pd);
    let _ = writeln!(out, "\tmax_qp_rd_atom:\t\t\t{}", a.max_qp_rd_atom);
    let _ = writeln!(out, "\tmax_ee_rd_atom:\t\t\t{}", a.max_ee_rd_atom);
    let _ = writeln!(out, "\tmax_res_rd_atom:\t\t{}", a.max_res_rd_atom);
    let _ = writeln!(out, "\tmax_qp_init_rd_atom:\t\t{}", a.max_qp_init_rd_atom);
    let _ = writeln!(out, "\tmax_ee_init_rd_atom:\t\t{}", a.max_ee_init_rd_atom);
    let _ = writeln!(
        out,
        "\tatomic_cap:\t\t\t{} ({})",
        atomic_cap_str(a.atomic_cap),
        a.atomic_cap.0
    );
    let _ = writeln!(out, "\tmax_ee:\t\t\t\t{}", a.max_ee);
    let _ = writeln!(out, "\tmax_rdd:\t\t\t{}", a.max_rdd);
    let _ = writeln!(out, "\tmax_mw:\t\t\t\t{}", a.max_mw);
    let _ = writeln!(out, "\tmax_raw_ipv6_qp:\t\t{}", a.max_raw_ipv6_qp);
    let _ = writeln!(out, "\tmax_raw_ethy_qp:\t\t{}", a.max_raw_ethy_qp);
    let _ = writeln!(out, "\tmax_mcast_grp:\t\t\t{}", a.max_mcast_grp);
    let _ = writeln!(out, "\tmax_mcast_qp_attach:\t\t{}", a.max_mcast_qp_attach);
    let _ = writeln!(
        out,
        "\tmax_total_mcast_qp_attach:\t{}",
        a.max_total_mcast_qp_attach
    );
    let _ = writeln!(out, "\tmax_ah:\t\t\t\t{}", a.max_ah);
    let _ = writeln!(out, "\tmax_fmr:\t\t\t{}", a.max_fmr);
    if a.max_fmr != 0 {
        let _ = writeln!(out, "\tmax_map_per_fmr:\t\t{}", a.max_map_per_fmr);
    }
    let _ = writeln!(out, "\tmax_srq:\t\t\t{}", a.max_srq);
    if a.max_srq != 0 {
        let _ = writeln!(out, "\tmax_srq_wr:\t\t\t{}", a.max_srq_wr);
        let _ = writeln!(out, "\tmax_srq_sge:\t\t\t{}", a.max_srq_sge);
    }
    let _ = writeln!(out, "\tmax_pkeys:\t\t\t{}", a.max_pkeys);
    let _ = writeln!(out, "\tlocal_ca_ack_delay:\t\t{}", a.local_ca_ack_delay);
    // The extended attributes (ibv_query_device_ex) uroce does not implement: it has no
    // ODP, no timestamps, no TSO/RSS, no tag matching. devinfo prints these lines then.
    out.push_str("\tgeneral_odp_caps:\n");
    for t in ["rc", "uc", "ud", "xrc"] {
        let _ = writeln!(out, "\t{t}_odp_caps:\n\t\t\t\t\tNO SUPPORT");
    }
    out.push_str("\tcompletion_timestamp_mask not supported\n");
    out.push_str("\tcore clock not supported\n");
    out.push_str("\tdevice_cap_flags_ex:\t\t0x0\n");
    out.push_str("\ttso_caps:\n\t\tmax_tso:\t\t\t0\n");
    out.push_str("\trss_caps:\n");
    out.push_str("\t\tmax_rwq_indirection_tables:\t\t\t0\n");
    out.push_str("\t\tmax_rwq_indirection_table_size:\t\t\t0\n");
    out.push_str("\t\trx_hash_function:\t\t\t\t0x0\n");
    out.push_str("\t\trx_hash_fields_mask:\t\t\t\t0x0\n");
    out.push_str("\tmax_wq_type_rq:\t\t\t0\n");
    out.push_str("\tpacket_pacing_caps:\n");
    out.push_str("\t\tqp_rate_limit_min:\t0kbps\n");
    out.push_str("\t\tqp_rate_limit_max:\t0kbps\n");
    out.push_str("\ttag matching not supported\n");
    let _ = writeln!(out, "\tnum_comp_vectors:\t\t{comp_vectors}");
}

fn port_state_str(s: PortState) -> &'static str {
    match s {
        PortState::DOWN => "PORT_DOWN",
        PortState::INIT => "PORT_INIT",
        PortState::ARMED => "PORT_ARMED",
        PortState::ACTIVE => "PORT_ACTIVE",
        _ => "invalid state",
    }
}

fn mtu_str(m: Mtu) -> String {
    m.bytes().to_string()
}

fn link_layer_str(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::UNSPECIFIED => "Unspecified",
        LinkLayer::INFINIBAND => "InfiniBand",
        LinkLayer::ETHERNET => "Ethernet",
        _ => "Unknown",
    }
}

fn port_lines(out: &mut String, port: u8, p: &PortAttr) {
    let _ = writeln!(out, "\t\tport:\t{port}");
    let _ = writeln!(
        out,
        "\t\t\tstate:\t\t\t{} ({})",
        port_state_str(p.state),
        p.state.0
    );
    let _ = writeln!(
        out,
        "\t\t\tmax_mtu:\t\t{} ({})",
        mtu_str(p.max_mtu),
        p.max_mtu.raw()
    );
    let _ = writeln!(
        out,
        "\t\t\tactive_mtu:\t\t{} ({})",
        mtu_str(p.active_mtu),
        p.active_mtu.raw()
    );
    let _ = writeln!(out, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
    let _ = writeln!(out, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(out, "\t\t\tport_lmc:\t\t0x{:02x}", p.lmc);
    let _ = writeln!(out, "\t\t\tlink_layer:\t\t{}", link_layer_str(p.link_layer));
}

fn vl_str(v: u8) -> &'static str {
    match v {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

fn width_str(w: u8) -> &'static str {
    match w {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

fn speed_str(s: u8) -> &'static str {
    match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn phys_state_str(s: u8) -> &'static str {
    match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINNING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    }
}

fn verbose_port_lines(out: &mut String, p: &PortAttr) {
    let _ = writeln!(out, "\t\t\tmax_msg_sz:\t\t0x{:x}", p.max_msg_sz);
    let _ = writeln!(out, "\t\t\tport_cap_flags:\t\t0x{:08x}", p.port_cap_flags);
    let _ = writeln!(out, "\t\t\tport_cap_flags2:\t0x0000");
    let _ = writeln!(
        out,
        "\t\t\tmax_vl_num:\t\t{} ({})",
        vl_str(p.max_vl_num),
        p.max_vl_num
    );
    let _ = writeln!(out, "\t\t\tbad_pkey_cntr:\t\t0x{:x}", p.bad_pkey_cntr);
    let _ = writeln!(out, "\t\t\tqkey_viol_cntr:\t\t0x{:x}", p.qkey_viol_cntr);
    let _ = writeln!(out, "\t\t\tsm_sl:\t\t\t{}", p.sm_sl);
    let _ = writeln!(out, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
    let _ = writeln!(out, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
    let _ = writeln!(out, "\t\t\tsubnet_timeout:\t\t{}", p.subnet_timeout);
    let _ = writeln!(out, "\t\t\tinit_type_reply:\t{}", p.init_type_reply);
    let _ = writeln!(
        out,
        "\t\t\tactive_width:\t\t{}X ({})",
        width_str(p.active_width),
        p.active_width
    );
    let _ = writeln!(
        out,
        "\t\t\tactive_speed:\t\t{} ({})",
        speed_str(p.active_speed),
        p.active_speed
    );
    // transport_type is IB, so devinfo shows the physical state.
    let _ = writeln!(
        out,
        "\t\t\tphys_state:\t\t{} ({})",
        phys_state_str(p.phys_state),
        p.phys_state
    );
}

/// devinfo's `print_all_port_gids`: every non-empty slot, RoCE v2 GIDs as `inet_ntop`
/// text, RoCE v1 ones as eight hex groups; `, <type>` on an Ethernet link layer.
fn gid_lines(out: &mut String, ctx: &Context, port: u8, p: &PortAttr) -> Result<()> {
    for index in 0..p.gid_tbl_len {
        let entry = match ctx.query_gid_entry(port, index) {
            Ok(e) => e,
            Err(e) if e.errno() == uroce::Errno::ENODATA => continue,
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("Failed to query gid to port {port}, index {index}")))
            }
        };
        // devinfo skips GIDs whose interface id (lower 8 bytes) is zero.
        if entry
            .gid
            .0
            .get(8..)
            .is_some_and(|b| b.iter().all(|&x| x == 0))
        {
            continue;
        }
        let suffix = if p.link_layer == LinkLayer::ETHERNET {
            match entry.gid_type {
                GidType::ROCE_V2 => ", RoCE v2",
                GidType::ROCE_V1 | GidType::IB => ", RoCE v1",
                _ => ", Invalid gid type",
            }
        } else {
            ""
        };
        let text = if entry.gid_type == GidType::ROCE_V2 {
            oob::gid::inet_ntop6(&entry.gid.0)
        } else {
            entry.gid.to_string()
        };
        let _ = writeln!(out, "\t\t\tGID[{index:>3}]:\t\t{text}{suffix}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_and_firmware_formats() {
        assert_eq!(guid_str(0x0200_aaff_fe00_0001), "0200:aaff:fe00:0001");
        assert_eq!(fw_ver_str(0), "0.0.0");
        assert_eq!(fw_ver_str((1 << 32) | (2 << 16) | 3), "1.2.3");
    }

    #[test]
    fn enum_strings_match_devinfo() {
        assert_eq!(port_state_str(PortState::ACTIVE), "PORT_ACTIVE");
        assert_eq!(port_state_str(PortState(9)), "invalid state");
        assert_eq!(mtu_str(Mtu::Mtu1024), "1024");
        assert_eq!(width_str(2), "4");
        assert_eq!(speed_str(32), "25.0 Gbps");
        assert_eq!(vl_str(3), "4");
        let mut s = String::new();
        cap_flag_lines(&mut s, (1 << 1) | (1 << 31));
        assert_eq!(
            s,
            "\t\t\t\t\tBAD_PKEY_CNTR\n\t\t\t\t\tUnknown flags: 0x80000000\n"
        );
    }
}
