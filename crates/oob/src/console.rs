//! perftest 4.5-0.17's console output, byte for byte (docs/perftest.md §6),
//! and the statistics behind its result lines.
//!
//! Functions returning one line return it without the final newline; functions returning
//! a block end every line with `\n`, as perftest prints it.

use crate::cfmt::fixed_left;
use crate::perftest::{BenchConfig, BwReport, Connection, KeyMessage, Mtu, Role, TestKind, Verb};

/// `RESULT_LINE`: 87 dashes and a newline.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------\n";

/// What the server prints before accepting (stdout).
pub const WAITING_BANNER: &str = "\n************************************\n* Waiting for client to connect... *\n************************************\n";

/// Printed (stdout RESULT_LINE, then the stderr line) by read and atomic tests on devices
/// without inline support, such as rxe, before the header.
pub const INLINE_DISABLED_STDOUT: &str = RESULT_LINE;
/// The stderr half of the inline notice.
pub const INLINE_DISABLED_STDERR: &str =
    "Device not recognized to implement inline feature. Disabling it\n";
/// Printed (stdout) with `-l` > 1 before the header.
pub const POST_LIST_NOTICE: &str = concat!(
    "---------------------------------------------------------------------------------------\n",
    "Post List requested - CQ moderation will be the size of the post list\n"
);

/// `-A`: the atomic operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum AtomicType {
    /// `CMP_AND_SWAP`.
    CmpAndSwap,
    /// `FETCH_AND_ADD` (default).
    #[default]
    FetchAndAdd,
}

impl AtomicType {
    /// perftest's name.
    pub fn perftest_name(self) -> &'static str {
        match self {
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// The `PCIe relax order` line.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PcieRelaxed {
    /// `ON` (perftest's default when built with RO support).
    On,
    /// `OFF` (`--disable_pcie_relaxed`; also the lab's `ib_write_lat` runs).
    Off,
    /// Built without RO support.
    Unsupported,
}

/// Everything the header block (`ctx_print_test_info`) shows. The derived values (TX
/// depth, CQ moderation, RX depth …) are the caller's; docs/perftest.md §6.1 lists perftest's
/// rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderInfo {
    /// The verb.
    pub verb: Verb,
    /// The atomic operation (atomic tests only).
    pub atomic_type: AtomicType,
    /// Bandwidth or latency.
    pub kind: TestKind,
    /// This side's role.
    pub role: Role,
    /// `-b` (bandwidth tests).
    pub bidirectional: bool,
    /// `-l`.
    pub post_list: u32,
    /// `--recv_post_list`.
    pub recv_post_list: u32,
    /// `-e`: the completion-vector line names `<device>_comp<eq_num>`.
    pub use_event: bool,
    /// The EQ number of that line (0 by default).
    pub eq_num: u32,
    /// `-d` device name.
    pub device: String,
    /// `-O`.
    pub dual_port: bool,
    /// `-q`.
    pub num_qps: usize,
    /// Transport type (`IB` for RoCE devices too).
    pub transport: String,
    /// `-c`.
    pub connection: Connection,
    /// `-z`/`--use_srq`.
    pub use_srq: bool,
    /// PCIe relaxed ordering.
    pub pcie_relaxed: PcieRelaxed,
    /// `ibv_wr*` API in use (OFF on rxe).
    pub wr_api: bool,
    /// TX depth (printed by the client, or with `-b`).
    pub tx_depth: u32,
    /// RX depth (printed by send tests on the server, or with `-b`).
    pub rx_depth: u32,
    /// CQ moderation (bandwidth tests).
    pub cq_mod: u32,
    /// The negotiated MTU.
    pub mtu: Mtu,
    /// Link type (`Ethernet` on RoCE).
    pub link_type: String,
    /// GID index, when a GID is used.
    pub gid_index: Option<i32>,
    /// Max inline data (write and send tests).
    pub inline_size: u32,
    /// Outstanding reads (read and atomic tests).
    pub out_reads: u32,
    /// `-R`: `rdma_cm QPs : ON`, `Data ex. method : rdma_cm`, and the server's note that
    /// it waits for the client's rdma_cm QPs.
    pub rdma_cm: bool,
}

