//! What the host's packet filter does to an incoming RoCEv2 datagram (UDP destination port
//! 4791), read from `iptables -S` / `ip6tables -S` and `nft list ruleset`.
//!
//! This is not a packet-filter engine: it walks the INPUT path in order and decides a verdict
//! only from the matches it understands (protocol, destination port, input interface,
//! destination address). A rule with any other match (source address, conntrack state,
//! marks, ...) may or may not apply to a RoCEv2 packet; a DROP/REJECT behind such a rule is
//! reported as "may drop" rather than guessed either way.

use std::net::IpAddr;

/// RoCEv2's UDP destination port (IANA, IBTA Annex A17; Linux ROCE_V2_UDP_DPORT).
pub const ROCE_PORT: u16 = 4791;

/// The packet asked about: UDP to `addr`:4791 arriving on interface `iface`.
#[derive(Clone, Debug)]
pub struct Packet<'a> {
    pub addr: IpAddr,
    pub iface: &'a str,
}

/// What the rules do to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted: by this rule, or by the chain's policy (`None`), or there are no rules.
    Accepted(Option<String>),
    /// Dropped or rejected by this rule for certain.
    Dropped(String),
    /// A DROP/REJECT rule with matches this reader cannot evaluate may apply.
    MayDrop(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Applies {
    Yes,
    No,
    Maybe,
}

fn and(a: Applies, b: Applies) -> Applies {
    match (a, b) {
        (Applies::No, _) | (_, Applies::No) => Applies::No,
        (Applies::Maybe, _) | (_, Applies::Maybe) => Applies::Maybe,
        _ => Applies::Yes,
    }
}

/// Whether a port specification (`4791`, `4000:5000`, `4000-5000`, `53,4791`, `{ 53, 4791 }`)
/// contains 4791.
fn port_spec_has(spec: &str) -> bool {
    spec.split([',', ' ', '{', '}'])
        .filter(|s| !s.is_empty())
        .any(|p| {
            let (lo, hi) = p
                .split_once(':')
                .or_else(|| p.split_once('-'))
                .unwrap_or((p, p));
            let lo = if lo.is_empty() {
                Some(0)
            } else {
                lo.parse::<u32>().ok()
            };
            let hi = if hi.is_empty() {
                Some(65535)
            } else {
                hi.parse::<u32>().ok()
            };
            let port = u32::from(ROCE_PORT);
            matches!((lo, hi), (Some(l), Some(h)) if l <= port && port <= h)
        })
}

/// Whether interface pattern `pat` (iptables: `eth+` is a prefix) names `iface`.
fn iface_matches(pat: &str, iface: &str) -> bool {
    let pat = pat.trim_matches('"');
    match pat.strip_suffix('+').or_else(|| pat.strip_suffix('*')) {
        Some(prefix) => iface.starts_with(prefix),
        None => pat == iface,
    }
}

/// Whether CIDR `net` (`10.0.0.0/8`, `10.0.0.1`) contains `addr`; `None` if unparsable.
fn cidr_contains(net: &str, addr: IpAddr) -> Option<bool> {
    let (ip, len) = match net.split_once('/') {
        Some((ip, len)) => (ip, Some(len.parse::<u32>().ok()?)),
        None => (net, None),
    };
    let ip: IpAddr = ip.parse().ok()?;
    match (ip, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let len = len.unwrap_or(32).min(32);
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            Some(u32::from(n) & mask == u32::from(a) & mask)
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let len = len.unwrap_or(128).min(128);
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            Some(u128::from(n) & mask == u128::from(a) & mask)
        }
        _ => Some(false),
    }
}

// ---------------------------------------------------------------------------------------
// iptables -S

struct IptRule {
    chain: String,
    text: String,
    applies: Applies,
    target: String,
}

