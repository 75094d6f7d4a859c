//! Linux CPU lists (`0-3,8,10-11`), as cpuset.cpus, `Cpus_allowed_list` and sysfs write them.

use std::collections::BTreeSet;

/// A CPU list that is not of the form `N`, `N-M`, joined by commas.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "CPU list {input:?}: {reason} (expected CPU numbers and ranges joined by commas, e.g. 0-3,8)"
)]
pub struct CpuListError {
    pub input: String,
    pub reason: String,
}

/// Largest CPU number accepted: more than any machine has, small enough that a typo such as
/// `0-4000000000` cannot make a huge set.
const MAX_CPU: u32 = 65_535;

/// The CPUs of a list; the empty string is the empty set.
pub fn parse_cpu_list(input: &str) -> Result<BTreeSet<u32>, CpuListError> {
    let err = |reason: String| CpuListError {
        input: input.to_string(),
        reason,
    };
    let num = |s: &str| -> Result<u32, CpuListError> {
        let n: u32 = s
            .trim()
            .parse()
            .map_err(|_| err(format!("{s:?} is not a CPU number")))?;
        if n > MAX_CPU {
            return Err(err(format!("CPU {n} is beyond {MAX_CPU}")));
        }
        Ok(n)
    };
    let mut out = BTreeSet::new();
    for part in input.trim().split(',').filter(|p| !p.trim().is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(err(format!("range {part:?} runs backwards")));
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(num(part)?);
            }
        }
    }
    Ok(out)
}

/// The shortest list of a set of CPUs, ranges where they run on (`{0,1,2,5}` is `0-2,5`).
pub fn format_cpu_list<'a>(cpus: impl IntoIterator<Item = &'a u32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    let flush = |r: (u32, u32), parts: &mut Vec<String>| {
        parts.push(if r.0 == r.1 {
            r.0.to_string()
        } else {
            format!("{}-{}", r.0, r.1)
        })
    };
    let mut sorted: Vec<u32> = cpus.into_iter().copied().collect();
    sorted.sort_unstable();
    sorted.dedup();
    for c in sorted {
        run = match run {
            Some((a, b)) if c == b + 1 => Some((a, c)),
            Some(r) => {
                flush(r, &mut parts);
                Some((c, c))
            }
            None => Some((c, c)),
        };
    }
    if let Some(r) = run {
        flush(r, &mut parts);
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_formats_ranges() {
        assert_eq!(
            parse_cpu_list("0-2,5, 7-8\n").unwrap(),
            BTreeSet::from([0, 1, 2, 5, 7, 8])
        );
        assert_eq!(parse_cpu_list("").unwrap(), BTreeSet::new());
        assert_eq!(format_cpu_list(&[5, 0, 1, 2, 7, 8]), "0-2,5,7-8");
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(format_cpu_list(&[3]), "3");
    }

    #[test]
    fn bad_lists_say_what_is_wrong_and_what_is_accepted() {
        for (input, says) in [
            ("a", "not a CPU number"),
            ("3-1", "backwards"),
            ("0-99999999", "beyond"),
            ("1-", "not a CPU number"),
        ] {
            let e = parse_cpu_list(input).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("expected"), "{input}: {e}");
        }
    }

    proptest! {
        #[test]
        fn format_then_parse_is_the_identity(cpus in proptest::collection::btree_set(0u32..256, 0..40)) {
            prop_assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)).unwrap(), cpus);
        }
    }
}