impl HeaderInfo {
    /// A header for `cfg` on `device` with the negotiated `mtu`; the depths, CQ moderation,
    /// inline size and outstanding reads are perftest's defaults for a 5-iteration run and
    /// are normally overwritten by the caller.
    pub fn for_test(cfg: &BenchConfig, role: Role, device: &str, mtu: Mtu) -> HeaderInfo {
        HeaderInfo {
            bidirectional: cfg.duplex(),
            num_qps: cfg.qps(),
            connection: cfg.connection,
            device: device.to_string(),
            mtu,
            rdma_cm: cfg.rdma_cm,
            ..HeaderInfo::lab_defaults(cfg.verb, cfg.kind, role)
        }
    }

    /// A header with the values of the rxe lab runs (device `rxe0`, RC, one QP, MTU 1024,
    /// GID index 1, inline 0, 128 outstanding reads, depth 5) for `verb`/`kind`/`role`.
    pub fn lab_defaults(verb: Verb, kind: TestKind, role: Role) -> HeaderInfo {
        HeaderInfo {
            verb,
            atomic_type: AtomicType::FetchAndAdd,
            kind,
            role,
            bidirectional: false,
            post_list: 1,
            recv_post_list: 1,
            use_event: false,
            eq_num: 0,
            device: "rxe0".to_string(),
            dual_port: false,
            num_qps: 1,
            transport: "IB".to_string(),
            connection: Connection::Rc,
            use_srq: false,
            pcie_relaxed: PcieRelaxed::On,
            wr_api: false,
            tx_depth: if kind == TestKind::Bw { 5 } else { 1 },
            rx_depth: 6,
            cq_mod: 1,
            mtu: Mtu::Mtu1024,
            link_type: "Ethernet".to_string(),
            gid_index: Some(1),
            inline_size: 0,
            out_reads: 128,
            rdma_cm: false,
        }
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "ON"
    } else {
        "OFF"
    }
}

/// The header block, from the first RESULT_LINE to the last.
pub fn header_block(h: &HeaderInfo) -> String {
    let duplex = h.bidirectional && h.kind == TestKind::Bw;
    let mut out = String::from(RESULT_LINE);
    out.push_str("                    ");
    out.push_str(h.verb.perftest_name());
    out.push(' ');
    if h.verb == Verb::Atomic {
        out.push_str(h.atomic_type.perftest_name());
        out.push(' ');
    }
    match h.kind {
        TestKind::Bw => {
            if duplex {
                out.push_str("Bidirectional ");
            }
            if h.post_list > 1 {
                out.push_str("Post List ");
            }
            out.push_str("BW ");
        }
        TestKind::Lat => out.push_str("Latency "),
    }
    out.push_str("Test\n");
    if h.use_event {
        out.push_str(&format!(
            " Test with events. Using {}_comp{}\n",
            h.device, h.eq_num
        ));
    }
    out.push_str(&format!(
        " Dual-port       : {}\t\tDevice         : {}\n",
        on_off(h.dual_port),
        h.device
    ));
    out.push_str(&format!(
        " Number of qps   : {}\t\tTransport type : {}\n",
        h.num_qps, h.transport
    ));
    out.push_str(&format!(
        " Connection type : {}\t\tUsing SRQ      : {}\n",
        h.connection.perftest_name(),
        on_off(h.use_srq)
    ));
    out.push_str(&format!(
        " PCIe relax order: {}\n",
        match h.pcie_relaxed {
            PcieRelaxed::On => "ON",
            PcieRelaxed::Off => "OFF",
            PcieRelaxed::Unsupported => "Unsupported",
        }
    ));
    out.push_str(&format!(" ibv_wr* API     : {}\n", on_off(h.wr_api)));
    if h.role == Role::Client || duplex {
        out.push_str(&format!(" TX depth        : {}\n", h.tx_depth));
    }
    if h.post_list > 1 {
        out.push_str(&format!(" Post List       : {}\n", h.post_list));
    }
    if h.recv_post_list > 1 {
        out.push_str(&format!(" Recv Post List  : {}\n", h.recv_post_list));
    }
    if h.verb == Verb::Send && (h.role == Role::Server || duplex) {
        out.push_str(&format!(" RX depth        : {}\n", h.rx_depth));
    }
    if h.kind == TestKind::Bw {
        out.push_str(&format!(" CQ Moderation   : {}\n", h.cq_mod));
    }
    out.push_str(&format!(" Mtu             : {}[B]\n", h.mtu.bytes()));
    out.push_str(&format!(" Link type       : {}\n", h.link_type));
    if let Some(idx) = h.gid_index {
        out.push_str(&format!(" GID index       : {idx}\n"));
    }
    if h.verb != Verb::Read && h.verb != Verb::Atomic {
        out.push_str(&format!(" Max inline data : {}[B]\n", h.inline_size));
    } else {
        out.push_str(&format!(" Outstand reads  : {}\n", h.out_reads));
    }
    if h.rdma_cm {
        out.push_str(" rdma_cm QPs\t : ON\n");
        out.push_str(" Data ex. method : rdma_cm");
        if h.role == Role::Server {
            out.push('\n');
            out.push_str(RESULT_LINE);
            out.push_str(" Waiting for client rdma_cm QP to connect\n");
            out.push_str(" Please run the same command with the IB/RoCE interface IP");
        }
        out.push('\n');
    } else {
        out.push_str(" rdma_cm QPs\t : OFF\n");
        out.push_str(" Data ex. method : Ethernet\n");
    }
    out.push_str(RESULT_LINE);
    out
}

