//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`, ...) as exact fixed-point values.
//!
//! A quantity is stored as a signed count of nano-units (10^-9), which is exact for every
//! value Kubernetes keeps (it rounds finer precision up to nano units, as we do).

use std::fmt;

/// An exact Kubernetes quantity, in nano-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text is not `[+-]<digits>[.<digits>][suffix]`.
    #[error(
        "{0:?} is not a Kubernetes quantity (expected a number with an optional suffix \
         n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as 1e3)"
    )]
    Syntax(String),
    /// The value does not fit.
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// A quantity of `n` whole units.
    pub fn from_units(n: i64) -> Self {
        Quantity {
            nanos: n as i128 * NANO,
        }
    }

    /// A quantity of `n` nano-units.
    pub fn from_nanos(nanos: i128) -> Self {
        Quantity { nanos }
    }

    /// The value in nano-units.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// True when the value is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// The value rounded up to whole units (CPUs, bytes, devices).
    pub fn ceil_units(&self) -> i128 {
        ceil_div(self.nanos, NANO)
    }

    /// The value rounded up to milli-units (milli-CPU).
    pub fn ceil_milli(&self) -> i128 {
        ceil_div(self.nanos, 1_000_000)
    }

    /// The value as whole units, if it is an integer.
    pub fn as_integer(&self) -> Option<i128> {
        (self.nanos % NANO == 0).then_some(self.nanos / NANO)
    }

    /// Sum, saturating at the representable range.
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }

    /// Parse a Kubernetes quantity string.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        parse(text)
    }

    /// Parse a `k8s_openapi` quantity.
    pub fn from_k8s(
        q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Quantity, QuantityError> {
        parse(&q.0)
    }
}

impl fmt::Display for Quantity {
    /// Canonical-ish form: integers plainly, otherwise the coarsest of `m`, `u`, `n`
    /// that is exact. `Quantity::parse` of the output gives back the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos;
        if n % NANO == 0 {
            write!(f, "{}", n / NANO)
        } else if n % 1_000_000 == 0 {
            write!(f, "{}m", n / 1_000_000)
        } else if n % 1_000 == 0 {
            write!(f, "{}u", n / 1_000)
        } else {
            write!(f, "{n}n")
        }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 { q } else { q + 1 }
}

/// Scale of a suffix: (power of ten, power of 1024).
fn suffix_scale(suffix: &str) -> Option<(i32, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        _ => {
            // Decimal exponent: e or E followed by an optionally signed integer.
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let e: i32 = rest.parse().ok()?;
            (e, 0)
        }
    })
}

