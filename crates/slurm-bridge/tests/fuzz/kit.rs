//! The fuzz kit: a corpus on disk, a mutator over it, and a seeded proptest runner that counts
//! executions. Stable toolchain only (proptest), so `cargo test` runs every target in CI.
//!
//! Knobs (environment): `FUZZ_CASES` generated inputs per target (default 400, a few seconds),
//! `FUZZ_SEED` the run's seed (default: a fresh one, printed so a failure reproduces).

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Generated inputs per target when `FUZZ_CASES` is not set.
const DEFAULT_CASES: u32 = 400;

/// Inputs per target: `FUZZ_CASES`, else the default.
pub fn cases() -> u32 {
    match std::env::var("FUZZ_CASES") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("FUZZ_CASES={v:?} is not a whole number of cases")),
        Err(_) => DEFAULT_CASES,
    }
}

/// The run's seed: `FUZZ_SEED`, else derived from the clock.
pub fn seed() -> u64 {
    match std::env::var("FUZZ_SEED") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("FUZZ_SEED={v:?} is not a whole number")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

/// The corpus directory of `target`: `tests/fuzz/corpus/<target>/`.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/corpus")
        .join(target)
}

/// Every file of a directory (sorted by name), as bytes. A missing or empty corpus is a
/// failure: each target ships with one.
pub fn read_dir(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file() && p.extension().is_none_or(|x| x != "md"))
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "corpus {} is empty", dir.display());
    entries
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read corpus file"))
        })
        .collect()
}

/// One mutation of a byte string.
#[derive(Debug, Clone)]
enum Mutation {
    /// Remove `len` bytes at `at`.
    Delete { at: usize, len: usize },
    /// Insert bytes at `at`.
    Insert { at: usize, bytes: Vec<u8> },
    /// Insert a token of the target's dictionary at `at`.
    Token { at: usize, token: usize },
    /// Overwrite one byte.
    Replace { at: usize, byte: u8 },
    /// Copy `len` bytes from `from` to `at` (repeats structure: nesting, long lists).
    Duplicate { from: usize, len: usize, at: usize },
    /// Insert a dictionary token `times` times at `at` (deep nesting, huge values).
    Repeat {
        at: usize,
        token: usize,
        times: usize,
    },
}

fn apply(input: &[u8], muts: &[Mutation], dict: &[&str]) -> Vec<u8> {
    let mut v = input.to_vec();
    for m in muts {
        let n = v.len();
        let pos = |p: usize| if n == 0 { 0 } else { p % (n + 1) };
        match m {
            Mutation::Delete { at, len } if n > 0 => {
                let a = at % n;
                let b = (a + len).min(n);
                v.drain(a..b);
            }
            Mutation::Delete { .. } => {}
            Mutation::Insert { at, bytes } => {
                let a = pos(*at);
                v.splice(a..a, bytes.iter().copied());
            }
            Mutation::Token { at, token } if !dict.is_empty() => {
                let a = pos(*at);
                v.splice(a..a, dict[token % dict.len()].bytes());
            }
            Mutation::Token { .. } => {}
            Mutation::Replace { at, byte } if n > 0 => v[at % n] = *byte,
            Mutation::Replace { .. } => {}
            Mutation::Duplicate { from, len, at } if n > 0 => {
                let a = from % n;
                let b = (a + len).min(n);
                let piece: Vec<u8> = v[a..b].to_vec();
                let at = pos(*at);
                v.splice(at..at, piece);
            }
            Mutation::Duplicate { .. } => {}
            Mutation::Repeat { at, token, times } if !dict.is_empty() => {
                let a = pos(*at);
                let piece = dict[token % dict.len()].repeat(*times);
                v.splice(a..a, piece.bytes());
            }
            Mutation::Repeat { .. } => {}
        }
    }
    v
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => (any::<usize>(), 1usize..8).prop_map(|(at, len)| Mutation::Delete { at, len }),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..4))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (any::<usize>(), proptest::collection::vec(32u8..127, 1..6))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        3 => (any::<usize>(), any::<usize>()).prop_map(|(at, token)| Mutation::Token { at, token }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Replace { at, byte }),
        1 => (any::<usize>(), 1usize..64, any::<usize>())
            .prop_map(|(from, len, at)| Mutation::Duplicate { from, len, at }),
        1 => (any::<usize>(), any::<usize>(), prop_oneof![2usize..64, 1000usize..20_000])
            .prop_map(|(at, token, times)| Mutation::Repeat { at, token, times }),
    ]
}

