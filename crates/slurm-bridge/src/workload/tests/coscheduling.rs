//! Coscheduling PodGroups (scheduling.x-k8s.io): the table, read failures, and members being
//! deleted (issue 21).

use super::lws::{lws, lws_pod};
use super::*;

pub(super) fn cos_pod(name: &str, ns: &str, group: &str, extra: &str) -> String {
    pod(
        name,
        &format!("  labels: {{scheduling.x-k8s.io/pod-group: {group}{extra}}}\n"),
        "",
    )
    .replace("namespace: ns", &format!("namespace: {ns}"))
}

pub(super) fn cos_pg(spec: &str, phase: Option<&str>) -> String {
    let status = phase
        .map(|p| format!("status: {{phase: {p}}}\n"))
        .unwrap_or_default();
    object(
        "scheduling.x-k8s.io/v1alpha1",
        "PodGroup",
        "cg",
        "",
        &format!("spec: {spec}\n{status}"),
    )
}

#[test]
fn coscheduling_table() {
    // label without a PodGroup → the label is ignored (single-pod job)
    let t = run(&reader(&cos_pod("a", "ns", "cg", "")), "a").unwrap();
    assert_eq!(t.group_key, "pod/ns/a");
    // PodGroup with minMember 1 and minResources
    let t = run(
        &reader(
            &(cos_pod("a", "ns", "cg", "")
                + &cos_pg(
                    "{minMember: 1, minResources: {cpu: \"22\", memory: 1Mi}}",
                    None,
                )),
        ),
        "a",
    )
    .unwrap();
    assert_eq!(t.group_key, "coscheduling/ns/cg");
    assert_eq!(
        (
            t.ir.job.cpus_per_task,
            t.ir.job.mem_per_node_mib,
            t.ir.job.min_nodes,
            t.ir.job.max_nodes,
            t.ir.job.tasks_per_node
        ),
        (Some(22), Some(1), Some(1), Some(1), Some(1))
    );
    assert_eq!(t.ir.job.job_name, None);
    // quirk 4 fixed: a same-named group in another namespace does not join
    let t = run(
        &reader(
            &(cos_pod("a", "ns", "cg", "")
                + &cos_pod("b", "ns", "cg", "")
                + &cos_pod("x", "other", "cg", "")
                + &cos_pg("{minMember: 2}", None)),
        ),
        "a",
    )
    .unwrap();
    assert_eq!(t.ir.pod_names(), vec!["ns/a", "ns/b"]);
    assert_eq!(t.gang, GangStatus::Complete);
    // closed phases
    for phase in ["Running", "Unknown", "Failed", "Finished"] {
        let t = run(
            &reader(&(cos_pod("a", "ns", "cg", "") + &cos_pg("{minMember: 1}", Some(phase)))),
            "a",
        )
        .unwrap();
        assert_eq!(
            t.gang.message(),
            format!("PodGroup coscheduling status is {phase}")
        );
    }
    // not enough pods: without and with a job id label
    let t = run(
        &reader(&(cos_pod("a", "ns", "cg", "") + &cos_pg("{minMember: 2}", Some("Pending")))),
        "a",
    )
    .unwrap();
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
            &(cos_pod(
                "a",
                "ns",
                "cg",
                ", scheduler.slinky.slurm.net/slurm-jobid: \"9\"",
            ) + &cos_pg("{minMember: 2}", None)),
        ),
        "a",
    )
    .unwrap();
    assert_eq!(
        t.gang,
        GangStatus::Incomplete {
            ready: 1,
            required: 2,
            job_id: Some(9)
        }
    );
    // terminal pods do not count
    let done = cos_pod("b", "ns", "cg", "") + "status: {phase: Succeeded}\n---\n";
    let yaml = cos_pod("a", "ns", "cg", "")
        + &done.replace("---\nstatus", "status")
        + &cos_pg("{minMember: 2}", None);
    let t = run(&reader(&yaml), "a").unwrap();
    assert_eq!(t.ir.pod_names(), vec!["ns/a"]);
}

#[test]
fn coscheduling_read_failures() {
    let yaml = cos_pod("a", "ns", "cg", "") + &cos_pg("{minMember: 1}", None);
    let mut rd = reader(&yaml);
    rd.list_error = Some(ReadError::Other {
        object: "pods".into(),
        message: "boom".into(),
    });
    assert!(run(&rd, "a").unwrap_err().to_string().contains("boom"));
    // A read error other than NotFound is not silently ignored.
    let mut rd = reader(&yaml);
    let cg = r("scheduling.x-k8s.io/v1alpha1", "PodGroup", "cg");
    rd.errors.insert(
        cg.clone(),
        ReadError::Other {
            object: cg.to_string(),
            message: "503".into(),
        },
    );
    assert!(run(&rd, "a").unwrap_err().to_string().contains("503"));
    // An unserved kind is the same as no PodGroup.
    let mut rd = reader(&yaml);
    rd.errors.insert(
        cg.clone(),
        ReadError::NoKind {
            api_version: cg.api_version.clone(),
            kind: "PodGroup".into(),
        },
    );
    assert_eq!(run(&rd, "a").unwrap().group_key, "pod/ns/a");
}

/// Issue 21: a gang member being deleted (here held by another controller's finalizer) is no
/// member: it neither completes the gang nor gets labelled (Kubernetes refuses a new finalizer
/// on a pod being deleted, which failed every pass of the group).
#[test]
fn gang_members_being_deleted_do_not_count() {
    let deleting = |name: &str| {
        cos_pod(name, "ns", "cg", "").replace(
            "  namespace: ns\n",
            "  namespace: ns\n  deletionTimestamp: \"2026-12-01T00:00:00Z\"\n  finalizers: [example.com/keep]\n",
        )
    };
    let yaml = cos_pod("a", "ns", "cg", "") + &deleting("b") + &cos_pg("{minMember: 2}", None);
    let t = run(&reader(&yaml), "a").unwrap();
    assert_eq!(t.ir.pod_names(), vec!["ns/a"]);
    assert_eq!(
        t.gang,
        GangStatus::Incomplete {
            ready: 1,
            required: 2,
            job_id: None
        }
    );
    // Its replacement completes the gang without it.
    let yaml = yaml + &cos_pod("c", "ns", "cg", "");
    let t = run(&reader(&yaml), "a").unwrap();
    assert_eq!(t.ir.pod_names(), vec!["ns/a", "ns/c"]);
    assert_eq!(t.gang, GangStatus::Complete);
    // The same for a LeaderWorkerSet group.
    let yaml = lws_pod("a", "ns", "k1", "")
        + &lws_pod("b", "ns", "k1", "").replace(
            "  namespace: ns\n",
            "  namespace: ns\n  deletionTimestamp: \"2026-12-01T00:00:00Z\"\n  finalizers: [example.com/keep]\n",
        )
        + &lws(2);
    let t = run(&reader(&yaml), "a").unwrap();
    assert_eq!(t.ir.pod_names(), vec!["ns/a"]);
    assert!(matches!(t.gang, GangStatus::Incomplete { ready: 1, .. }));
}
