//! `--plot FILE.svg`: an `-a` sweep as a line chart — average bandwidth (bandwidth tests)
//! or typical latency (latency tests) against message size on a log₂ axis. Hand-written
//! SVG 1.1: no dependency, opens in any browser.

use std::fmt::Write as _;

use oob::console::BwUnits;

use super::side::Row;

const W: f64 = 720.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" upper bound for the y axis (1, 2 or 5 × 10^k at or above `max`).
fn nice_ceiling(max: f64) -> f64 {
    if max.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !max.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * mag >= max {
            return m * mag;
        }
    }
    10.0 * mag
}

/// Human size label: 2, 1K, 64K, 8M.
fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{}M", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{}K", bytes >> 10)
    } else {
        bytes.to_string()
    }
}

/// The chart of `rows` as an SVG document.
pub fn svg(title: &str, rows: &[Row], units: BwUnits) -> String {
    let mut pts: Vec<(u64, f64)> = rows
        .iter()
        .map(|r| match r {
            Row::Bw(b) => (b.size_bytes, b.bw_average),
            Row::Lat(l) => (l.size_bytes, l.t_typical_us),
        })
        .filter(|(s, v)| *s > 0 && v.is_finite())
        .collect();
    pts.sort_by_key(|(s, _)| *s);
    let is_bw = rows.first().is_none_or(|r| matches!(r, Row::Bw(_)));
    let y_label = if is_bw {
        format!("average bandwidth [{}]", units.label())
    } else {
        "typical latency [usec]".to_string()
    };
    let (x_min, x_max) = match (pts.first(), pts.last()) {
        (Some(a), Some(b)) => ((a.0 as f64).log2(), (b.0 as f64).log2()),
        _ => (1.0, 23.0),
    };
    let x_span = (x_max - x_min).max(1.0);
    let y_max = nice_ceiling(pts.iter().map(|p| p.1).fold(0.0, f64::max));
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |s: u64| LEFT + ((s as f64).log2() - x_min) / x_span * pw;
    let y = |v: f64| TOP + ph - (v / y_max).clamp(0.0, 1.0) * ph;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="24" text-anchor="middle" font-size="16">{}</text>"#,
        W / 2.0,
        esc(&format!("uroce bench {title}"))
    );
    // Axes and grid.
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#,
        TOP + ph,
        LEFT + pw,
        TOP + ph,
        TOP + ph
    );
    for i in 0..=5 {
        let v = y_max * f64::from(i) / 5.0;
        let yy = y(v);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/>
<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0,
            oob::cfmt::fixed(v, if y_max < 10.0 { 2 } else { 0 })
        );
    }
    for (s, _) in &pts {
        let xx = x(*s);
        let _ = writeln!(
            out,
            r#"<text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            TOP + ph + 18.0,
            size_label(*s)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">message size [bytes]</text>
<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
        LEFT + pw / 2.0,
        H - 14.0,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(&y_label)
    );
    // The data.
    let path: Vec<String> = pts
        .iter()
        .map(|(s, v)| format!("{:.1},{:.1}", x(*s), y(*v)))
        .collect();
    let _ = writeln!(
        out,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{}"/>"##,
        path.join(" ")
    );
    for (s, v) in &pts {
        let _ = writeln!(
            out,
            r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="#1f77b4"><title>{} B: {}</title></circle>"##,
            x(*s),
            y(*v),
            s,
            oob::cfmt::fixed(*v, 2)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oob::console::LatReport;
    use oob::json::{BwResult, LatResult};
    use oob::perftest::{BwReport, Role};

    #[test]
    fn chart_has_one_point_per_size() {
        let rows: Vec<Row> = [2u64, 4, 8, 1024]
            .iter()
            .map(|&s| {
                Row::Bw(BwResult::new(
                    "ib_write_bw",
                    Role::Client,
                    BwUnits::Gbps,
                    &BwReport {
                        size: s,
                        iters: 5,
                        bw_avg: s as f64 / 100.0,
                        ..BwReport::default()
                    },
                    None,
                ))
            })
            .collect();
        let s = svg("write_bw", &rows, BwUnits::Gbps);
        assert!(s.starts_with("<?xml"));
        assert_eq!(s.matches("<circle").count(), 4);
        assert!(s.contains("[Gb/sec]"));
        assert!(s.contains(">1K<"));
        let lat = Row::Lat(LatResult::new(
            "ib_send_lat",
            Role::Client,
            &LatReport {
                size: 2,
                iters: 5,
                t_min: 1.0,
                t_max: 2.0,
                t_typical: 1.5,
                t_avg: 1.5,
                t_stdev: 0.0,
                p99: 2.0,
                p999: 2.0,
            },
        ));
        assert!(svg("send_lat", &[lat], BwUnits::MiBps).contains("typical latency"));
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(size_label(8 << 20), "8M");
    }
}
