//! uroce's own JSON form of the results (`uroce bench --json`). This is not a perftest
//! format (perftest's `--out_json` writes a different, non-JSON-conforming file); one
//! object per result, with explicit units.

use serde::Serialize;

use crate::console::{BwUnits, LatReport};
use crate::perftest::{BwReport, Role};

/// One bandwidth result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BwResult {
    /// The tool imitated, e.g. `ib_write_bw`.
    pub test: String,
    /// `client` or `server`.
    pub role: String,
    /// Message size in bytes.
    pub size_bytes: u64,
    /// Iterations × QPs.
    pub iterations: u64,
    /// `MB/sec` (MiB/s) or `Gb/sec`.
    pub units: &'static str,
    /// Peak bandwidth (both sides summed with `-b`).
    pub bw_peak: f64,
    /// Average bandwidth (both sides summed with `-b`).
    pub bw_average: f64,
    /// Message rate, million messages per second.
    pub msg_rate_mpps: f64,
}

impl BwResult {
    /// Builds the result perftest would print with [`crate::console::bw_line`].
    pub fn new(
        test: &str,
        role: Role,
        units: BwUnits,
        mine: &BwReport,
        peer: Option<&BwReport>,
    ) -> BwResult {
        let sum = |a: f64, b: Option<f64>| a + b.unwrap_or(0.0);
        BwResult {
            test: test.to_string(),
            role: role.to_string(),
            size_bytes: mine.size,
            iterations: mine.iters,
            units: units.label(),
            bw_peak: sum(mine.bw_peak, peer.map(|p| p.bw_peak)),
            bw_average: sum(mine.bw_avg, peer.map(|p| p.bw_avg)),
            msg_rate_mpps: sum(mine.msg_rate, peer.map(|p| p.msg_rate)),
        }
    }
}

/// One latency result (microseconds).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatResult {
    /// The tool imitated.
    pub test: String,
    /// `client` or `server`.
    pub role: String,
    /// Message size in bytes.
    pub size_bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Minimum.
    pub t_min_us: f64,
    /// perftest's "max" (the smaller of the two largest samples).
    pub t_max_us: f64,
    /// Median.
    pub t_typical_us: f64,
    /// Mean.
    pub t_avg_us: f64,
    /// Standard deviation (perftest's integer-truncated form).
    pub t_stdev_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p99_9_us: f64,
}

impl LatResult {
    /// From the statistics printed by [`crate::console::lat_line`].
    pub fn new(test: &str, role: Role, r: &LatReport) -> LatResult {
        LatResult {
            test: test.to_string(),
            role: role.to_string(),
            size_bytes: r.size,
            iterations: r.iters,
            t_min_us: r.t_min,
            t_max_us: r.t_max,
            t_typical_us: r.t_typical,
            t_avg_us: r.t_avg,
            t_stdev_us: r.t_stdev,
            p99_us: r.p99,
            p99_9_us: r.p999,
        }
    }
}

/// One JSON object per line. Non-finite numbers (which JSON cannot carry) become `null`.
pub fn to_line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_json_sums_with_peer() {
        let mine = BwReport {
            size: 65536,
            iters: 5,
            bw_peak: 1.5,
            bw_avg: 1.25,
            msg_rate: 0.002,
            ..BwReport::default()
        };
        let r = BwResult::new(
            "ib_write_bw",
            Role::Server,
            BwUnits::MiBps,
            &mine,
            Some(&mine),
        );
        let v: serde_json::Value = serde_json::from_str(&to_line(&r)).expect("valid JSON");
        assert_eq!(v["test"], "ib_write_bw");
        assert_eq!(v["role"], "server");
        assert_eq!(v["units"], "MB/sec");
        assert_eq!(v["bw_peak"], 3.0);
        assert_eq!(v["bw_average"], 2.5);
        assert_eq!(v["size_bytes"], 65536);
        let nan = BwReport {
            bw_avg: f64::NAN,
            ..mine
        };
        let line = to_line(&BwResult::new("t", Role::Client, BwUnits::Gbps, &nan, None));
        let v: serde_json::Value = serde_json::from_str(&line).expect("still valid JSON");
        assert!(v["bw_average"].is_null());
    }

    #[test]
    fn lat_json() {
        let r = LatReport {
            size: 2,
            iters: 5,
            t_min: 1.0,
            t_max: 2.0,
            t_typical: 1.5,
            t_avg: 1.5,
            t_stdev: 0.0,
            p99: 2.0,
            p999: 2.0,
        };
        let v: serde_json::Value =
            serde_json::from_str(&to_line(&LatResult::new("ib_send_lat", Role::Client, &r)))
                .expect("valid JSON");
        assert_eq!(v["t_typical_us"], 1.5);
        assert_eq!(v["iterations"], 5);
    }
}