/// C's `%#0{width}x`: `0x` prefix for non-zero values, counted in the width; zero prints
/// as zeros only.
pub fn c_alt_hex(value: u64, width: usize) -> String {
    if value == 0 {
        return "0".repeat(width.max(1));
    }
    let digits = format!("{value:x}");
    let pad = width.saturating_sub(2 + digits.len());
    format!("0x{}{digits}", "0".repeat(pad))
}

/// Which address block line.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Side {
    /// `local address:`.
    Local,
    /// `remote address:`.
    Remote,
}

/// perftest's two address lines for one QP (`ctx_print_pingpong_data`):
/// ` %s address: LID %#04x QPN %#06x PSN %#06x[ OUT %#04x][ RKey %#08x VAddr %#016llx]`
/// (OUT for read tests, RKey/VAddr for read and write tests), then, when a GID is used,
/// ` GID: ` and its 16 bytes in decimal (`%02d`) separated by `:`.
pub fn address_lines(side: Side, verb: Verb, key: &KeyMessage, show_gid: bool) -> String {
    let mut out = format!(
        " {} address: LID {} QPN {} PSN {}",
        match side {
            Side::Local => "local",
            Side::Remote => "remote",
        },
        c_alt_hex(u64::from(key.lid), 4),
        c_alt_hex(u64::from(key.qpn), 6),
        c_alt_hex(u64::from(key.psn), 6)
    );
    if verb == Verb::Read {
        out.push_str(&format!(" OUT {}", c_alt_hex(u64::from(key.out_reads), 4)));
    }
    if verb == Verb::Read || verb == Verb::Write {
        out.push_str(&format!(
            " RKey {} VAddr {}",
            c_alt_hex(u64::from(key.rkey), 8),
            c_alt_hex(key.vaddr, 16)
        ));
    }
    out.push('\n');
    if show_gid {
        let bytes: Vec<String> = key.gid.iter().map(|b| format!("{b:02}")).collect();
        out.push_str(&format!(" GID: {}\n", bytes.join(":")));
    }
    out
}

/// The whole address block: every local QP's lines, then every remote QP's, as perftest
/// prints them around the second KEY round (the RESULT_LINE that follows belongs to the
/// result table, see [`bw_table_header`] and [`lat_table_header`]).
pub fn address_block(
    verb: Verb,
    local: &[KeyMessage],
    remote: &[KeyMessage],
    show_gid: bool,
) -> String {
    let mut out = String::new();
    for k in local {
        out.push_str(&address_lines(Side::Local, verb, k, show_gid));
    }
    for k in remote {
        out.push_str(&address_lines(Side::Remote, verb, k, show_gid));
    }
    out
}

