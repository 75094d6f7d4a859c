//! Table tests of the translation against in-memory objects (reference §9.4).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;

use super::manifest_reader::ManifestReader;
use super::reader::{ObjectRef, ReadError, WorkloadReader};
use super::{GangStatus, TranslateError, Translation, translate};
use crate::wellknown::slurmjob as key;

/// A ManifestReader with injected read failures.
struct FakeReader {
    inner: ManifestReader,
    errors: HashMap<ObjectRef, ReadError>,
    list_error: Option<ReadError>,
}

impl WorkloadReader for FakeReader {
    async fn get(&self, object: &ObjectRef) -> Result<DynamicObject, ReadError> {
        if let Some(e) = self.errors.get(object) {
            return Err(e.clone());
        }
        self.inner.get(object).await
    }
    async fn list_pods(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Pod>, ReadError> {
        if let Some(e) = &self.list_error {
            return Err(e.clone());
        }
        self.inner.list_pods(namespace, labels).await
    }
}

fn reader(yaml: &str) -> FakeReader {
    let mut inner = ManifestReader::new();
    inner.load_yaml("test", yaml).unwrap();
    FakeReader {
        inner,
        errors: HashMap::new(),
        list_error: None,
    }
}

fn pod_of(r: &FakeReader, name: &str) -> Pod {
    r.inner
        .pods()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn run(r: &FakeReader, pod: &str) -> Result<Translation, TranslateError> {
    block(translate(r, &pod_of(r, pod)))
}

fn root_of(r: &FakeReader, pod: &str) -> Result<ObjectRef, TranslateError> {
    block(super::owner::root_owner(r, &pod_of(r, pod))).map(|o| o.object)
}

fn forbidden(o: &ObjectRef) -> ReadError {
    ReadError::Forbidden {
        object: o.clone(),
        message: "forbidden".into(),
    }
}

/// A pod YAML document; `extra_meta` and `extra_spec` are indented YAML lines.
fn pod(name: &str, extra_meta: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ns\n{extra_meta}spec:\n  containers:\n  - name: c\n    image: busybox\n{extra_spec}---\n"
    )
}

fn owned_by(api_version: &str, kind: &str, name: &str) -> String {
    format!(
        "  ownerReferences:\n  - apiVersion: {api_version}\n    kind: {kind}\n    name: {name}\n    controller: true\n"
    )
}

fn object(api_version: &str, kind: &str, name: &str, extra_meta: &str, body: &str) -> String {
    format!(
        "apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: ns\n{extra_meta}{body}---\n"
    )
}

const JOB_SPEC: &str =
    "spec:\n  template:\n    spec:\n      containers: [{name: c, image: busybox}]\n";

fn job(name: &str, extra_meta: &str) -> String {
    object("batch/v1", "Job", name, extra_meta, JOB_SPEC)
}

fn r(api_version: &str, kind: &str, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, "ns", name)
}

fn annotate(pairs: &[(&str, &str)]) -> String {
    let mut s = String::from("  annotations:\n");
    for (k, v) in pairs {
        s.push_str(&format!("    {k}: \"{v}\"\n"));
    }
    s
}

// ---- owner walk (owner_test) ----------------------------------------------------------

#[test]
fn owner_walk_table() {
    let rs = object("apps/v1", "ReplicaSet", "rs", "", "");
    let rs_dep = object(
        "apps/v1",
        "ReplicaSet",
        "rs",
        &owned_by("apps/v1", "Deployment", "dep"),
        "",
    );
    let dep = object("apps/v1", "Deployment", "dep", "", "");
    let cases: Vec<(String, Result<ObjectRef, &str>)> = vec![
        (pod("p", "", ""), Ok(r("v1", "Pod", "p"))),
        (
            pod("p", &owned_by("apps/v1", "ReplicaSet", "rs"), "") + &rs,
            Ok(r("apps/v1", "ReplicaSet", "rs")),
        ),
        (
            pod("p", &owned_by("apps/v1", "ReplicaSet", "rs"), "") + &rs_dep + &dep,
            Ok(r("apps/v1", "Deployment", "dep")),
        ),
        // A supported kind below a readable unsupported owner wins.
        (
            pod("p", &owned_by("batch/v1", "Job", "j"), "")
                + &job("j", &owned_by("apps/v1", "Deployment", "dep"))
                + &dep,
            Ok(r("batch/v1", "Job", "j")),
        ),
        (
            pod("p", &owned_by("batch/v1", "Job", "j"), "") + &job("j", ""),
            Ok(r("batch/v1", "Job", "j")),
        ),
        // Missing higher owner and missing direct owner are errors.
        (
            pod("p", &owned_by("apps/v1", "ReplicaSet", "rs"), "") + &rs_dep,
            Err("not found"),
        ),
        (
            pod("p", &owned_by("apps/v1", "ReplicaSet", "rs"), ""),
            Err("not found"),
        ),
        // Self-referencing Job: depth error.
        (
            pod("p", &owned_by("batch/v1", "Job", "j"), "")
                + &job("j", &owned_by("batch/v1", "Job", "j")),
            Err("maximum depth of 32"),
        ),
    ];
    for (i, (yaml, want)) in cases.into_iter().enumerate() {
        let got = root_of(&reader(&yaml), "p");
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "case {i}"),
            (Err(e), Err(w)) => assert!(e.to_string().contains(w), "case {i}: {e}"),
            (g, w) => panic!("case {i}: got {g:?}, want {w:?}"),
        }
    }
}

