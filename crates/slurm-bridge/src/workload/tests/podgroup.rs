//! Built-in PodGroups (scheduling.k8s.io): one job for the group, the gang checks, which
//! annotations win.

use super::*;

fn pg_pod(name: &str, group: &str, meta: &str) -> String {
    pod(
        name,
        meta,
        &format!("  schedulingGroup: {{podGroupName: {group}}}\n"),
    )
}

pub(super) fn podgroup(name: &str, meta: &str, policy: &str, workload: Option<&str>) -> String {
    let tref = workload
        .map(|w| format!("  podGroupTemplateRef: {{workload: {{workloadName: {w}, podGroupTemplateName: t}}}}\n"))
        .unwrap_or_default();
    object(
        "scheduling.k8s.io/v1alpha2",
        "PodGroup",
        name,
        meta,
        &format!("spec:\n  schedulingPolicy: {policy}\n{tref}"),
    )
}

fn workload(name: &str, meta: &str) -> String {
    object(
        "scheduling.k8s.io/v1alpha2",
        "Workload",
        name,
        meta,
        "spec:\n  podGroupTemplates: [{name: t, schedulingPolicy: {basic: {}}}]\n",
    )
}

#[test]
fn podgroup_two_pods_one_job() {
    let yaml = pg_pod("a", "pg", "")
        + &pg_pod("b", "pg", "")
        + &pg_pod("c", "other", "")
        + &podgroup("pg", "", "{gang: {minCount: 2}}", None);
    let t = run(&reader(&yaml), "b").unwrap();
    assert_eq!(t.group_key, "podgroup/ns/pg");
    assert_eq!(t.ir.pod_names(), vec!["ns/a", "ns/b"]);
    assert_eq!(
        (
            t.ir.job.min_nodes,
            t.ir.job.max_nodes,
            t.ir.job.tasks_per_node
        ),
        (Some(2), Some(2), Some(1))
    );
    assert_eq!(t.ir.job.job_name.as_deref(), Some("pg"));
    assert_eq!(t.gang, GangStatus::Complete);
}

#[test]
fn podgroup_gang_checks() {
    let pg = |policy: &str| podgroup("pg", "", policy, None);
    // short gang, no job yet → insufficient
    let t = run(
        &reader(&(pg_pod("a", "pg", "") + &pg("{gang: {minCount: 3}}"))),
        "a",
    )
    .unwrap();
    assert_eq!(
        t.gang,
        GangStatus::Incomplete {
            ready: 1,
            required: 3,
            job_id: None
        }
    );
    assert_eq!(
        t.gang.message(),
        "not enough pending pods to create external job"
    );
    // short gang with a job id → invalid
    let labelled = "  labels: {scheduler.slinky.slurm.net/slurm-jobid: \"7\"}\n";
    let t = run(
        &reader(
            &(pg_pod("a", "pg", labelled) + &pg_pod("b", "pg", "") + &pg("{gang: {minCount: 2}}")),
        ),
        "a",
    )
    .unwrap();
    assert_eq!(
        t.gang,
        GangStatus::Incomplete {
            ready: 1,
            required: 2,
            job_id: Some(7)
        }
    );
    assert_eq!(
        t.gang.message(),
        "not enough pending pods for created external job"
    );
    // basic policy → complete
    let t = run(&reader(&(pg_pod("a", "pg", "") + &pg("{basic: {}}"))), "a").unwrap();
    assert_eq!(t.gang, GangStatus::Complete);
    // missing PodGroup → error
    assert!(
        run(&reader(&pg_pod("a", "pg", "")), "a")
            .unwrap_err()
            .to_string()
            .contains("PodGroup ns/pg")
    );
}

#[test]
fn podgroup_annotation_precedence() {
    let tl = |v: &str| annotate(&[(key::TIMELIMIT, v)]);
    let job_owner = owned_by("batch/v1", "Job", "j");
    let cases: Vec<(&str, String, Option<u32>, Option<&str>)> = vec![
        (
            "workload overrides job and podgroup",
            pg_pod("a", "pg", &job_owner)
                + &job("j", &tl("5"))
                + &podgroup("pg", &tl("10"), "{basic: {}}", Some("wl"))
                + &workload("wl", &tl("30")),
            Some(30),
            Some("pg"),
        ),
        (
            "job overrides podgroup without workload ref",
            pg_pod("a", "pg", &job_owner)
                + &job("j", &tl("5"))
                + &podgroup("pg", &tl("10"), "{basic: {}}", None),
            Some(5),
            Some("pg"),
        ),
        (
            "podgroup only",
            pg_pod("a", "pg", "") + &podgroup("pg", &tl("10"), "{basic: {}}", None),
            Some(10),
            Some("pg"),
        ),
        (
            "missing workload: job over podgroup",
            pg_pod("a", "pg", &job_owner)
                + &job("j", &tl("5"))
                + &podgroup("pg", &tl("10"), "{basic: {}}", Some("gone")),
            Some(5),
            Some("pg"),
        ),
        (
            "workload job-name beats podgroup name and annotation",
            pg_pod("a", "pg", "")
                + &podgroup(
                    "pg",
                    &annotate(&[(key::JOB_NAME, "pg-ann")]),
                    "{basic: {}}",
                    Some("wl"),
                )
                + &workload("wl", &annotate(&[(key::JOB_NAME, "wl-name")])),
            None,
            Some("wl-name"),
        ),
        (
            "quirk fixed: a bare pod's own annotations are not a layer",
            pg_pod("a", "pg", &tl("99")) + &podgroup("pg", "", "{basic: {}}", None),
            None,
            Some("pg"),
        ),
    ];
    for (name, yaml, want_tl, want_name) in cases {
        let t = run(&reader(&yaml), "a").unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.ir.job.time_limit_minutes, want_tl, "{name}");
        assert_eq!(t.ir.job.job_name.as_deref(), want_name, "{name}");
    }
    // Non-conflicting keys from each layer combine.
    let yaml = pg_pod("a", "pg", &job_owner)
        + &job("j", &annotate(&[(key::QOS, "q")]))
        + &podgroup(
            "pg",
            &annotate(&[(key::ACCOUNT, "acct")]),
            "{basic: {}}",
            Some("wl"),
        )
        + &workload("wl", &annotate(&[(key::PARTITION, "part")]));
    let t = run(&reader(&yaml), "a").unwrap();
    assert_eq!(
        (
            t.ir.job.qos.as_deref(),
            t.ir.job.account.as_deref(),
            t.ir.job.partition.as_deref()
        ),
        (Some("q"), Some("acct"), Some("part"))
    );
    // A Workload read failure other than NotFound is an error.
    let mut rd = reader(
        &(pg_pod("a", "pg", "")
            + &podgroup("pg", "", "{basic: {}}", Some("wl"))
            + &workload("wl", "")),
    );
    let wl = r("scheduling.k8s.io/v1alpha2", "Workload", "wl");
    rd.errors.insert(wl.clone(), forbidden(&wl));
    assert!(run(&rd, "a").is_err());
}