/// The bandwidth unit (`--report_gbits`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum BwUnits {
    /// MiB/s (2^20 B/s), printed `MB/sec` (default).
    #[default]
    MiBps,
    /// Gb/s (10^9 bit/s), printed `Gb/sec`.
    Gbps,
}

impl BwUnits {
    /// Bytes per second in one unit (perftest's `format_factor`).
    pub fn bytes_per_unit(self) -> f64 {
        match self {
            BwUnits::MiBps => 1_048_576.0,
            BwUnits::Gbps => 125_000_000.0,
        }
    }

    /// The label in the column header.
    pub fn label(self) -> &'static str {
        match self {
            BwUnits::MiBps => "MB/sec",
            BwUnits::Gbps => "Gb/sec",
        }
    }
}

/// The bandwidth column header line (`RESULT_FMT[_G][_PER_PORT]`).
pub fn bw_columns(units: BwUnits, per_port: bool) -> String {
    let u = units.label();
    let mut s =
        format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]");
    if per_port {
        s.push_str(&format!(
            "   BW Port1[{u}]   MsgRate Port1[Mpps]   BW Port2[{u}]   MsgRate Port2[Mpps]"
        ));
    }
    s
}

/// What perftest prints before the bandwidth results: RESULT_LINE (the long per-port one
/// with `per_port`), the column header, newline.
pub fn bw_table_header(units: BwUnits, per_port: bool) -> String {
    let line = if per_port {
        format!("{}\n", "-".repeat(163))
    } else {
        RESULT_LINE.to_string()
    };
    format!("{line}{}\n", bw_columns(units, per_port))
}

/// One bandwidth result line (`print_full_bw_report`), without the newline.
///
/// `peer` is given with `-b`: the rates printed are the sums of both sides', while size
/// and iterations are this side's. With Gb/s and this side's own average below 0.1, the
/// six-decimal format is used. The unidirectional server passes the client's report as
/// `mine` (perftest prints it verbatim, labelled in the server's own unit).
pub fn bw_line(mine: &BwReport, peer: Option<&BwReport>, units: BwUnits) -> String {
    let inc_accuracy = mine.bw_avg < 0.1 && units == BwUnits::Gbps;
    let (mut peak, mut avg, mut rate) = (mine.bw_peak, mine.bw_avg, mine.msg_rate);
    if let Some(p) = peer {
        peak += p.bw_peak;
        avg += p.bw_avg;
        rate += p.msg_rate;
    }
    if inc_accuracy {
        format!(
            " {:<7}    {}           {}            {}            {}",
            mine.size,
            mine.iters,
            fixed_left(peak, 7, 6),
            fixed_left(avg, 7, 6),
            fixed_left(rate, 7, 6)
        )
    } else {
        format!(
            " {:<7}    {:<10}       {}            {}\t\t   {}",
            mine.size,
            mine.iters,
            fixed_left(peak, 7, 2),
            fixed_left(avg, 7, 2),
            fixed_left(rate, 7, 6)
        )
    }
}

/// The `--report-per-port` result line (`REPORT_FMT_PER_PORT`), without the newline.
pub fn bw_line_per_port(mine: &BwReport, peer: Option<&BwReport>) -> String {
    let mut r = *mine;
    if let Some(p) = peer {
        r.bw_peak += p.bw_peak;
        r.bw_avg += p.bw_avg;
        r.msg_rate += p.msg_rate;
        r.bw_avg_p1 += p.bw_avg_p1;
        r.msg_rate_p1 += p.msg_rate_p1;
        r.bw_avg_p2 += p.bw_avg_p2;
        r.msg_rate_p2 += p.msg_rate_p2;
    }
    format!(
        " {:<7}    {:<10}     {}            {}\t\t   {}        {}            {}              {}            {}",
        r.size,
        r.iters,
        fixed_left(r.bw_peak, 7, 2),
        fixed_left(r.bw_avg, 7, 2),
        fixed_left(r.msg_rate, 7, 6),
        fixed_left(r.bw_avg_p1, 7, 2),
        fixed_left(r.msg_rate_p1, 7, 6),
        fixed_left(r.bw_avg_p2, 7, 2),
        fixed_left(r.msg_rate_p2, 7, 6)
    )
}

