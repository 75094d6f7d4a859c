//! The validating webhook (`/validate--v1-pod`, reference §3.3), as pure functions. Checks run
//! in the reference's order and the first failure is the answer, with the reference's message.
//!
//! Deliberate differences from the Go original (reference §10.3):
//! - `spec.resourceClaims: []` is not a claim and is allowed (#12);
//! - a pod in a managed namespace that names another scheduler is not checked (#10), and an
//!   UPDATE is checked only for pods that name the bridge scheduler (see
//!   [`super::managed::processed`]).

use super::managed::processed;
use super::review::{AdmissionRequest, Operation, sub_resource};
use crate::dra::GresDrivers;
use crate::wellknown::{
    ANNOTATION_SLURM_NODE, DEVICECLASS_DRA_CPU, DEVICECLASS_PREFIX, LABEL_SLURM_JOBID,
    RESOURCE_DRA_CPU, slurmjob,
};
use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use std::collections::BTreeMap;

/// CREATE 1.
pub const MSG_JOBID_LABEL: &str = "can't create a pod with a slurm external jobid label";
/// CREATE 2.
pub const MSG_NODE_ANNOTATION: &str = "can't create a pod with a slurm external node annotation";
/// CREATE 3.
pub const MSG_RESOURCE_CLAIM: &str = "can't schedule a pod with a resourceclaim, use the annotation slurmjob.slinky.slurm.net/gres to request devices instead";
/// CREATE 4.
pub const MSG_TOPOLOGY_SPREAD: &str =
    "spec.topologySpreadConstraints is not supported by the slurm-bridge scheduler";
/// CREATE 5.
pub const MSG_CPU_BOTH: &str = "can't specify both native \"cpu\" and CPU DRA resource \"deviceclass.resource.kubernetes.io/dra.cpu\"";
/// UPDATE 2.
pub const MSG_RESIZE: &str = "can't resize a Slurm Bridge-managed pod";
/// UPDATE 5, label.
pub const MSG_RUNNING_JOBID: &str = "can't update a running pod's external jobid label";
/// UPDATE 5, annotation.
pub const MSG_RUNNING_NODE: &str = "can't update a running pod's external node annotation";

/// CREATE 6 / UPDATE 3.
pub fn msg_unsupported_class(container: &str, class: &str) -> String {
    format!("container \"{container}\" uses unsupported DRA device class \"{class}\"")
}

/// CREATE 7 / UPDATE 4, `cpu-per-task` with CPU DRA.
pub fn msg_cpu_per_task_conflict() -> String {
    format!(
        "annotation \"{}\" conflicts with CPU DRA resource \"{RESOURCE_DRA_CPU}\": explicit DRA requests are authoritative",
        slurmjob::CPU_PER_TASK
    )
}

/// CREATE 7 / UPDATE 4, `gres` with a non-CPU DRA resource.
pub fn msg_gres_conflict(resource: &str) -> String {
    format!(
        "annotation \"{}\" conflicts with DRA resource \"{resource}\": explicit DRA requests are authoritative",
        slurmjob::GRES
    )
}

/// Checks `req`; `Err` holds the denial message. `drivers` are the DRA drivers whose
/// DeviceClasses pods may ask for besides `dra.cpu` (the config's `draDeviceDrivers` included).
pub fn validate(
    req: &AdmissionRequest<Pod>,
    scheduler_name: &str,
    in_managed_namespace: bool,
    drivers: &GresDrivers,
) -> Result<(), String> {
    let Some(pod) = req.object.as_ref() else {
        // DELETE and CONNECT carry no object; nothing to check.
        return Ok(());
    };
    if !processed(
        req.operation.clone(),
        pod,
        scheduler_name,
        in_managed_namespace,
    ) {
        return Ok(());
    }
    match req.operation {
        Operation::Create => validate_create(pod, drivers),
        Operation::Update => {
            validate_update(pod, req.old_object.as_ref(), sub_resource(req), drivers)
        }
        Operation::Delete | Operation::Connect => Ok(()),
    }
}

/// The value of `key` in `map`, "" when it or the map is missing.
fn value<'a>(map: &'a Option<BTreeMap<String, String>>, key: &str) -> &'a str {
    map.as_ref()
        .and_then(|m| m.get(key))
        .map_or("", String::as_str)
}

fn label<'a>(pod: &'a Pod, key: &str) -> &'a str {
    value(&pod.metadata.labels, key)
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> &'a str {
    value(&pod.metadata.annotations, key)
}

