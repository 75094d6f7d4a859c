//! §3.3, validation: the create and update tables, every reference message exactly, deletes.

use super::*;

fn res(requests: Value, limits: Value) -> Value {
    json!({"requests": requests, "limits": limits})
}

fn containers(list: Value) -> Value {
    json!({"spec": {"containers": list}})
}

#[test]
fn validate_create_table() {
    let dra_cpu = RESOURCE_DRA_CPU_KEY;
    let rows: Vec<(&str, &str, Option<&str>, Value, Result<(), String>)> = vec![
        ("unmanaged ns, other scheduler, jobid: ignored", "default", Some("other"),
         json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}), Ok(())),
        ("jobid label", MANAGED, Some(BRIDGE), json!({"metadata": {"labels": {LABEL_JOBID: "12"}}}), Err(MSG_JOBID_LABEL.into())),
        ("empty jobid label is fine", MANAGED, Some(BRIDGE), json!({"metadata": {"labels": {LABEL_JOBID: ""}}}), Ok(())),
        ("node annotation", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {ANN_NODE: "n1"}}}), Err(MSG_NODE_ANNOTATION.into())),
        ("jobid first, then node", MANAGED, Some(BRIDGE), json!({"metadata": {"labels": {LABEL_JOBID: "1"}, "annotations": {ANN_NODE: "n1"}}}), Err(MSG_JOBID_LABEL.into())),
        ("resourceClaims", MANAGED, Some(BRIDGE), json!({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}}), Err(MSG_RESOURCE_CLAIM.into())),
        // Quirk #12 fixed.
        ("resourceClaims: [] is not a claim", MANAGED, Some(BRIDGE), json!({"spec": {"resourceClaims": []}}), Ok(())),
        ("topologySpreadConstraints", MANAGED, Some(BRIDGE), json!({"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}}), Err(MSG_TOPOLOGY_SPREAD.into())),
        ("empty topologySpreadConstraints", MANAGED, Some(BRIDGE), json!({"spec": {"topologySpreadConstraints": []}}), Ok(())),
        ("native cpu only", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({"cpu": "1"}), json!({}))}])), Ok(())),
        ("dra cpu only", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({dra_cpu: "2"}), json!({}))}])), Ok(())),
        ("both in one container", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({"cpu": "0", dra_cpu: "2"}), json!({}))}])), Err(MSG_CPU_BOTH.into())),
        ("native in init limits + DRA in app limits", MANAGED, Some(BRIDGE),
         json!({"spec": {"initContainers": [{"name": "i", "resources": res(json!({}), json!({"cpu": "1"}))}],
                         "containers": [{"name": "a", "resources": res(json!({}), json!({dra_cpu: "1"}))}]}}), Err(MSG_CPU_BOTH.into())),
        ("pod-level cpu + container DRA", MANAGED, Some(BRIDGE),
         json!({"spec": {"resources": {"requests": {"cpu": "1"}}, "containers": [{"name": "a", "resources": res(json!({dra_cpu: "1"}), json!({}))}]}}), Err(MSG_CPU_BOTH.into())),
        ("supported DRA classes", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({dra_cpu: "1", "deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1", "deviceclass.resource.kubernetes.io/gpu.example.com": "1"}), json!({}))}])), Ok(())),
        ("unsupported DRA class in a request", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/other.gpu.example.com": "1"}), json!({}))}])),
         Err("container \"a\" uses unsupported DRA device class \"other.gpu.example.com\"".into())),
        ("unsupported DRA class in init limits", MANAGED, Some(BRIDGE),
         json!({"spec": {"initContainers": [{"name": "init", "resources": res(json!({}), json!({"deviceclass.resource.kubernetes.io/fpga.example.com": "1"}))}]}}),
         Err(msg_unsupported_class("init", "fpga.example.com"))),
        ("non-DRA extended resource", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({"example.com/gpu": "1", "nvidia.com/gpu": "1"}), json!({}))}])), Ok(())),
        ("unsupported class, unmanaged ns, other scheduler", "default", Some("other"), containers(json!([{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/x": "1"}), json!({}))}])), Ok(())),
        ("plain pod", MANAGED, Some(BRIDGE), json!({}), Ok(())),
        ("bridge scheduler, unmanaged ns: clean", "default", Some(BRIDGE), json!({}), Ok(())),
        ("bridge scheduler, unmanaged ns: jobid", "default", Some(BRIDGE), json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}), Err(MSG_JOBID_LABEL.into())),
        ("bridge scheduler, unmanaged ns: resourceClaim", "default", Some(BRIDGE), json!({"spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "c"}]}}), Err(MSG_RESOURCE_CLAIM.into())),
        ("bridge scheduler, unmanaged ns: topology spread", "default", Some(BRIDGE), json!({"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]}}), Err(MSG_TOPOLOGY_SPREAD.into())),
        ("default scheduler in managed ns is validated", MANAGED, Some("default-scheduler"), json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}), Err(MSG_JOBID_LABEL.into())),
        // Quirk #10 fixed: another scheduler in a managed namespace is not validated.
        ("custom scheduler in managed ns: not validated", MANAGED, Some("custom-scheduler"), json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}), Ok(())),
        // Annotation conflicts.
        ("no conflict annotations", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({dra_cpu: "1"}), json!({}))}])), Ok(())),
        ("cpu-per-task without CPU DRA", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {CPT: "2"}}}), Ok(())),
        ("gres with nvidia.com/gpu", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {GRES: "gpu:1"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({"nvidia.com/gpu": "1"}), json!({}))}]}}), Ok(())),
        ("cpu-per-task + dra.cpu request", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {CPT: "2"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({dra_cpu: "1"}), json!({}))}]}}), Err(msg_cpu_per_task_conflict())),
        ("cpu-per-task + dra.cpu in init limits", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {CPT: "2"}}, "spec": {"initContainers": [{"name": "i", "resources": res(json!({}), json!({dra_cpu: "1"}))}]}}), Err(msg_cpu_per_task_conflict())),
        ("gres + gpu.nvidia.com DRA", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {GRES: "gpu:1"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}), json!({}))}]}}),
         Err("annotation \"slurmjob.slinky.slurm.net/gres\" conflicts with DRA resource \"deviceclass.resource.kubernetes.io/gpu.nvidia.com\": explicit DRA requests are authoritative".into())),
        ("cpu-per-task + GPU DRA", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {CPT: "2"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}), json!({}))}]}}), Ok(())),
        ("gres + CPU DRA", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {GRES: "gpu:1"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({dra_cpu: "1"}), json!({}))}]}}), Ok(())),
    ];
    for (name, ns, scheduler, extra, want) in rows {
        let r = create(pod(ns, scheduler, extra));
        assert_eq!(validate_req(&r), want, "{name}");
    }
}

