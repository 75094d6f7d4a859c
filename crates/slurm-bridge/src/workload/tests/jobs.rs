//! Jobs and JobSets translated, and the pod-level resources of quirk 14.

use super::*;

#[test]
fn job_table() {
    let pod_of_job = pod("p", &owned_by("batch/v1", "Job", "j"), "");
    let with_spec = |spec: &str| pod_of_job.clone() + &object("batch/v1", "Job", "j", "", spec);
    // Job missing → error.
    assert!(
        run(&reader(&pod_of_job), "p")
            .unwrap_err()
            .to_string()
            .contains("Job ns/j")
    );
    // Pod-level limits on the template (22 CPUs, 1Mi).
    let t = run(
        &reader(&with_spec(
            "spec:\n  template:\n    spec:\n      resources: {limits: {cpu: \"22\", memory: 1Mi}}\n      containers: [{name: c}]\n",
        )),
        "p",
    )
    .unwrap();
    assert_eq!(
        (
            t.ir.job.min_nodes,
            t.ir.job.cpus_per_task,
            t.ir.job.mem_per_node_mib
        ),
        (Some(1), Some(22), Some(1))
    );
    assert_eq!(t.ir.job.max_nodes, None);
    assert_eq!(t.group_key, "job/ns/j/p");
    // activeDeadlineSeconds 90 → 2 minutes; 0 → unset.
    let t = run(
        &reader(&with_spec(
            "spec:\n  activeDeadlineSeconds: 90\n  template: {spec: {containers: [{name: c}]}}\n",
        )),
        "p",
    )
    .unwrap();
    assert_eq!(t.ir.job.time_limit_minutes, Some(2));
    let t = run(
        &reader(&with_spec(
            "spec:\n  activeDeadlineSeconds: 0\n  template: {spec: {containers: [{name: c}]}}\n",
        )),
        "p",
    )
    .unwrap();
    assert_eq!(t.ir.job.time_limit_minutes, None);
}

#[test]
fn quirk14_job_pod_level_resources_without_limits_stay_unset() {
    let yaml = pod("p", &owned_by("batch/v1", "Job", "j"), "")
        + &object(
            "batch/v1",
            "Job",
            "j",
            "",
            "spec:\n  template:\n    spec:\n      resources: {requests: {cpu: \"0\"}}\n      containers: [{name: c}]\n",
        );
    let t = run(&reader(&yaml), "p").unwrap();
    assert_eq!(
        (t.ir.job.cpus_per_task, t.ir.job.mem_per_node_mib),
        (None, None)
    );
}

#[test]
fn jobset_table() {
    let p = pod(
        "p",
        &(owned_by("batch/v1", "Job", "js-w-0") + "  labels: {job-name: js-w-0}\n"),
        "",
    );
    let j = job(
        "js-w-0",
        &(owned_by("jobset.x-k8s.io/v1alpha2", "JobSet", "js") + &annotate(&[(key::QOS, "job")])),
    );
    let js = object(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        &annotate(&[(key::QOS, "jobset")]),
        "spec: {}\n",
    );
    // JobSet missing → error (the owner walk cannot read it).
    assert!(
        run(&reader(&(p.clone() + &j)), "p")
            .unwrap_err()
            .to_string()
            .contains("JobSet ns/js")
    );
    let t = run(&reader(&(p.clone() + &j + &js)), "p").unwrap();
    assert_eq!(t.ir.root, r("jobset.x-k8s.io/v1alpha2", "JobSet", "js"));
    assert_eq!(t.ir.job.min_nodes, Some(1));
    assert_eq!(
        t.ir.job.qos.as_deref(),
        Some("jobset"),
        "annotations come from the JobSet"
    );
    // Job named by the label missing → error.
    let p2 = pod(
        "p",
        &(owned_by("jobset.x-k8s.io/v1alpha2", "JobSet", "js") + "  labels: {job-name: gone}\n"),
        "",
    );
    assert!(
        run(&reader(&(p2 + &js)), "p")
            .unwrap_err()
            .to_string()
            .contains("Job ns/gone")
    );
}
