//! The validating webhook's tenancy check: a pod whose own annotations (or mapped
//! PriorityClass) ask what its tenant does not allow is refused when it is created, with the
//! message the scheduler would show. Annotations set only on a workload (a Job, a JobSet) are
//! not seen here; the scheduler checks those before it submits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::managed::processed;
use super::review::{AdmissionRequest, Operation};
use crate::config::Config;
use crate::tenancy::{Asked, PolicyKey, Tenancy, TenancyError};
use crate::workload::annotations;
use crate::workload::ir::JobInfo;

/// What `pod`'s own annotations and PriorityClass ask of the policy fields. Values that do not
/// parse ask nothing here (the scheduler reports them as invalid annotations).
pub fn asked_of_pod(pod: &Pod, cfg: &Config) -> Asked {
    let mut job = JobInfo::default();
    if let Some(a) = pod.metadata.annotations.as_ref() {
        let _ = annotations::apply(a, &mut job);
    }
    let class = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref());
    let mapped = class.and_then(|c| cfg.priority_class(c).map(|m| (c, m)));
    Asked::new(&job, mapped)
}

fn policy_annotations(pod: Option<&Pod>) -> BTreeMap<&'static str, Option<&str>> {
    let a = pod.and_then(|p| p.metadata.annotations.as_ref());
    PolicyKey::ALL
        .iter()
        .map(|k| {
            let key = k.annotation();
            (key, a.and_then(|a| a.get(key)).map(String::as_str))
        })
        .collect()
}

/// Whether the request is one the tenancy check judges: the CREATE of a pod the webhooks take,
/// or an UPDATE of one naming the bridge scheduler that changes a policy annotation or its
/// PriorityClass (other updates, the finalizer's removal say, always pass, so a pod created
/// under an older policy is never stuck).
pub fn judged(req: &AdmissionRequest<Pod>, scheduler_name: &str, in_managed: bool) -> bool {
    let Some(pod) = req.object.as_ref() else {
        return false;
    };
    if !processed(req.operation.clone(), pod, scheduler_name, in_managed) {
        return false;
    }
    match req.operation {
        Operation::Create => true,
        Operation::Update => {
            let old = req.old_object.as_ref();
            let class = |p: Option<&Pod>| {
                p.and_then(|p| p.spec.as_ref())
                    .and_then(|s| s.priority_class_name.clone())
            };
            policy_annotations(Some(pod)) != policy_annotations(old)
                || class(Some(pod)) != class(old)
        }
        Operation::Delete | Operation::Connect => false,
    }
}

/// The tenancy verdict on `req`: `Ok` to allow, `Err(Ok(message))` to deny, `Err(Err(error))`
/// when the namespace's labels could not be read.
pub async fn check(
    req: &AdmissionRequest<Pod>,
    scheduler_name: &str,
    cfg: &Config,
    tenancy: &Tenancy,
    in_managed: bool,
) -> Result<(), Result<String, String>> {
    if !judged(req, scheduler_name, in_managed) {
        return Ok(());
    }
    let Some(pod) = req.object.as_ref() else {
        return Ok(());
    };
    let namespace = super::review::namespace(req);
    match tenancy.decide(namespace, &asked_of_pod(pod, cfg)).await {
        Ok(_) => Ok(()),
        Err(TenancyError::Refused(r)) => Err(Ok(r.message)),
        Err(TenancyError::Labels(e)) => Err(Err(e.to_string())),
    }
}