/// The latency column header line (`RESULT_FMT_LAT`, with its trailing space).
pub const LAT_COLUMNS: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// The `-D` latency column header line (`RESULT_FMT_LAT_DUR`).
pub const LAT_DURATION_COLUMNS: &str =
    " #bytes        #iterations       t_avg[usec]    tps average";

/// RESULT_LINE, the latency column header, newline.
pub fn lat_table_header() -> String {
    format!("{RESULT_LINE}{LAT_COLUMNS}\n")
}

/// One latency test's statistics, as perftest prints them (microseconds).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LatReport {
    /// Message size.
    pub size: u64,
    /// `-n`.
    pub iters: u64,
    /// Smallest sample.
    pub t_min: f64,
    /// The smaller of the two largest samples (perftest drops the two largest and shows
    /// the first dropped one).
    pub t_max: f64,
    /// Median of the kept samples.
    pub t_typical: f64,
    /// Mean of the kept samples.
    pub t_avg: f64,
    /// Standard deviation, accumulated from integer-truncated deviations (so it prints
    /// as `xxx.00`).
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// How many of the largest samples perftest drops (`LAT_MEASURE_TAIL`).
pub const LAT_MEASURE_TAIL: usize = 2;

impl LatReport {
    /// perftest's `print_report_lat` statistics over the time between consecutive posts.
    ///
    /// `deltas`: `iters − 1` samples in clock ticks; `ticks_per_usec`: the clock rate
    /// (1000 for nanoseconds); `rtt_factor`: 2 for write and send (half round trip), 1 for
    /// read and atomic. Returns `None` with fewer than `LAT_MEASURE_TAIL + 1` samples, or a
    /// clock rate that is not positive (perftest would divide by zero).
    pub fn from_deltas(
        size: u64,
        iters: u64,
        deltas: &[u64],
        ticks_per_usec: f64,
        rtt_factor: u32,
    ) -> Option<LatReport> {
        let q = ticks_per_usec * f64::from(rtt_factor);
        if deltas.len() <= LAT_MEASURE_TAIL
            || q.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            return None;
        }
        let mut d = deltas.to_vec();
        d.sort_unstable();
        let n = d.len() - LAT_MEASURE_TAIL;
        let at = |i: usize| d.get(i).copied().unwrap_or(0) as f64 / q;
        // get_median(): integer average of the two middle samples for an even count.
        let median_ticks = if (n - 1) % 2 == 1 {
            let a = u128::from(d.get(n / 2).copied().unwrap_or(0));
            let b = u128::from(d.get(n / 2 - 1).copied().unwrap_or(0));
            u64::try_from((a + b) / 2).unwrap_or(u64::MAX)
        } else {
            d.get(n / 2).copied().unwrap_or(0)
        };
        let sum: f64 = (0..n).map(at).sum();
        let average = sum / n as f64;
        let mut stdev_sum = 0.0f64;
        for i in 0..n {
            // `int temp_var = average - x; int pow_var = pow(temp_var, 2);`
            let temp = (average - at(i)) as i32;
            let pow = (f64::from(temp) * f64::from(temp)) as i32;
            stdev_sum += f64::from(pow);
        }
        let i99 = (n as f64 * 0.99).ceil() as usize;
        let i999 = (n as f64 * 0.999).ceil() as usize;
        Some(LatReport {
            size,
            iters,
            t_min: at(0),
            t_max: at(n),
            t_typical: median_ticks as f64 / q,
            t_avg: average,
            t_stdev: (stdev_sum / n as f64).sqrt(),
            p99: at(i99),
            p999: at(i999),
        })
    }

    /// The same from the `iters` post timestamps (perftest's `tposted`).
    pub fn from_post_times(
        size: u64,
        tposted: &[u64],
        ticks_per_usec: f64,
        rtt_factor: u32,
    ) -> Option<LatReport> {
        let deltas: Vec<u64> = tposted
            .windows(2)
            .map(|w| match w {
                [a, b] => b.wrapping_sub(*a),
                _ => 0,
            })
            .collect();
        LatReport::from_deltas(
            size,
            tposted.len() as u64,
            &deltas,
            ticks_per_usec,
            rtt_factor,
        )
    }
}

