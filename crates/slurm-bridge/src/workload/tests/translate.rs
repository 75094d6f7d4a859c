//! Translation of a pod and its controllers: a bare pod's annotations, bad values named, an
//! unsupported controller above a Job, the supported workload below a readable ancestor, a
//! Deployment's pod.

use super::*;

#[test]
fn bare_pod_with_annotations() {
    let rd = reader(&pod(
        "p",
        &annotate(&[
            (key::ACCOUNT, "acct"),
            (key::GROUP_ID, "100"),
            (key::USER_ID, "1000"),
        ]),
        "",
    ));
    let t = run(&rd, "p").unwrap();
    assert_eq!(t.group_key, "pod/ns/p");
    assert_eq!(t.ir.root, r("v1", "Pod", "p"));
    assert_eq!(t.ir.pod_names(), vec!["ns/p"]);
    assert_eq!(t.ir.job.max_nodes, Some(1));
    assert_eq!(t.ir.job.tasks_per_node, Some(1));
    assert_eq!(t.ir.job.account.as_deref(), Some("acct"));
    assert_eq!(t.ir.job.group_id.as_deref(), Some("100"));
    assert_eq!(t.ir.job.user_id.as_deref(), Some("1000"));
    assert_eq!(t.gang, GangStatus::Complete);
}

#[test]
fn bad_annotation_is_an_error_naming_object_key_and_value() {
    let rd = reader(&pod("p", &annotate(&[(key::CPU_PER_TASK, "NaN")]), ""));
    let e = run(&rd, "p").unwrap_err().to_string();
    assert!(
        e.contains("Pod ns/p") && e.contains(key::CPU_PER_TASK) && e.contains("\"NaN\""),
        "{e}"
    );
}

#[test]
fn forbidden_unsupported_controller_above_job() {
    let yaml = pod("p", &owned_by("batch/v1", "Job", "j"), "")
        + &job(
            "j",
            &(owned_by("apps/v1", "Deployment", "dep") + &annotate(&[(key::ACCOUNT, "from-job")])),
        );
    let mut rd = reader(&yaml);
    let dep = r("apps/v1", "Deployment", "dep");
    rd.errors.insert(dep.clone(), forbidden(&dep));
    let t = run(&rd, "p").unwrap();
    assert_eq!(t.ir.root, r("batch/v1", "Job", "j"));
    assert_eq!(t.ir.job.min_nodes, Some(1));
    assert_eq!(t.ir.job.account.as_deref(), Some("from-job"));
}

#[test]
fn prefers_supported_workload_below_readable_ancestor() {
    let yaml = pod(
        "p",
        &(owned_by("batch/v1", "Job", "js-w-0") + "  labels: {job-name: js-w-0}\n"),
        "",
    ) + &job(
        "js-w-0",
        &owned_by("jobset.x-k8s.io/v1alpha2", "JobSet", "js"),
    ) + &object(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        &(owned_by("apps/v1", "Deployment", "dep") + &annotate(&[(key::ACCOUNT, "from-jobset")])),
        "spec: {}\n",
    ) + &object(
        "apps/v1",
        "Deployment",
        "dep",
        &annotate(&[(key::ACCOUNT, "from-deployment")]),
        "",
    );
    let t = run(&reader(&yaml), "p").unwrap();
    assert_eq!(t.ir.root, r("jobset.x-k8s.io/v1alpha2", "JobSet", "js"));
    assert_eq!(t.ir.job.account.as_deref(), Some("from-jobset"));
    assert_eq!(t.group_key, "job/ns/js-w-0/p");
}

#[test]
fn deployment_pod_uses_replicaset_annotations_not_the_pods() {
    let yaml = pod(
        "p",
        &(owned_by("apps/v1", "ReplicaSet", "rs") + &annotate(&[(key::QOS, "pod-qos")])),
        "",
    ) + &object(
        "apps/v1",
        "ReplicaSet",
        "rs",
        &annotate(&[(key::QOS, "rs-qos")]),
        "",
    );
    let t = run(&reader(&yaml), "p").unwrap();
    assert_eq!(t.ir.root, r("apps/v1", "ReplicaSet", "rs"));
    assert_eq!(t.ir.job.qos.as_deref(), Some("rs-qos"));
    assert_eq!(t.group_key, "pod/ns/p");
    assert_eq!(
        (t.ir.job.max_nodes, t.ir.job.tasks_per_node),
        (Some(1), Some(1))
    );
}