/// Checks of a pod being created (reference §3.3 CREATE 1-7).
pub fn validate_create(pod: &Pod, drivers: &GresDrivers) -> Result<(), String> {
    if !label(pod, LABEL_SLURM_JOBID).is_empty() {
        return Err(MSG_JOBID_LABEL.into());
    }
    if !annotation(pod, ANNOTATION_SLURM_NODE).is_empty() {
        return Err(MSG_NODE_ANNOTATION.into());
    }
    if let Some(spec) = &pod.spec {
        if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(MSG_RESOURCE_CLAIM.into());
        }
        if spec
            .topology_spread_constraints
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        {
            return Err(MSG_TOPOLOGY_SPREAD.into());
        }
    }
    validate_cpu_resources(pod)?;
    validate_dra_device_classes(pod, drivers)?;
    validate_annotation_conflicts(pod)
}

/// Checks of a pod being updated (reference §3.3 UPDATE 2-5).
pub fn validate_update(
    pod: &Pod,
    old: Option<&Pod>,
    sub_resource: &str,
    drivers: &GresDrivers,
) -> Result<(), String> {
    if sub_resource == "resize" {
        return Err(MSG_RESIZE.into());
    }
    validate_dra_device_classes(pod, drivers)?;
    validate_annotation_conflicts(pod)?;
    let running = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Running");
    if running {
        let old_label = old.map_or("", |o| label(o, LABEL_SLURM_JOBID));
        if label(pod, LABEL_SLURM_JOBID) != old_label {
            return Err(MSG_RUNNING_JOBID.into());
        }
        let old_annotation = old.map_or("", |o| annotation(o, ANNOTATION_SLURM_NODE));
        if annotation(pod, ANNOTATION_SLURM_NODE) != old_annotation {
            return Err(MSG_RUNNING_NODE.into());
        }
    }
    Ok(())
}

/// Init containers, then regular containers.
fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    })
}

/// Resource names of requests, then limits.
fn resource_names(r: Option<&ResourceRequirements>) -> impl Iterator<Item = &str> {
    r.into_iter().flat_map(|r| {
        r.requests
            .iter()
            .flat_map(|m| m.keys())
            .chain(r.limits.iter().flat_map(|m| m.keys()))
            .map(String::as_str)
    })
}

/// CREATE 5: native `cpu` (pod-level or any container) together with CPU DRA (any container).
pub fn validate_cpu_resources(pod: &Pod) -> Result<(), String> {
    let pod_level = pod.spec.as_ref().and_then(|s| s.resources.as_ref());
    let native = resource_names(pod_level).any(|n| n == "cpu")
        || containers(pod).any(|c| resource_names(c.resources.as_ref()).any(|n| n == "cpu"));
    let dra = containers(pod)
        .any(|c| resource_names(c.resources.as_ref()).any(|n| n == RESOURCE_DRA_CPU));
    if native && dra {
        return Err(MSG_CPU_BOTH.into());
    }
    Ok(())
}

/// CREATE 6 / UPDATE 3: every DRA extended resource names a supported device class: `dra.cpu`
/// or one of `drivers`.
pub fn validate_dra_device_classes(pod: &Pod, drivers: &GresDrivers) -> Result<(), String> {
    for c in containers(pod) {
        for name in resource_names(c.resources.as_ref()) {
            if let Some(class) = name.strip_prefix(DEVICECLASS_PREFIX)
                && class != DEVICECLASS_DRA_CPU
                && !drivers.contains(class)
            {
                return Err(msg_unsupported_class(&c.name, class));
            }
        }
    }
    Ok(())
}

/// CREATE 7 / UPDATE 4: the pod's own `cpu-per-task` / `gres` annotations against its DRA
/// resources. (The scheduler reads these annotations from the workload root, so for a Job's
/// pods this checks the pod template's annotations only; reference §10.3 #11.)
pub fn validate_annotation_conflicts(pod: &Pod) -> Result<(), String> {
    let Some(annotations) = pod.metadata.annotations.as_ref() else {
        return Ok(());
    };
    let cpu_per_task = annotations.contains_key(slurmjob::CPU_PER_TASK);
    let gres = annotations.contains_key(slurmjob::GRES);
    if !cpu_per_task && !gres {
        return Ok(());
    }
    for c in containers(pod) {
        for name in resource_names(c.resources.as_ref()) {
            let Some(class) = name.strip_prefix(DEVICECLASS_PREFIX) else {
                continue;
            };
            if cpu_per_task && class == DEVICECLASS_DRA_CPU {
                return Err(msg_cpu_per_task_conflict());
            }
            if gres && class != DEVICECLASS_DRA_CPU {
                return Err(msg_gres_conflict(name));
            }
        }
    }
    Ok(())
}