#[test]
fn owner_walk_read_failures() {
    let yaml = pod("p", &owned_by("batch/v1", "Job", "j"), "")
        + &job("j", &owned_by("apps/v1", "Deployment", "dep"));
    let js_yaml = pod("p", &owned_by("batch/v1", "Job", "j"), "")
        + &job("j", &owned_by("jobset.x-k8s.io/v1alpha2", "JobSet", "js"));
    let dep = r("apps/v1", "Deployment", "dep");
    let js = r("jobset.x-k8s.io/v1alpha2", "JobSet", "js");
    let job_ref = r("batch/v1", "Job", "j");
    type Case<'a> = (
        &'a str,
        &'a String,
        ObjectRef,
        ReadError,
        Result<ObjectRef, &'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "forbidden unsupported parent falls back",
            &yaml,
            dep.clone(),
            forbidden(&dep),
            Ok(job_ref.clone()),
        ),
        (
            "forbidden supported parent fails",
            &js_yaml,
            js.clone(),
            forbidden(&js),
            Err("forbidden"),
        ),
        (
            "NotFound parent fails",
            &yaml,
            dep.clone(),
            ReadError::NotFound(dep.clone()),
            Err("not found"),
        ),
        (
            "no kind match fails",
            &yaml,
            dep.clone(),
            ReadError::NoKind {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
            },
            Err("not served"),
        ),
        (
            "internal error fails",
            &yaml,
            dep.clone(),
            ReadError::Other {
                object: dep.to_string(),
                message: "500".into(),
            },
            Err("500"),
        ),
        (
            "forbidden direct owner fails",
            &yaml,
            job_ref.clone(),
            forbidden(&job_ref),
            Err("forbidden"),
        ),
    ];
    for (name, yaml, at, err, want) in cases {
        let mut rd = reader(yaml);
        rd.errors.insert(at, err);
        match (root_of(&rd, "p"), want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{name}"),
            (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{name}: {e}"),
            (g, w) => panic!("{name}: got {g:?}, want {w:?}"),
        }
    }
}

// ---- TranslateToSlurmJobIR --------------------------------------------------------------

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

// ---- Job and JobSet ---------------------------------------------------------------------

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

// ---- Built-in PodGroup -------------------------------------------------------------------

fn pg_pod(name: &str, group: &str, meta: &str) -> String {
    pod(
        name,
        meta,
        &format!("  schedulingGroup: {{podGroupName: {group}}}\n"),
    )
}