const LABEL_JOBID: &str = "scheduler.slinky.slurm.net/slurm-jobid";
const ANN_NODE: &str = "slinky.slurm.net/slurm-node";
const CPT: &str = "slurmjob.slinky.slurm.net/cpu-per-task";
const GRES: &str = "slurmjob.slinky.slurm.net/gres";
const RESOURCE_DRA_CPU_KEY: &str = "deviceclass.resource.kubernetes.io/dra.cpu";

#[test]
fn exact_reference_messages() {
    assert_eq!(
        MSG_JOBID_LABEL,
        "can't create a pod with a slurm external jobid label"
    );
    assert_eq!(
        MSG_NODE_ANNOTATION,
        "can't create a pod with a slurm external node annotation"
    );
    assert_eq!(
        MSG_RESOURCE_CLAIM,
        "can't schedule a pod with a resourceclaim, use the annotation slurmjob.slinky.slurm.net/gres to request devices instead"
    );
    assert_eq!(
        MSG_TOPOLOGY_SPREAD,
        "spec.topologySpreadConstraints is not supported by the slurm-bridge scheduler"
    );
    assert_eq!(
        MSG_CPU_BOTH,
        r#"can't specify both native "cpu" and CPU DRA resource "deviceclass.resource.kubernetes.io/dra.cpu""#
    );
    assert_eq!(
        msg_unsupported_class("c", "x.y"),
        r#"container "c" uses unsupported DRA device class "x.y""#
    );
    assert_eq!(
        msg_cpu_per_task_conflict(),
        r#"annotation "slurmjob.slinky.slurm.net/cpu-per-task" conflicts with CPU DRA resource "deviceclass.resource.kubernetes.io/dra.cpu": explicit DRA requests are authoritative"#
    );
    assert_eq!(
        msg_gres_conflict("deviceclass.resource.kubernetes.io/gpu.example.com"),
        r#"annotation "slurmjob.slinky.slurm.net/gres" conflicts with DRA resource "deviceclass.resource.kubernetes.io/gpu.example.com": explicit DRA requests are authoritative"#
    );
    assert_eq!(MSG_RESIZE, "can't resize a Slurm Bridge-managed pod");
    assert_eq!(
        MSG_RUNNING_JOBID,
        "can't update a running pod's external jobid label"
    );
    assert_eq!(
        MSG_RUNNING_NODE,
        "can't update a running pod's external node annotation"
    );
}

