//! Enum values slurmrestd sent that this client does not know (a newer Slurm's state or flag):
//! each distinct value is logged once per process, not once per job per poll, then kept as
//! `Other` by the decoder.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// Distinct unknown values remembered; past this many, further new ones are not logged (a
/// broken or hostile server cannot grow the set without bound).
const MAX_REMEMBERED: usize = 256;
/// Longest value kept and logged, in characters.
const MAX_VALUE_CHARS: usize = 64;

fn seen() -> &'static Mutex<HashSet<(&'static str, String)>> {
    static SEEN: OnceLock<Mutex<HashSet<(&'static str, String)>>> = OnceLock::new();
    SEEN.get_or_init(Mutex::default)
}

/// Notes an unknown `value` of enum `kind` (e.g. `JobState`); logs a warning the first time.
pub(crate) fn note(kind: &'static str, value: &str) {
    let value: String = value.chars().take(MAX_VALUE_CHARS).collect();
    let mut set = seen().lock().unwrap_or_else(|e| e.into_inner());
    if set.len() >= MAX_REMEMBERED || set.contains(&(kind, value.clone())) {
        return;
    }
    set.insert((kind, value.clone()));
    drop(set);
    tracing::warn!(
        kind,
        value = %value,
        "slurmrestd sent a value this client does not know (from a newer Slurm?); kept as Other, logged once"
    );
}

/// The unknown enum values decoded so far in this process, as `(enum, value)`, sorted.
pub fn unknown_values() -> Vec<(&'static str, String)> {
    let set = seen().lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<_> = set.iter().cloned().collect();
    v.sort();
    v
}
