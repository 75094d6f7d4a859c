//! Host list expansion and compression, including property tests.

use proptest::prelude::*;
use slurm_rest::hostlist::{compress, expand};

#[test]
fn expands_ranges_and_singles() {
    assert_eq!(
        expand("node-[1-3,7]").unwrap(),
        ["node-1", "node-2", "node-3", "node-7"]
    );
}

#[test]
fn expands_zero_padding() {
    let hosts = expand("n[001-010]").unwrap();
    assert_eq!(hosts.len(), 10);
    assert_eq!(hosts[0], "n001");
    assert_eq!(hosts[9], "n010");
}

#[test]
fn expands_several_groups_and_lists() {
    assert_eq!(
        expand("r[1-2]n[1-3]").unwrap(),
        ["r1n1", "r1n2", "r1n3", "r2n1", "r2n2", "r2n3"]
    );
    assert_eq!(expand("a,b[1-2],c[3]d").unwrap(), ["a", "b1", "b2", "c3d"]);
    assert_eq!(expand("").unwrap(), Vec::<String>::new());
    assert_eq!(expand("x[1-2]-y").unwrap(), ["x1-y", "x2-y"]);
}

#[test]
fn rejects_malformed_lists() {
    for bad in [
        "n[1-3",
        "n1-3]",
        "n[]",
        "n[3-1]",
        "n[a-b]",
        "n[1-]",
        "n[[1]]",
        "n[1,,2]",
        "n[0-99999999999999999999]",
        "n[0-999999999]",
    ] {
        let err = expand(bad).expect_err(bad);
        assert!(err.to_string().contains(bad), "{err}");
    }
}

/// Found by fuzzing (`cargo test -p slurm-bridge --test fuzz`, target hostlist): many large
/// bracket groups on one name were each expanded in memory before the host count was checked,
/// so `n[0-99999]` repeated 5,000 times tried to hold 500 million strings. Now refused at once.
#[test]
fn many_large_groups_are_refused_before_expansion() {
    let list = format!("n{}", "[0-99999]".repeat(5000));
    let err = expand(&list).unwrap_err();
    assert!(
        err.to_string().contains("expands to too many hosts"),
        "{err}"
    );
    // Groups whose product fits are still expanded.
    assert_eq!(expand("r[1-2]n[1-2]x[7]").unwrap().len(), 4);
}

/// Found by fuzzing (FUZZ_CASES=20000, target hostlist, 1.7 GB and growing): a million hosts
/// is within the count limit, but with a long literal prefix each name is long too, so the
/// names took gigabytes. The bytes of the names are bounded as well.
#[test]
fn a_million_long_names_are_refused_before_expansion() {
    let list = format!("{}[0-999999]", "n".repeat(1024));
    let err = expand(&list).unwrap_err();
    assert!(err.to_string().contains("MiB of names"), "{err}");
    // As many hosts with real (short) names still expand, and so do long names few enough.
    assert_eq!(expand("node-[0-999999]").unwrap().len(), 1_000_000);
    let long = format!("{}[1-3]", "n".repeat(1024));
    assert_eq!(expand(&long).unwrap().len(), 3);
}

#[test]
fn compresses_runs() {
    assert_eq!(
        compress(["node-1", "node-2", "node-3", "node-7"]),
        "node-[1-3,7]"
    );
    assert_eq!(compress((1..=10).map(|i| format!("n{i:03}"))), "n[001-010]");
    assert_eq!(compress(["a", "b1", "b2", "x"]), "a,b[1-2],x");
    assert_eq!(compress(["n1", "n01"]), "n1,n01");
    assert_eq!(compress(Vec::<String>::new()), "");
    assert_eq!(compress(["n9", "n10", "n11"]), "n[9-11]");
}

fn host() -> impl Strategy<Value = String> {
    ("[a-z][a-z-]{0,5}", prop::option::of(0u64..2000), 0usize..4).prop_map(|(p, n, w)| match n {
        Some(n) => format!("{p}{n:0w$}"),
        None => p,
    })
}

proptest! {
    #[test]
    fn compress_then_expand_round_trips(hosts in prop::collection::vec(host(), 0..40)) {
        let compressed = compress(&hosts);
        prop_assert_eq!(expand(&compressed).unwrap(), hosts);
    }

    #[test]
    fn expand_never_panics(s in "\\PC{0,40}") {
        let _ = expand(&s);
    }

    #[test]
    fn expand_never_panics_on_bracket_soup(s in "[a-z0-9,\\[\\]-]{0,30}") {
        if let Ok(hosts) = expand(&s) {
            // Whatever expands compresses to something that expands the same way.
            prop_assert_eq!(expand(&compress(&hosts)).unwrap(), hosts);
        }
    }
}