fn parse(text: &str) -> Result<Quantity, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_string());
    let too_large = || QuantityError::TooLarge(text.to_string());
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(num_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => {
            if f.contains('.') {
                return Err(syntax());
            }
            (i, f)
        }
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(syntax());
    }
    let (pow10, pow1024) = suffix_scale(suffix).ok_or_else(syntax)?;

    // digits as an integer mantissa with `frac_len` decimal places.
    let int_trim = int_part.trim_start_matches('0');
    let frac_trim = frac_part.trim_end_matches('0');
    if int_trim.len() + frac_trim.len() > 36 {
        return Err(too_large());
    }
    let mut mantissa: i128 = 0;
    for b in int_trim.bytes().chain(frac_trim.bytes()) {
        mantissa = mantissa * 10 + i128::from(b - b'0');
    }
    // value = mantissa * 1024^pow1024 * 10^(pow10 - frac_len + 9) nano-units
    for _ in 0..pow1024 {
        mantissa = mantissa.checked_mul(1024).ok_or_else(too_large)?;
    }
    let exp = pow10 - frac_trim.len() as i32 + 9;
    let nanos = if mantissa == 0 {
        0
    } else if exp >= 0 {
        if exp > 38 {
            return Err(too_large());
        }
        mantissa
            .checked_mul(10i128.pow(exp as u32))
            .ok_or_else(too_large)?
    } else {
        let div = -exp;
        if div > 38 {
            1 // a tiny positive value rounds up to one nano-unit
        } else {
            ceil_div(mantissa, 10i128.pow(div as u32))
        }
    };
    // Keep every value comfortably inside i128 so sums of many values cannot overflow.
    if nanos > i128::MAX / 1_000_000 {
        return Err(too_large());
    }
    Ok(Quantity {
        nanos: if negative { -nanos } else { nanos },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_every_suffix() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("1", NANO),
            ("100m", NANO / 10),
            ("1500m", 3 * NANO / 2),
            ("1.5", 3 * NANO / 2),
            (".5", NANO / 2),
            ("5.", 5 * NANO),
            ("+2", 2 * NANO),
            ("-2", -2 * NANO),
            ("1n", 1),
            ("1u", 1000),
            ("1k", 1000 * NANO),
            ("1M", 1_000_000 * NANO),
            ("1G", 1_000_000_000 * NANO),
            ("1T", 1_000_000_000_000 * NANO),
            ("1P", 1_000_000_000_000_000 * NANO),
            ("1E", 1_000_000_000_000_000_000 * NANO),
            ("1Ki", 1024 * NANO),
            ("1Mi", 1024 * 1024 * NANO),
            ("1Gi", 1024 * 1024 * 1024 * NANO),
            ("1Ti", 1024i128.pow(4) * NANO),
            ("1Pi", 1024i128.pow(5) * NANO),
            ("1Ei", 1024i128.pow(6) * NANO),
            ("1.5Gi", 3 * 512 * 1024 * 1024 * NANO),
            ("1e3", 1000 * NANO),
            ("1E3", 1000 * NANO),
            ("1e-3", NANO / 1000),
            ("2e+2", 200 * NANO),
            ("0.0000000001", 1), // sub-nano rounds up
        ];
        for (text, nanos) in cases {
            assert_eq!(Quantity::parse(text).unwrap().nanos(), *nanos, "{text}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for text in [
            "", "NaN", "1.2.3", "1Kb", "k", "1 Gi", " 1", "1e", "1ee3", ".", "-", "1i", "0x10",
        ] {
            assert!(
                Quantity::parse(text).is_err(),
                "{text:?} should be rejected"
            );
        }
        assert!(matches!(
            Quantity::parse("1e300"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            Quantity::parse("99999999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge(_))
        ));
    }

    #[test]
    fn rounding() {
        assert_eq!(Quantity::parse("100m").unwrap().ceil_units(), 1);
        assert_eq!(Quantity::parse("1.5").unwrap().ceil_units(), 2);
        assert_eq!(Quantity::parse("2").unwrap().ceil_units(), 2);
        assert_eq!(Quantity::parse("-1.5").unwrap().ceil_units(), -1);
        assert_eq!(Quantity::parse("1n").unwrap().ceil_milli(), 1);
        assert_eq!(Quantity::parse("250m").unwrap().ceil_milli(), 250);
    }

    #[test]
    fn display_is_canonical() {
        assert_eq!(Quantity::parse("1Ki").unwrap().to_string(), "1024");
        assert_eq!(Quantity::parse("0.1").unwrap().to_string(), "100m");
        assert_eq!(Quantity::parse("1u").unwrap().to_string(), "1u");
        assert_eq!(Quantity::parse("3n").unwrap().to_string(), "3n");
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = Quantity::parse(&s);
        }

        #[test]
        fn never_panics_on_quantity_like(s in "[+-]?[0-9]{0,40}(\\.[0-9]{0,40})?([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]{1,4})?") {
            if let Ok(q) = Quantity::parse(&s) {
                let _ = q.ceil_units();
                let _ = q.ceil_milli();
            }
        }

        #[test]
        fn display_round_trips(n in -(1i128 << 90)..(1i128 << 90)) {
            let q = Quantity::from_nanos(n);
            prop_assert_eq!(Quantity::parse(&q.to_string()).unwrap(), q);
        }

        #[test]
        fn integers_round_trip(n in any::<i64>()) {
            let q = Quantity::parse(&n.to_string()).unwrap();
            prop_assert_eq!(q.as_integer(), Some(n as i128));
        }
    }
}