fn ipt_rule(line: &str, pkt: &Packet<'_>) -> Option<IptRule> {
    let toks: Vec<&str> = line.split_whitespace().collect();
    if toks.first() != Some(&"-A") || toks.len() < 2 {
        return None;
    }
    let mut applies = Applies::Yes;
    let mut target = String::new();
    let mut neg = false;
    let mut i = 2;
    while i < toks.len() {
        let t = toks[i];
        let arg = toks.get(i + 1).copied().unwrap_or("");
        let mut step = 2;
        let a = match t {
            "!" => {
                neg = true;
                i += 1;
                continue;
            }
            "-p" | "--protocol" => match arg {
                "udp" | "17" | "all" | "0" => Applies::Yes,
                _ => Applies::No,
            },
            "--dport" | "--destination-port" | "--dports" | "--destination-ports" => {
                if port_spec_has(arg) {
                    Applies::Yes
                } else {
                    Applies::No
                }
            }
            "-i" | "--in-interface" => {
                if iface_matches(arg, pkt.iface) {
                    Applies::Yes
                } else {
                    Applies::No
                }
            }
            "-d" | "--destination" => match cidr_contains(arg, pkt.addr) {
                Some(true) => Applies::Yes,
                Some(false) => Applies::No,
                None => Applies::Maybe,
            },
            "-m" | "--match" => Applies::Yes,
            "--comment" => {
                // `--comment "two words"`: skip to the closing quote.
                let mut j = i + 1;
                if arg.starts_with('"') && !(arg.len() > 1 && arg.ends_with('"')) {
                    while j + 1 < toks.len() && !toks[j + 1].ends_with('"') {
                        j += 1;
                    }
                    j += 1;
                }
                step = j + 1 - i;
                Applies::Yes
            }
            "-j" | "--jump" | "-g" | "--goto" => {
                target = arg.to_string();
                Applies::Yes
            }
            "-c" | "--set-counters" => {
                step = 3;
                Applies::Yes
            }
            // Options of targets (--reject-with, --log-prefix "a b", ...) follow -j.
            _ if !target.is_empty() => {
                step = 1;
                Applies::Yes
            }
            _ if t.starts_with('-') => Applies::Maybe,
            _ => {
                step = 1;
                Applies::Yes
            }
        };
        let a = if neg {
            match a {
                Applies::Yes => Applies::No,
                Applies::No => Applies::Yes,
                Applies::Maybe => Applies::Maybe,
            }
        } else {
            a
        };
        neg = false;
        applies = and(applies, a);
        i += step;
    }
    Some(IptRule {
        chain: toks[1].to_string(),
        text: line.trim().to_string(),
        applies,
        target,
    })
}

/// The verdict of `iptables -S` output (filter table) for `pkt`.
pub fn iptables(text: &str, pkt: &Packet<'_>) -> Verdict {
    let rules: Vec<IptRule> = text.lines().filter_map(|l| ipt_rule(l, pkt)).collect();
    let policy = text.lines().find_map(|l| {
        let t: Vec<&str> = l.split_whitespace().collect();
        (t.len() >= 3 && t[0] == "-P" && t[1] == "INPUT").then(|| t[2].to_string())
    });
    match walk_ipt(&rules, "INPUT", 0) {
        Some(v) => v,
        None if matches!(policy.as_deref(), Some("DROP" | "REJECT")) => {
            Verdict::Dropped("-P INPUT DROP (default policy, no rule accepts udp 4791)".into())
        }
        None => Verdict::Accepted(None),
    }
}

/// Walk chain `chain`: `Some` on a verdict, `None` when the packet falls off its end.
fn walk_ipt(rules: &[IptRule], chain: &str, depth: u32) -> Option<Verdict> {
    if depth > 16 {
        return None;
    }
    let mut maybe: Option<String> = None;
    for r in rules.iter().filter(|r| r.chain == chain) {
        if r.applies == Applies::No {
            continue;
        }
        let definite = r.applies == Applies::Yes && maybe.is_none();
        match r.target.as_str() {
            "ACCEPT" if definite => return Some(Verdict::Accepted(Some(r.text.clone()))),
            "DROP" | "REJECT" if definite => return Some(Verdict::Dropped(r.text.clone())),
            "DROP" | "REJECT" => {
                maybe.get_or_insert_with(|| r.text.clone());
            }
            "RETURN" if definite => return None,
            "" | "ACCEPT" | "RETURN" | "LOG" | "NFLOG" | "CONNMARK" | "MARK" => {}
            sub => {
                if let Some(v) = walk_ipt(rules, sub, depth + 1) {
                    match v {
                        Verdict::Dropped(t) | Verdict::MayDrop(t) if !definite => {
                            maybe.get_or_insert(t);
                        }
                        Verdict::Accepted(_) if !definite => {}
                        v => return Some(v),
                    }
                }
            }
        }
    }
    maybe.map(Verdict::MayDrop)
}

