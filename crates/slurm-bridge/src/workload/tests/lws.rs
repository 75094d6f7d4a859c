//! LeaderWorkerSet groups translated.

use super::*;

pub(super) fn lws_pod(name: &str, ns: &str, group: &str, extra: &str) -> String {
    pod(
        name,
        &format!(
            "  labels: {{leaderworkerset.sigs.k8s.io/name: foo, leaderworkerset.sigs.k8s.io/group-index: \"1\", leaderworkerset.sigs.k8s.io/group-key: {group}{extra}}}\n{}",
            owned_by("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "foo")
        ),
        "",
    )
    .replace("namespace: ns", &format!("namespace: {ns}"))
}

pub(super) fn lws(size: u32) -> String {
    object(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "foo",
        &annotate(&[(key::ACCOUNT, "lws")]),
        &format!(
            "spec:\n  leaderWorkerTemplate:\n    size: {size}\n    workerTemplate: {{spec: {{containers: [{{name: c}}]}}}}\n"
        ),
    )
}

#[test]
fn lws_table() {
    // LWS missing → error
    assert!(
        run(&reader(&lws_pod("a", "ns", "k1", "")), "a")
            .unwrap_err()
            .to_string()
            .contains("LeaderWorkerSet ns/foo")
    );
    // enough pods
    let yaml = lws_pod("a", "ns", "k1", "")
        + &lws_pod("b", "ns", "k1", "")
        + &lws_pod("c", "ns", "k2", "")
        + &lws(2);
    let t = run(&reader(&yaml), "a").unwrap();
    assert_eq!(t.group_key, "lws/ns/foo/1");
    assert_eq!(t.ir.job.job_name.as_deref(), Some("foo-1"));
    assert_eq!(
        (
            t.ir.job.min_nodes,
            t.ir.job.max_nodes,
            t.ir.job.tasks_per_node
        ),
        (Some(2), Some(2), Some(1))
    );
    assert_eq!(t.ir.pod_names(), vec!["ns/a", "ns/b"]);
    assert_eq!(t.ir.job.account.as_deref(), Some("lws"));
    assert_eq!(t.gang, GangStatus::Complete);
    // too few pods, without and with job id
    let t = run(&reader(&(lws_pod("a", "ns", "k1", "") + &lws(2))), "a").unwrap();
    assert_eq!(
        t.gang,
        GangStatus::Incomplete {
            ready: 1,
            required: 2,
            job_id: None
        }
    );
    let t = run(
        &reader(
            &(lws_pod(
                "a",
                "ns",
                "k1",
                ", scheduler.slinky.slurm.net/slurm-jobid: \"3\"",
            ) + &lws(2)),
        ),
        "a",
    )
    .unwrap();
    assert_eq!(
        t.gang.message(),
        "not enough pending pods for created external job"
    );
    // quirk 4 fixed: same group key in another namespace does not join
    let t = run(
        &reader(&(lws_pod("a", "ns", "k1", "") + &lws_pod("z", "other", "k1", "") + &lws(2))),
        "a",
    )
    .unwrap();
    assert_eq!(t.ir.pod_names(), vec!["ns/a"]);
    // list failure → error
    let mut rd = reader(&(lws_pod("a", "ns", "k1", "") + &lws(2)));
    rd.list_error = Some(ReadError::Other {
        object: "pods".into(),
        message: "boom".into(),
    });
    assert!(run(&rd, "a").is_err());
}