/// One latency result line (`REPORT_FMT_LAT`), without the newline.
pub fn lat_line(r: &LatReport) -> String {
    format!(
        " {:<7} {}          {}        {}      {}  \t       {}     \t{}\t\t{} \t\t{}",
        r.size,
        r.iters,
        fixed_left(r.t_min, 7, 2),
        fixed_left(r.t_max, 7, 2),
        fixed_left(r.t_typical, 7, 2),
        fixed_left(r.t_avg, 7, 2),
        fixed_left(r.t_stdev, 7, 2),
        fixed_left(r.p99, 7, 2),
        fixed_left(r.p999, 7, 2)
    )
}

/// The `-D` latency result line (`REPORT_FMT_LAT_DUR`): size, iterations, average
/// latency and transactions per second.
pub fn lat_duration_line(size: u64, iters: u64, t_avg: f64, tps: f64) -> String {
    format!(
        " {:<7}       {}            {}        {}",
        size,
        iters,
        fixed_left(t_avg, 7, 2),
        fixed_left(tps, 7, 2)
    )
}

/// Inputs of perftest's bandwidth computation (`print_report_bw`), for a run of
/// `iters × num_qps` operations.
#[derive(Copy, Clone, Debug)]
pub struct BwSamples<'a> {
    /// Message size.
    pub size: u64,
    /// `-n`.
    pub iters: u64,
    /// `-q`.
    pub num_qps: u64,
    /// Post time of each operation (clock ticks); `[0]` is the first post.
    pub tposted: &'a [u64],
    /// Completion time of each operation; with `no_peak` only `[0]` (the end) is used.
    pub tcompleted: &'a [u64],
    /// Clock ticks per second (perftest's `cycles_to_units`).
    pub ticks_per_sec: f64,
    /// CQ moderation.
    pub cq_mod: u64,
    /// `-l`.
    pub post_list: u64,
    /// Peak disabled (`-D`, send server, iters > 20000).
    pub no_peak: bool,
    /// The unit.
    pub units: BwUnits,
}