// ---------------------------------------------------------------------------------------
// nft list ruleset

/// The verdict of `nft list ruleset` output for `pkt`: the chains hooked on `input` (any
/// family that sees IPv4/IPv6: ip, ip6, inet), each walked in order.
pub fn nft(text: &str, pkt: &Packet<'_>) -> Verdict {
    let mut worst = Verdict::Accepted(None);
    // The chain being read: (hooked on input, its rules, its policy).
    let mut chain: Option<(bool, Vec<String>, Option<String>)> = None;
    let mut family_ok = true;
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(rest) = line.strip_prefix("table ") {
            let fam = rest.split_whitespace().next().unwrap_or("");
            family_ok = match pkt.addr {
                IpAddr::V4(_) => matches!(fam, "ip" | "inet"),
                IpAddr::V6(_) => matches!(fam, "ip6" | "inet"),
            };
        } else if line.starts_with("chain ") {
            chain = Some((false, Vec::new(), None));
        } else if line.starts_with("type ") && line.contains("hook input") {
            if let Some(c) = chain.as_mut() {
                c.0 = family_ok;
                if let Some(p) = line.split("policy ").nth(1) {
                    c.2 = Some(p.trim_end_matches(';').trim().to_string());
                }
            }
        } else if line == "}" {
            if let Some((true, rules, policy)) = chain.take() {
                let v = nft_chain(&rules, policy.as_deref(), pkt);
                worst = worse(worst, v);
            }
        } else if let Some(c) = chain.as_mut() {
            if !line.is_empty() {
                c.1.push(line.to_string());
            }
        }
    }
    worst
}

fn nft_rule_applies(rule: &str, pkt: &Packet<'_>) -> Applies {
    let toks: Vec<&str> = rule.split_whitespace().collect();
    let mut applies = Applies::Yes;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        let next = toks.get(i + 1).copied().unwrap_or("");
        // The value of a match: one token, or a `{ ... }` set.
        let value = |from: usize| -> (String, usize) {
            let start = toks.get(from).copied().unwrap_or("");
            let start = if start == "!=" {
                toks.get(from + 1).copied().unwrap_or("")
            } else {
                start
            };
            let off = if toks.get(from) == Some(&"!=") { 1 } else { 0 };
            if start.starts_with('{') {
                let mut v = String::new();
                let mut j = from + off;
                while j < toks.len() {
                    v.push_str(toks[j]);
                    v.push(' ');
                    if toks[j].ends_with('}') {
                        break;
                    }
                    j += 1;
                }
                (v, j + 1)
            } else {
                (start.to_string(), from + off + 1)
            }
        };
        let negated = |from: usize| toks.get(from) == Some(&"!=");
        let (a, step_to) = match (t, next) {
            ("udp", "dport") | ("th", "dport") => {
                let (v, end) = value(i + 2);
                let has = port_spec_has(&v);
                (
                    if has != negated(i + 2) {
                        Applies::Yes
                    } else {
                        Applies::No
                    },
                    end,
                )
            }
            ("tcp", _) | ("sctp", _) | ("icmp", _) | ("icmpv6", _) => (Applies::No, i + 1),
            ("meta", "l4proto") | ("ip", "protocol") | ("ip6", "nexthdr") => {
                let (v, end) = value(i + 2);
                let udp = v.contains("udp") || v.contains("17");
                (
                    if udp != negated(i + 2) {
                        Applies::Yes
                    } else {
                        Applies::No
                    },
                    end,
                )
            }
            ("iifname", _) | ("iif", _) => {
                let (v, end) = value(i + 1);
                let m = v
                    .trim_matches(|c| c == '{' || c == '}' || c == ' ')
                    .split([',', ' '])
                    .filter(|s| !s.is_empty())
                    .any(|p| iface_matches(p, pkt.iface));
                (
                    if m != negated(i + 1) {
                        Applies::Yes
                    } else {
                        Applies::No
                    },
                    end,
                )
            }
            ("ip", "daddr") | ("ip6", "daddr") => {
                let (v, end) = value(i + 2);
                let a = match cidr_contains(v.trim(), pkt.addr) {
                    Some(m) if m != negated(i + 2) => Applies::Yes,
                    Some(_) => Applies::No,
                    None => Applies::Maybe,
                };
                (a, end)
            }
            ("counter", _) => {
                // `counter packets N bytes M`
                let end = if next == "packets" { i + 5 } else { i + 1 };
                (Applies::Yes, end)
            }
            ("accept" | "drop" | "reject" | "return" | "continue" | "log" | "jump" | "goto", _) => {
                break;
            }
            _ => (Applies::Maybe, i + 1),
        };
        applies = and(applies, a);
        i = step_to.max(i + 1);
    }
    applies
}