#[test]
fn validate_update_table() {
    let running = json!({"status": {"phase": "Running"}});
    let pending = json!({"status": {"phase": "Pending"}});
    let with = |base: &Value, extra: Value| {
        let mut v = base.clone();
        merge(&mut v, &extra);
        v
    };
    // (name, ns, scheduler, new extra, old extra, subresource, want)
    let rows: Vec<(
        &str,
        &str,
        Option<&str>,
        Value,
        Value,
        &str,
        Result<(), String>,
    )> = vec![
        (
            "unmanaged ns, other scheduler, resize: ok",
            "default",
            Some("other"),
            running.clone(),
            running.clone(),
            "resize",
            Ok(()),
        ),
        (
            "pending pod may get a jobid",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                json!({"metadata": {"labels": {LABEL_JOBID: "7"}}}),
            ),
            pending.clone(),
            "",
            Ok(()),
        ),
        (
            "pending pod may get a node annotation",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                json!({"metadata": {"annotations": {ANN_NODE: "n"}}}),
            ),
            pending.clone(),
            "",
            Ok(()),
        ),
        (
            "managed resize",
            MANAGED,
            Some(BRIDGE),
            running.clone(),
            running.clone(),
            "resize",
            Err(MSG_RESIZE.into()),
        ),
        (
            "bridge scheduler resize, unmanaged ns",
            "default",
            Some(BRIDGE),
            pending.clone(),
            pending.clone(),
            "resize",
            Err(MSG_RESIZE.into()),
        ),
        (
            "other scheduler resize",
            MANAGED,
            Some("other"),
            running.clone(),
            running.clone(),
            "resize",
            Ok(()),
        ),
        // Not a bridge pod (it predates the namespace being managed): not checked on UPDATE.
        (
            "default scheduler resize in managed ns",
            MANAGED,
            Some("default-scheduler"),
            running.clone(),
            running.clone(),
            "resize",
            Ok(()),
        ),
        (
            "running pod jobid change",
            MANAGED,
            Some(BRIDGE),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "8"}}}),
            ),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "7"}}}),
            ),
            "",
            Err(MSG_RUNNING_JOBID.into()),
        ),
        (
            "running pod jobid removed",
            MANAGED,
            Some(BRIDGE),
            running.clone(),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "7"}}}),
            ),
            "",
            Err(MSG_RUNNING_JOBID.into()),
        ),
        (
            "running pod, same jobid",
            MANAGED,
            Some(BRIDGE),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "7", "x": "y"}}}),
            ),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "7"}}}),
            ),
            "",
            Ok(()),
        ),
        (
            "running pod node annotation change",
            MANAGED,
            Some(BRIDGE),
            with(
                &running,
                json!({"metadata": {"annotations": {ANN_NODE: "b"}}}),
            ),
            with(
                &running,
                json!({"metadata": {"annotations": {ANN_NODE: "a"}}}),
            ),
            "",
            Err(MSG_RUNNING_NODE.into()),
        ),
        (
            "running pod node annotation change, bridge pod in unmanaged ns",
            "default",
            Some(BRIDGE),
            with(
                &running,
                json!({"metadata": {"annotations": {ANN_NODE: "b"}}}),
            ),
            running.clone(),
            "",
            Err(MSG_RUNNING_NODE.into()),
        ),
        (
            "other scheduler, running, jobid change",
            MANAGED,
            Some("other"),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "8"}}}),
            ),
            running.clone(),
            "",
            Ok(()),
        ),
        (
            "UPDATE: unsupported DRA class",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                containers(
                    json!([{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/x.y": "1"}), json!({}))}]),
                ),
            ),
            pending.clone(),
            "",
            Err(msg_unsupported_class("a", "x.y")),
        ),
        (
            "UPDATE: annotation conflict",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                json!({"metadata": {"annotations": {CPT: "1"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({RESOURCE_DRA_CPU_KEY: "1"}), json!({}))}]}}),
            ),
            pending.clone(),
            "",
            Err(msg_cpu_per_task_conflict()),
        ),
        (
            "UPDATE: CREATE-only checks are not re-run",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                json!({"spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "c"}], "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]}}),
            ),
            pending.clone(),
            "",
            Ok(()),
        ),
    ];
    for (name, ns, scheduler, new, old, sub, want) in rows {
        let mut r = update(pod(ns, scheduler, new), pod(ns, scheduler, old));
        r.sub_resource = Some(sub.into());
        assert_eq!(validate_req(&r), want, "{name}");
    }
}

#[test]
fn delete_is_a_noop() {
    let r = review::request(
        Operation::Delete,
        pod(
            MANAGED,
            Some(BRIDGE),
            json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}),
        ),
    );
    assert_eq!(validate_req(&r), Ok(()));
    assert!(mutate_req(&r).is_empty());
}
