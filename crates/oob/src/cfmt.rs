//! Small look-alikes of the C library functions whose exact behaviour shows on the wire or
//! on the console: `printf("%.Nf")` (Rust's fixed-precision formatting rounds the exact
//! binary value half-to-even, as glibc does; only NaN and infinity are spelled
//! differently), and `atof()`/`strtod()`, which perftest applies to the peer's version
//! string (docs/perftest.md §2 M1, §3).

/// `printf("%.{prec}f", x)` as glibc prints it.
pub fn fixed(x: f64, prec: usize) -> String {
    if x.is_nan() {
        if x.is_sign_negative() {
            "-nan".to_string()
        } else {
            "nan".to_string()
        }
    } else if x.is_infinite() {
        if x < 0.0 {
            "-inf".to_string()
        } else {
            "inf".to_string()
        }
    } else {
        format!("{x:.prec$}")
    }
}

/// `printf("%-{width}.{prec}f", x)`: left-aligned, padded with spaces to `width`.
pub fn fixed_left(x: f64, width: usize, prec: usize) -> String {
    format!("{:<width$}", fixed(x, prec))
}

/// C `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `atof(s)` (that is, `strtod(s, NULL)` in the "C" locale) over the bytes up to the first
/// NUL. Never fails: text with no number in front gives 0.0, as in C.
///
/// Handles leading white space, a sign, decimal numbers with optional fraction and
/// exponent, hexadecimal floating constants (`0x1.8p3`), `inf`/`infinity` and
/// `nan`/`nan(...)`, case-insensitively, like glibc.
pub fn atof(bytes: &[u8]) -> f64 {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let s = bytes.get(..end).unwrap_or(&[]);
    let mut i = 0;
    while s.get(i).copied().is_some_and(is_c_space) {
        i += 1;
    }
    let mut negative = false;
    if let Some(&c) = s.get(i) {
        if c == b'+' || c == b'-' {
            negative = c == b'-';
            i += 1;
        }
    }
    let rest = s.get(i..).unwrap_or(&[]);
    let magnitude = if starts_with_ignore_case(rest, b"inf") {
        f64::INFINITY
    } else if starts_with_ignore_case(rest, b"nan") {
        f64::NAN
    } else if (starts_with_ignore_case(rest, b"0x"))
        && rest
            .get(2)
            .is_some_and(|&c| c.is_ascii_hexdigit() || c == b'.')
    {
        hex_float(rest.get(2..).unwrap_or(&[]))
    } else {
        decimal_float(rest)
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

fn starts_with_ignore_case(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len()
        && s.iter()
            .zip(prefix)
            .all(|(a, b)| a.to_ascii_lowercase() == *b)
}

/// The longest decimal-number prefix of `s`, evaluated; 0.0 when there is none.
fn decimal_float(s: &[u8]) -> f64 {
    let mut i = 0;
    let mut int_digits = String::new();
    while let Some(&c) = s.get(i) {
        if !c.is_ascii_digit() {
            break;
        }
        int_digits.push(char::from(c));
        i += 1;
    }
    let mut frac_digits = String::new();
    if s.get(i) == Some(&b'.') {
        let mut j = i + 1;
        while let Some(&c) = s.get(j) {
            if !c.is_ascii_digit() {
                break;
            }
            frac_digits.push(char::from(c));
            j += 1;
        }
        if !int_digits.is_empty() || !frac_digits.is_empty() {
            i = j;
        }
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return 0.0;
    }
    let mut exponent = String::new();
    if matches!(s.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        let mut exp = String::new();
        if let Some(&c) = s.get(j) {
            if c == b'+' || c == b'-' {
                exp.push(char::from(c));
                j += 1;
            }
        }
        let mut any = false;
        while let Some(&c) = s.get(j) {
            if !c.is_ascii_digit() {
                break;
            }
            exp.push(char::from(c));
            any = true;
            j += 1;
        }
        if any {
            exponent = exp;
        }
    }
    let int_part = if int_digits.is_empty() {
        "0"
    } else {
        &int_digits
    };
    let frac_part = if frac_digits.is_empty() {
        "0"
    } else {
        &frac_digits
    };
    let text = if exponent.is_empty() {
        format!("{int_part}.{frac_part}")
    } else {
        format!("{int_part}.{frac_part}e{exponent}")
    };
    text.parse::<f64>().unwrap_or(0.0)
}

/// A hexadecimal floating constant after its `0x` prefix: digits, optional fraction,
/// optional binary exponent `p[+-]d+`.
fn hex_float(s: &[u8]) -> f64 {
    let mut value = 0.0f64;
    let mut i = 0;
    let mut any = false;
    while let Some(d) = s.get(i).and_then(|&c| char::from(c).to_digit(16)) {
        value = value * 16.0 + f64::from(d);
        any = true;
        i += 1;
    }
    let mut scale = 0i32;
    if s.get(i) == Some(&b'.') {
        i += 1;
        while let Some(d) = s.get(i).and_then(|&c| char::from(c).to_digit(16)) {
            value = value * 16.0 + f64::from(d);
            scale = scale.saturating_sub(4);
            any = true;
            i += 1;
        }
    }
    if !any {
        return 0.0;
    }
    if matches!(s.get(i), Some(b'p' | b'P')) {
        let mut j = i + 1;
        let mut negative = false;
        if let Some(&c) = s.get(j) {
            if c == b'+' || c == b'-' {
                negative = c == b'-';
                j += 1;
            }
        }
        let mut exp: i32 = 0;
        let mut digits = false;
        while let Some(d) = s.get(j).and_then(|&c| char::from(c).to_digit(10)) {
            exp = exp
                .saturating_mul(10)
                .saturating_add(i32::try_from(d).unwrap_or(0));
            digits = true;
            j += 1;
        }
        if digits {
            scale = scale.saturating_add(if negative { -exp } else { exp });
        }
    }
    value * 2f64.powi(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_matches_printf() {
        assert_eq!(fixed(14.0414, 2), "14.04");
        assert_eq!(fixed(0.000218174, 6), "0.000218");
        assert_eq!(fixed(0.125, 2), "0.12", "ties go to even, as in glibc");
        assert_eq!(fixed(0.375, 2), "0.38");
        assert_eq!(fixed(-0.0, 2), "-0.00");
        assert_eq!(fixed(f64::NAN, 2), "nan");
        assert_eq!(fixed(-f64::NAN, 2), "-nan");
        assert_eq!(fixed(f64::INFINITY, 6), "inf");
        assert_eq!(fixed(f64::NEG_INFINITY, 6), "-inf");
        assert_eq!(fixed_left(13.6359, 7, 2), "13.64  ");
        assert_eq!(fixed_left(1186.26, 7, 2), "1186.26");
        assert_eq!(fixed_left(12345.678, 7, 2), "12345.68");
    }

    #[test]
    fn atof_like_c() {
        assert_eq!(atof(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"), 6.06);
        assert_eq!(atof(b"5.60"), 5.60);
        assert_eq!(atof(b""), 0.0);
        assert_eq!(atof(b"\0garbage"), 0.0);
        assert_eq!(atof(b"  \t+7.5xyz"), 7.5);
        assert_eq!(atof(b"-3"), -3.0);
        assert_eq!(atof(b"6."), 6.0);
        assert_eq!(atof(b".5"), 0.5);
        assert_eq!(atof(b"."), 0.0);
        assert_eq!(atof(b"1e2"), 100.0);
        assert_eq!(atof(b"1e"), 1.0);
        assert_eq!(atof(b"1e+"), 1.0);
        assert_eq!(atof(b"2E-1"), 0.2);
        assert_eq!(atof(b"abc"), 0.0);
        assert!(atof(b"inf").is_infinite());
        assert!(atof(b"-Infinity").is_infinite() && atof(b"-Infinity") < 0.0);
        assert!(atof(b"NaN").is_nan());
        assert!(atof(b"nan(0x1)").is_nan());
        assert_eq!(atof(b"0x1.8p3"), 12.0);
        assert_eq!(atof(b"0x10"), 16.0);
        assert_eq!(atof(b"0x"), 0.0, "`0x` alone reads as the digit 0");
        assert_eq!(atof(b"0xg"), 0.0);
        assert_eq!(atof(b"0x1p-2"), 0.25);
    }
}