fn nft_target(rule: &str) -> &str {
    let toks: Vec<&str> = rule.split_whitespace().collect();
    for (i, t) in toks.iter().enumerate() {
        match *t {
            "accept" | "drop" | "reject" | "return" => return t,
            "jump" | "goto" => return toks.get(i + 1).copied().unwrap_or(""),
            _ => {}
        }
    }
    ""
}

fn nft_chain(rules: &[String], policy: Option<&str>, pkt: &Packet<'_>) -> Verdict {
    // A jump into another chain is not followed; that chain may accept the packet (as
    // firewalld's zone chains do), so a drop after it is only a "may drop".
    let mut maybe: Option<String> = None;
    let mut jumped = false;
    for r in rules {
        let a = nft_rule_applies(r, pkt);
        if a == Applies::No {
            continue;
        }
        let definite = a == Applies::Yes && maybe.is_none() && !jumped;
        match nft_target(r) {
            "accept" if definite => return Verdict::Accepted(Some(r.clone())),
            "drop" | "reject" if definite => return Verdict::Dropped(r.clone()),
            "drop" | "reject" => {
                maybe.get_or_insert_with(|| r.clone());
            }
            "accept" | "return" | "" => {}
            _ => jumped = true,
        }
    }
    if let Some(m) = maybe {
        return Verdict::MayDrop(m);
    }
    if policy == Some("drop") {
        let why = "policy drop on an input hook chain, no rule accepts udp 4791";
        return if jumped {
            Verdict::MayDrop(format!("{why} (rules in chains it jumps to not read)"))
        } else {
            Verdict::Dropped(why.into())
        };
    }
    Verdict::Accepted(None)
}