/// perftest's bandwidth report from the post/completion times (unidirectional,
/// iteration mode): average over first post → last completion, peak over the fastest
/// span of completions, message rate in Mpps. `None` if the arrays are too short or the
/// run took no time.
pub fn bw_report(s: &BwSamples<'_>) -> Option<BwReport> {
    let n = usize::try_from(s.iters.checked_mul(s.num_qps)?).ok()?;
    if n == 0 || s.cq_mod == 0 || s.post_list == 0 {
        return None;
    }
    let posted = |i: usize| s.tposted.get(i).copied();
    let completed = |i: usize| s.tcompleted.get(i).copied();
    let cq_mod = usize::try_from(s.cq_mod).ok()?;
    let post_list = usize::try_from(s.post_list).ok()?;
    let mut opt_delta = completed(0)?.wrapping_sub(posted(0)?);
    if !s.no_peak {
        let mut i = 0;
        while i < n {
            let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
            while j < n {
                let t = completed(j)?.wrapping_sub(posted(i)?) / (j - i + 1) as u64;
                opt_delta = opt_delta.min(t);
                j += cq_mod;
            }
            if n % cq_mod != 0 {
                let j = n - 1;
                let t = completed(j)?.wrapping_sub(posted(i)?) / (j - i + 1) as u64;
                opt_delta = opt_delta.min(t);
            }
            i += post_list;
        }
    }
    let last = if s.no_peak { 0 } else { n - 1 };
    let test_ticks = completed(last)?.wrapping_sub(posted(0)?) as f64;
    if test_ticks <= 0.0 {
        return None;
    }
    let factor = s.units.bytes_per_unit();
    let bw_avg = (s.size as f64 * n as f64 * s.ticks_per_sec) / (test_ticks * factor);
    let msg_rate = (n as f64 * s.ticks_per_sec) / (test_ticks * 1_000_000.0);
    // peak_up and peak_down are integers (cycles_t) in perftest.
    let peak_up = if s.no_peak {
        0u128
    } else {
        u128::from(s.size) * (s.ticks_per_sec as u128)
    };
    let peak_down = u128::from(opt_delta) * (factor as u128);
    let bw_peak = peak_up as f64 / peak_down as f64;
    Some(BwReport {
        size: s.size,
        iters: n as u64,
        bw_peak,
        bw_avg,
        msg_rate,
        ..BwReport::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cfmt::fixed;

    #[test]
    fn alt_hex() {
        assert_eq!(c_alt_hex(0, 4), "0000");
        assert_eq!(c_alt_hex(0x11, 6), "0x0011");
        assert_eq!(c_alt_hex(0xae936, 6), "0xae936");
        assert_eq!(c_alt_hex(0x80, 4), "0x80");
        assert_eq!(c_alt_hex(0x27a, 8), "0x00027a");
        assert_eq!(c_alt_hex(0x7f23_fc61_f000, 16), "0x007f23fc61f000");
    }

    #[test]
    fn latency_statistics_reproduce_write_lat() {
        // pt_write_lat client: 2164.87 4515.27 2475.74 2475.74 310.00 4515.27 4515.27,
        // from nanosecond ticks and a half round trip.
        let deltas = [5_573_220, 9_999_999, 4_329_740, 9_030_540];
        let r = LatReport::from_deltas(2, 5, &deltas, 1000.0, 2).expect("enough samples");
        assert_eq!(
            lat_line(&r),
            " 2       5          2164.87        4515.27      2475.74  \t       2475.74     \t310.00 \t\t4515.27 \t\t4515.27"
        );
        assert!(LatReport::from_deltas(2, 3, &[1, 2], 1000.0, 2).is_none());
        assert!(LatReport::from_deltas(2, 5, &deltas, 0.0, 2).is_none());
        let times = [0, 4_329_740, 4_329_740 + 5_573_220, 20_000_000, 29_030_540];
        let r2 = LatReport::from_post_times(2, &times, 1000.0, 2).expect("5 posts");
        assert_eq!(r2.iters, 5);
        assert_eq!(fixed(r2.t_min, 2), "2164.87");
    }

    #[test]
    fn odd_sample_count_median_and_percentiles() {
        // 103 samples: 101 kept (odd) → median is the middle one; 99% index ceil(99.99)=100.
        let deltas: Vec<u64> = (1..=103).map(|v| v * 1000).collect();
        let r = LatReport::from_deltas(8, 104, &deltas, 1000.0, 1).expect("enough");
        assert_eq!(r.t_typical, 51.0);
        assert_eq!(r.t_min, 1.0);
        assert_eq!(r.t_max, 102.0);
        assert_eq!(r.p99, 101.0);
        assert_eq!(r.p999, 102.0);
        assert_eq!(r.t_avg, 51.0);
    }

    #[test]
    fn bandwidth_from_times() {
        // 4 ops of 1 MiB, one per second, 1-tick-per-second clock: avg 4 MiB / 4 s.
        let posted = [0, 1, 2, 3];
        let completed = [1, 2, 3, 4];
        let s = BwSamples {
            size: 1 << 20,
            iters: 4,
            num_qps: 1,
            tposted: &posted,
            tcompleted: &completed,
            ticks_per_sec: 1.0,
            cq_mod: 1,
            post_list: 1,
            no_peak: false,
            units: BwUnits::MiBps,
        };
        let r = bw_report(&s).expect("computes");
        assert_eq!((r.size, r.iters), (1 << 20, 4));
        assert_eq!(r.bw_avg, 1.0);
        assert_eq!(r.msg_rate, 1e-6);
        assert_eq!(r.bw_peak, 1.0);
        let short = BwSamples {
            tcompleted: &completed[..2],
            ..s
        };
        assert!(bw_report(&short).is_none());
        let none = BwSamples { iters: 0, ..s };
        assert!(bw_report(&none).is_none());
    }
}
