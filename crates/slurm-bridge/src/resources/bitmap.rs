//! Slurm's `core_bitmap` (reference §5.10.3): a hex string, `0x` optional, of any width; bit `i`
//! (least significant bit = 0) set means abstract core `i` is allocated. Pure, no I/O.

use std::collections::BTreeSet;

/// Why a core bitmap does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("core bitmap {input:?} is not a hex number (e.g. 0x0F): {reason}")]
pub struct BitmapError {
    /// The text Slurm sent.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The abstract cores set in a core bitmap, e.g. `0x0F` → {0, 1, 2, 3}, `0x20000000000000001` →
/// {0, 65}. `""` and `"0x"` are the empty set. Any width: a bitmap longer than 64 bits is read
/// digit by digit, never through a fixed-width integer.
pub fn parse_core_bitmap(input: &str) -> Result<BTreeSet<usize>, BitmapError> {
    let s = input.trim();
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let mut cores = BTreeSet::new();
    for (k, c) in digits.chars().rev().enumerate() {
        let v = c.to_digit(16).ok_or_else(|| BitmapError {
            input: input.to_string(),
            reason: format!("{c:?} is not a hex digit"),
        })?;
        for b in 0..4 {
            if v & (1 << b) != 0 {
                cores.insert(k * 4 + b);
            }
        }
    }
    Ok(cores)
}

/// The bitmap of a set of abstract cores, as Slurm writes it: `0x` and the hex number without
/// leading zeros (`{0}` → `0x1`, `{0, 65}` → `0x20000000000000001`, `{}` → `0x`).
pub fn format_core_bitmap(cores: &BTreeSet<usize>) -> String {
    let Some(&top) = cores.iter().next_back() else {
        return "0x".to_string();
    };
    let mut out = String::from("0x");
    for k in (0..=top / 4).rev() {
        let v: u32 = (0..4)
            .filter(|b| cores.contains(&(k * 4 + b)))
            .map(|b| 1 << b)
            .sum();
        out.push(char::from_digit(v, 16).unwrap_or('0'));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(v: &[usize]) -> BTreeSet<usize> {
        v.iter().copied().collect()
    }

    #[test]
    fn spec_examples() {
        assert_eq!(parse_core_bitmap("0x").unwrap(), set(&[]));
        assert_eq!(parse_core_bitmap("").unwrap(), set(&[]));
        assert_eq!(parse_core_bitmap("0x1").unwrap(), set(&[0]));
        assert_eq!(parse_core_bitmap("0x0").unwrap(), set(&[]));
        assert_eq!(parse_core_bitmap("0x0F").unwrap(), set(&[0, 1, 2, 3]));
        assert_eq!(parse_core_bitmap("0xF0").unwrap(), set(&[4, 5, 6, 7]));
        assert_eq!(
            parse_core_bitmap("0xFF").unwrap(),
            set(&[0, 1, 2, 3, 4, 5, 6, 7])
        );
        assert_eq!(parse_core_bitmap("0x0001").unwrap(), set(&[0]));
        assert_eq!(parse_core_bitmap("F").unwrap(), set(&[0, 1, 2, 3]));
        assert_eq!(
            parse_core_bitmap("0x20000000000000001").unwrap(),
            set(&[0, 65])
        );
        assert!(parse_core_bitmap("bad data").is_err());
        assert!(parse_core_bitmap("0xG1").is_err());
        assert_eq!(format_core_bitmap(&set(&[])), "0x");
        assert_eq!(format_core_bitmap(&set(&[0])), "0x1");
        assert_eq!(format_core_bitmap(&set(&[0, 65])), "0x20000000000000001");
    }

    proptest! {
        /// Any set of cores, of any width, round-trips through its bitmap text.
        #[test]
        fn round_trips(cores in proptest::collection::btree_set(0usize..600, 0..40)) {
            let text = format_core_bitmap(&cores);
            prop_assert_eq!(parse_core_bitmap(&text).unwrap(), cores.clone());
            // Without the prefix, upper case, and with leading zeros: the same set.
            let digits = text.trim_start_matches("0x");
            prop_assert_eq!(parse_core_bitmap(digits).unwrap(), cores.clone());
            let padded = format!("0x0000{}", digits.to_uppercase());
            prop_assert_eq!(parse_core_bitmap(&padded).unwrap(), cores);
        }

        /// Up to 128 bits the bitmap is the number itself.
        #[test]
        fn is_the_number(n in any::<u128>(), prefix in any::<bool>(), width in 0usize..40) {
            let text = format!("{}{n:0width$x}", if prefix { "0x" } else { "" });
            let want: BTreeSet<usize> = (0..128).filter(|b| n & (1u128 << b) != 0).collect();
            prop_assert_eq!(parse_core_bitmap(&text).unwrap(), want);
        }

        /// Anything that is not hex is refused, never misread.
        #[test]
        fn refuses_non_hex(s in "0x[0-9a-f]{0,4}[g-zG-Z,-][0-9a-f]{0,4}") {
            prop_assert!(parse_core_bitmap(&s).is_err());
        }
    }
}