/// The worse of two verdicts (Dropped > MayDrop > Accepted).
pub fn worse(a: Verdict, b: Verdict) -> Verdict {
    fn rank(v: &Verdict) -> u8 {
        match v {
            Verdict::Accepted(_) => 0,
            Verdict::MayDrop(_) => 1,
            Verdict::Dropped(_) => 2,
        }
    }
    if rank(&b) > rank(&a) || (rank(&b) == rank(&a) && a == Verdict::Accepted(None)) {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(addr: &str, iface: &'static str) -> Packet<'static> {
        Packet {
            addr: addr.parse().unwrap(),
            iface,
        }
    }

    #[test]
    fn ports() {
        assert!(port_spec_has("4791"));
        assert!(port_spec_has("53,4791"));
        assert!(port_spec_has("4000:5000"));
        assert!(port_spec_has("{ 53, 4791 }"));
        assert!(port_spec_has("4700-4800"));
        assert!(!port_spec_has("4792"));
        assert!(!port_spec_has("1:4790"));
    }

    #[test]
    fn iptables_drop_rule_and_policy() {
        let p = pkt("10.9.0.1", "eth0");
        let open = "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n";
        assert_eq!(iptables(open, &p), Verdict::Accepted(None));
        let drop = format!("{open}-A INPUT -p udp -m udp --dport 4791 -j DROP\n");
        assert!(matches!(iptables(&drop, &p), Verdict::Dropped(_)));
        let other_port = format!("{open}-A INPUT -p udp -m udp --dport 4792 -j DROP\n");
        assert_eq!(iptables(&other_port, &p), Verdict::Accepted(None));
        let tcp = format!(
            "{open}-A INPUT -p tcp -m tcp --dport 4791 -j REJECT --reject-with tcp-reset\n"
        );
        assert_eq!(iptables(&tcp, &p), Verdict::Accepted(None));
        let policy = "-P INPUT DROP\n-A INPUT -i lo -j ACCEPT\n";
        assert!(matches!(iptables(policy, &p), Verdict::Dropped(_)));
        assert!(matches!(
            iptables(policy, &pkt("127.0.0.1", "lo")),
            Verdict::Accepted(Some(_))
        ));
        let accepted = "-P INPUT DROP\n-A INPUT -p udp -m multiport --dports 53,4791 -j ACCEPT\n";
        assert!(matches!(iptables(accepted, &p), Verdict::Accepted(Some(_))));
        let from = format!("{open}-A INPUT -s 10.1.0.0/16 -p udp --dport 4791 -j DROP\n");
        assert!(matches!(iptables(&from, &p), Verdict::MayDrop(_)));
        let chain =
            "-P INPUT ACCEPT\n-N ROCE\n-A INPUT -j ROCE\n-A ROCE -p udp --dport 4791 -j REJECT\n";
        assert!(matches!(iptables(chain, &p), Verdict::Dropped(_)));
        let neg = format!("{open}-A INPUT ! -i lo -p udp --dport 4791 -j DROP\n");
        assert!(matches!(iptables(&neg, &p), Verdict::Dropped(_)));
        assert_eq!(
            iptables(&neg, &pkt("127.0.0.1", "lo")),
            Verdict::Accepted(None)
        );
    }

    #[test]
    fn nft_rules() {
        let p = pkt("10.9.0.1", "eth0");
        let rs = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tudp dport 4791 counter packets 3 bytes 300 drop\n\t}\n}\n";
        assert!(matches!(nft(rs, &p), Verdict::Dropped(_)));
        let set = rs.replace("udp dport 4791", "udp dport { 53, 4791 }");
        assert!(matches!(nft(&set, &p), Verdict::Dropped(_)));
        let other = rs.replace("4791", "4792");
        assert_eq!(nft(&other, &p), Verdict::Accepted(None));
        let policy = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy drop;\n\t\tiifname \"lo\" accept\n\t}\n}\n";
        assert!(matches!(nft(policy, &p), Verdict::Dropped(_)));
        assert!(matches!(
            nft(policy, &pkt("127.0.0.1", "lo")),
            Verdict::Accepted(Some(_))
        ));
        // An ip (IPv4) table does not see IPv6 packets.
        assert_eq!(
            nft(policy, &pkt("fd00::1", "eth0")),
            Verdict::Accepted(None)
        );
        let ct = rs.replace("udp dport 4791", "ct state new udp dport 4791");
        assert!(matches!(nft(&ct, &p), Verdict::MayDrop(_)));
        // A jump that is not followed may accept: a later drop only "may" apply.
        let jump = "table inet firewalld {\n\tchain filter_INPUT {\n\t\ttype filter hook input priority filter + 10; policy accept;\n\t\tct state { established, related } accept\n\t\tjump filter_INPUT_ZONES\n\t\treject with icmpx admin-prohibited\n\t}\n}\n";
        assert!(matches!(nft(jump, &p), Verdict::MayDrop(_)));
        // iptables-nft's translation.
        let xt = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tmeta l4proto udp udp dport 4791 counter packets 0 bytes 0 drop\n\t}\n}\n";
        assert!(matches!(nft(xt, &p), Verdict::Dropped(_)));
    }
}