/// Inputs for a target: corpus entries with up to 8 mutations (most inputs), splices of two
/// entries, dictionary tokens strung together, and arbitrary bytes.
pub fn inputs(
    corpus: Vec<Vec<u8>>,
    dict: &'static [&'static str],
) -> impl Strategy<Value = Vec<u8>> {
    let n = corpus.len();
    let c1 = corpus.clone();
    let c2 = corpus;
    prop_oneof![
        6 => (0..n, proptest::collection::vec(mutation(), 0..8))
            .prop_map(move |(i, muts)| apply(&c1[i], &muts, dict)),
        1 => (0..n, 0..n, any::<usize>(), any::<usize>()).prop_map(move |(i, j, a, b)| {
            let (x, y) = (&c2[i], &c2[j]);
            let (a, b) = (a % (x.len() + 1), b % (y.len() + 1));
            [&x[..a], &y[b..]].concat()
        }),
        1 => proptest::collection::vec(0..dict.len().max(1), 0..12).prop_map(move |ts| {
            ts.iter().filter_map(|t| dict.get(*t)).flat_map(|t| t.bytes()).collect()
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

/// Executions of one target's run, printed at its end.
pub struct Run {
    pub execs: AtomicU64,
}

impl Run {
    pub fn new() -> Run {
        Run {
            execs: AtomicU64::new(0),
        }
    }

    /// One execution of the target on `input`.
    pub fn exec<T>(&self, f: impl FnOnce() -> T) -> T {
        self.execs.fetch_add(1, Ordering::Relaxed);
        f()
    }
}

/// Runs `check` on every corpus file of `target` (each must pass), then on `cases()` generated
/// inputs from `strategy`, seeded with `seed()`; prints the executions. On a failure proptest
/// shrinks the input and the panic names it with the seed.
pub fn fuzz<S: Strategy>(
    target: &'static str,
    corpus: &[(String, Vec<u8>)],
    replay: impl Fn(&[u8]) -> Result<(), TestCaseError>,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let run = Run::new();
    for (name, bytes) in corpus {
        if let Err(e) = run.exec(|| replay(bytes)) {
            panic!("fuzz {target}: corpus file {name} fails: {e}");
        }
    }
    let seed = seed();
    let cases = cases();
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 4096,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let result = runner.run(&strategy, |v| run.exec(|| check(v)));
    let execs = run.execs.load(Ordering::Relaxed);
    println!(
        "fuzz {target}: {execs} executions ({} corpus files, {cases} cases, FUZZ_SEED={seed})",
        corpus.len()
    );
    if let Err(e) = result {
        panic!("fuzz {target} (FUZZ_SEED={seed}): {e}");
    }
}

/// Fuzzes a target on bytes: every file of its corpus (`corpus_dir(target)`) replayed, then
/// generated inputs mutated from it with `dict` (see [`inputs`]).
pub fn fuzz_bytes(
    target: &'static str,
    dict: &'static [&'static str],
    check: impl Fn(&[u8]) -> Result<(), TestCaseError>,
) {
    fuzz_corpus(target, read_dir(&corpus_dir(target)), dict, check)
}

/// As [`fuzz_bytes`], on the given corpus.
pub fn fuzz_corpus(
    target: &'static str,
    corpus: Vec<(String, Vec<u8>)>,
    dict: &'static [&'static str],
    check: impl Fn(&[u8]) -> Result<(), TestCaseError>,
) {
    let seeds = corpus.iter().map(|(_, b)| b.clone()).collect();
    fuzz(target, &corpus, &check, inputs(seeds, dict), |b| check(&b));
}

/// Text of bytes, lossily (most parsers take `&str`; invalid UTF-8 becomes U+FFFD).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
