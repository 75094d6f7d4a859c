//! Issue 23: a PodGroup's owner annotations, the owner fallback rule, the gang timeout from
//! scheduleTimeoutSeconds.

use super::coscheduling::{cos_pg, cos_pod};
use super::*;

/// A coscheduling PodGroup `cg` owned by a TrainJob `tj`, with `meta` lines of its own.
fn owned_pg(meta: &str, spec: &str) -> String {
    object(
        "scheduling.x-k8s.io/v1alpha1",
        "PodGroup",
        "cg",
        &(owned_by("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj") + meta),
        &format!("spec: {spec}\n"),
    )
}

fn trainjob(meta: &str) -> String {
    object(
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        "tj",
        meta,
        "spec: {}\n",
    )
}

#[test]
fn podgroup_owner_annotations_apply_when_the_podgroup_has_none() {
    let tj = trainjob(&annotate(&[
        (key::PARTITION, "debug"),
        (key::TIMELIMIT, "5"),
    ]));
    // The PodGroup has none: the TrainJob's apply, and the source says so.
    let t = run(
        &reader(&(cos_pod("a", "ns", "cg", "") + &owned_pg("", "{minMember: 1}") + &tj)),
        "a",
    )
    .unwrap();
    assert_eq!(t.ir.job.partition.as_deref(), Some("debug"));
    assert_eq!(t.ir.job.time_limit_minutes, Some(5));
    // The PodGroup has one: only its own apply (no key-by-key mixing).
    let own = annotate(&[(key::PARTITION, "batch")]);
    let t = run(
        &reader(&(cos_pod("a", "ns", "cg", "") + &owned_pg(&own, "{minMember: 1}") + &tj)),
        "a",
    )
    .unwrap();
    assert_eq!(t.ir.job.partition.as_deref(), Some("batch"));
    assert_eq!(t.ir.job.time_limit_minutes, None);
    // Owner gone or forbidden: nothing borrowed, no error.
    let yaml = cos_pod("a", "ns", "cg", "") + &owned_pg("", "{minMember: 1}");
    assert_eq!(run(&reader(&yaml), "a").unwrap().ir.job.partition, None);
    let mut rd = reader(&(yaml.clone() + &tj));
    let tj_ref = r("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj");
    rd.errors.insert(tj_ref.clone(), forbidden(&tj_ref));
    assert_eq!(run(&rd, "a").unwrap().ir.job.partition, None);
    // Any other read failure is an error, not a silent fallback.
    rd.errors.insert(
        tj_ref.clone(),
        ReadError::Other {
            object: tj_ref.to_string(),
            message: "boom".into(),
        },
    );
    assert!(run(&rd, "a").unwrap_err().to_string().contains("boom"));
    // A bad owner value is reported against the owner.
    let bad = trainjob(&annotate(&[(key::TIMELIMIT, "soon")]));
    let err = run(
        &reader(&(cos_pod("a", "ns", "cg", "") + &owned_pg("", "{minMember: 1}") + &bad)),
        "a",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("TrainJob") && err.contains("soon"), "{err}");
}

#[test]
fn owner_fallback_rule() {
    use crate::workload::kinds::with_owner_fallback;
    let m = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let owner = m(&[(key::PARTITION, "o"), ("other/x", "y")]);
    let no_slurm_keys = m(&[("other/x", "y")]);
    // (own, owner, expected keys, source mentions the owner)
    /// (own, owner, expected keys, source mentions the owner)
    type Case<'a> = (
        BTreeMap<String, String>,
        Option<&'a BTreeMap<String, String>>,
        Vec<&'a str>,
        bool,
    );
    let cases: Vec<Case> = vec![
        (m(&[]), Some(&owner), vec![key::PARTITION], true),
        (
            m(&[("app", "v")]),
            Some(&owner),
            vec!["app", key::PARTITION],
            true,
        ),
        (
            m(&[(key::ACCOUNT, "a")]),
            Some(&owner),
            vec![key::ACCOUNT],
            false,
        ),
        (m(&[]), None, vec![], false),
        (m(&[]), Some(&no_slurm_keys), vec![], false),
    ];
    for (own, theirs, keys, borrowed) in cases {
        let (out, source) =
            with_owner_fallback(own, "pg".into(), theirs.map(|t| (t, "tj".to_string())));
        assert_eq!(out.keys().map(String::as_str).collect::<Vec<_>>(), keys);
        assert_eq!(source.contains("owner tj"), borrowed, "{source}");
    }
}

#[test]
fn gang_timeout_rule() {
    use crate::workload::GangTimeout;
    assert_eq!(GangTimeout::from_spec(None, [10]), None);
    assert_eq!(GangTimeout::from_spec(Some(0), [10]), None);
    assert_eq!(GangTimeout::from_spec(Some(-5), [10]), None);
    assert_eq!(GangTimeout::from_spec(Some(30), []), None);
    let t = GangTimeout::from_spec(Some(30), [100, 90, 120]).unwrap();
    assert_eq!(
        t,
        GangTimeout {
            seconds: 30,
            since: 90
        }
    );
    // (now, remaining, expired)
    for (now, remaining, expired) in [
        (90, 30, false),
        (119, 1, false),
        (120, 0, true),
        (500, 0, true),
    ] {
        assert_eq!(t.remaining(now), remaining, "now {now}");
        assert_eq!(t.expired(now), expired, "now {now}");
    }
}

#[test]
fn coscheduling_schedule_timeout_is_carried_from_the_podgroup() {
    let created = "  creationTimestamp: \"2026-12-01T10:00:00Z\"\n";
    let p = pod(
        "a",
        &format!("  labels: {{scheduling.x-k8s.io/pod-group: cg}}\n{created}"),
        "",
    );
    let t = run(
        &reader(&(p.clone() + &cos_pg("{minMember: 2, scheduleTimeoutSeconds: 60}", None))),
        "a",
    )
    .unwrap();
    let timeout = t.gang_timeout.unwrap();
    assert_eq!(timeout.seconds, 60);
    assert_eq!(timeout.since, 1_796_119_200);
    assert!(!t.gang.is_complete());
    let t = run(&reader(&(p + &cos_pg("{minMember: 2}", None))), "a").unwrap();
    assert_eq!(t.gang_timeout, None);
}