fn podgroup(name: &str, meta: &str, policy: &str, workload: Option<&str>) -> String {
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

// ---- Coscheduling PodGroup ---------------------------------------------------------------

fn cos_pod(name: &str, ns: &str, group: &str, extra: &str) -> String {
    pod(
        name,
        &format!("  labels: {{scheduling.x-k8s.io/pod-group: {group}{extra}}}\n"),
        "",
    )
    .replace("namespace: ns", &format!("namespace: {ns}"))
}

fn cos_pg(spec: &str, phase: Option<&str>) -> String {
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

// ---- LeaderWorkerSet ----------------------------------------------------------------------

fn lws_pod(name: &str, ns: &str, group: &str, extra: &str) -> String {
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

fn lws(size: u32) -> String {
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

// ---- resources in translation -------------------------------------------------------------

#[test]
fn resources_feed_cpu_memory_and_gres_and_annotations_win() {
    let spec = "    resources: {limits: {cpu: 1500m, memory: 1Gi, deviceclass.resource.kubernetes.io/gpu.nvidia.com: \"2\"}}\n";
    let t = run(&reader(&pod("p", "", spec)), "p").unwrap();
    assert_eq!(t.ir.job.cpus_per_task, Some(2));
    assert_eq!(t.ir.job.mem_per_node_mib, Some(1024));
    assert_eq!(t.ir.job.gres.as_deref(), Some("gres/gpu:gpu.nvidia.com=2"));
    let t = run(
        &reader(&pod(
            "p",
            &annotate(&[(key::CPU_PER_TASK, "8"), (key::GRES, "gres/gpu=1")]),
            spec,
        )),
        "p",
    )
    .unwrap();
    assert_eq!(t.ir.job.cpus_per_task, Some(8));
    assert_eq!(t.ir.job.gres.as_deref(), Some("gres/gpu=1"));
}

#[test]
fn pods_per_node_packs_the_group_and_scales_per_node_resources() {
    let member = |name: &str| {
        pod(
            name,
            "",
            "    resources: {limits: {cpu: \"2\", memory: 1Gi, deviceclass.resource.kubernetes.io/gpu.example.com: \"2\"}}\n  schedulingGroup: {podGroupName: pg}\n",
        )
    };
    let group = |ann: &[(&str, &str)]| {
        member("a")
            + &member("b")
            + &member("c")
            + &podgroup("pg", &annotate(ann), "{gang: {minCount: 3}}", None)
    };
    let t = run(&reader(&group(&[(key::PODS_PER_NODE, "2")])), "a").unwrap();
    let j = &t.ir.job;
    // 3 pods, 2 per node: 2 nodes of 2 tasks, 2 CPUs per task, per-node memory and GPUs doubled.
    assert_eq!(
        (j.min_nodes, j.max_nodes, j.tasks_per_node),
        (Some(2), Some(2), Some(2))
    );
    assert_eq!(j.cpus_per_task, Some(2));
    assert_eq!(j.mem_per_node_mib, Some(2048));
    assert_eq!(j.gres.as_deref(), Some("gres/gpu:gpu.example.com=4"));
    assert_eq!(t.ir.node_count(), 2);
    assert_eq!(t.nodes_needed(), 2);
    let desc = t.to_job_desc(&Default::default(), &[]);
    assert_eq!(desc.nodes.as_deref(), Some("2"));
    // A pod the allocation leaves out gets a job for one pod: one task, its own memory and GPUs.
    let alone = t.alone(&t.ir.pods[2]);
    let j = &alone.ir.job;
    assert_eq!(
        (j.min_nodes, j.max_nodes, j.tasks_per_node),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(j.mem_per_node_mib, Some(1024));
    assert_eq!(j.gres.as_deref(), Some("gres/gpu:gpu.example.com=2"));
    assert_eq!(alone.ir.node_count(), 1);
    // More per node than the group has: all on one node, scaled by the group's size only.
    let t = run(&reader(&group(&[(key::PODS_PER_NODE, "8")])), "a").unwrap();
    let j = &t.ir.job;
    assert_eq!(
        (j.min_nodes, j.max_nodes, j.tasks_per_node),
        (Some(1), Some(1), Some(3))
    );
    assert_eq!(j.mem_per_node_mib, Some(3072));
    assert_eq!(t.ir.node_count(), 1);
    // Values the annotations give are per node already and stay as given.
    let t = run(
        &reader(&group(&[
            (key::PODS_PER_NODE, "3"),
            (key::MEM_PER_NODE, "5Gi"),
            (key::GRES, "gres/gpu=1"),
            (key::MAX_NODES, "2"),
        ])),
        "a",
    )
    .unwrap();
    let j = &t.ir.job;
    assert_eq!(
        (j.min_nodes, j.max_nodes, j.tasks_per_node),
        (Some(1), Some(2), Some(3))
    );
    assert_eq!(j.mem_per_node_mib, Some(5120));
    assert_eq!(j.gres.as_deref(), Some("gres/gpu=1"));
    assert_eq!(t.ir.node_count(), 1);
    // A bad count names the key and what is accepted.
    let e = run(&reader(&group(&[(key::PODS_PER_NODE, "0")])), "a")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pods-per-node") && e.contains("a whole number of pods per node"),
        "{e}"
    );
}

#[test]
fn unsupported_device_class_names_the_pod() {
    let spec =
        "    resources: {limits: {deviceclass.resource.kubernetes.io/fpga.acme.com: \"1\"}}\n";
    let e = run(&reader(&pod("p", "", spec)), "p")
        .unwrap_err()
        .to_string();
    assert!(e.contains("pod ns/p") && e.contains("fpga.acme.com"), "{e}");
}

#[test]
fn unknown_annotation_keys_are_warnings() {
    let t = run(
        &reader(&pod(
            "p",
            &annotate(&[("slurmjob.slinky.slurm.net/timelimt", "5")]),
            "",
        )),
        "p",
    )
    .unwrap();
    assert_eq!(t.warnings.len(), 1);
    assert!(t.warnings[0].contains("timelimt"));
}

#[test]
fn job_ids_parse_as_u32_without_wrapping() {
    use super::kinds::parse_job_id;
    assert_eq!(parse_job_id("1234"), Some(1234));
    assert_eq!(parse_job_id("3000000000"), Some(3_000_000_000)); // quirk 16 fixed
    assert_eq!(parse_job_id("-1234"), None);
    assert_eq!(parse_job_id("asdf"), None);
    assert_eq!(parse_job_id(""), None);
    assert_eq!(parse_job_id("0"), None);
}

// ---- issue 23: owner annotations, scheduleTimeoutSeconds, Kueue pod groups ---------------

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
    use super::kinds::with_owner_fallback;
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
    use super::GangTimeout;
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

fn kueue_pod(name: &str, group: &str, total: Option<&str>, extra_meta: &str) -> String {
    let ann = total
        .map(|t| {
            format!(
                "  annotations: {{kueue.x-k8s.io/pod-group-total-count: \"{t}\"{extra_meta}}}\n"
            )
        })
        .unwrap_or_default();
    pod(
        name,
        &format!("  labels: {{kueue.x-k8s.io/pod-group-name: {group}}}\n{ann}"),
        "",
    )
}

#[test]
fn kueue_pod_group_table() {
    // Three pods of one group: one job for all, keyed by the group, sized by the total count.
    let yaml = kueue_pod("b", "g", Some("3"), "")
        + &kueue_pod("a", "g", Some("3"), &format!(", {}: debug", key::PARTITION))
        + &kueue_pod("c", "g", Some("3"), "")
        + &kueue_pod("x", "other", Some("1"), "");
    let rd = reader(&yaml);
    for p in ["a", "b", "c"] {
        let t = run(&rd, p).unwrap();
        assert_eq!(t.group_key, "kueue/ns/g");
        assert_eq!(t.ir.pod_names(), vec!["ns/a", "ns/b", "ns/c"]);
        assert_eq!(t.gang, GangStatus::Complete);
        assert_eq!((t.ir.job.min_nodes, t.ir.job.max_nodes), (Some(3), Some(3)));
        assert_eq!(t.ir.job.job_name.as_deref(), Some("g"));
        // The first member's slurmjob.* annotations, whichever pod is translated.
        assert_eq!(t.ir.job.partition.as_deref(), Some("debug"), "pod {p}");
    }
    // Fewer pods than the total: an incomplete gang, nothing to submit.
    let rd = reader(&(kueue_pod("a", "g", Some("3"), "") + &kueue_pod("b", "g", Some("3"), "")));
    let t = run(&rd, "a").unwrap();
    assert_eq!(
        t.gang,
        GangStatus::Incomplete {
            ready: 2,
            required: 3,
            job_id: None
        }
    );
    // A single-pod group is one job too.
    let t = run(&reader(&kueue_pod("a", "solo", Some("1"), "")), "a").unwrap();
    assert_eq!(t.group_key, "kueue/ns/solo");
    // Missing or bad total count: a clear error naming the pod, the annotation and the form.
    for (total, needle) in [
        (None, "needs the annotation"),
        (Some("zero"), "\"zero\" is not valid"),
        (Some("0"), "\"0\" is not valid"),
    ] {
        let err = run(&reader(&kueue_pod("a", "g", total, "")), "a")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ns/a"), "{err}");
        assert!(
            err.contains("kueue.x-k8s.io/pod-group-total-count"),
            "{err}"
        );
        assert!(err.contains(needle), "{err}");
        if total.is_some() {
            assert!(err.contains("a whole number of pods"), "{err}");
        }
    }
}
