//! DRA ResourceClaims at bind time (reference §5.7): a pod asking for
//! `deviceclass.resource.kubernetes.io/<class>` gets, before it is bound, one ResourceClaim
//! naming exactly the devices Slurm allocated it, allocated in its status and reserved for the
//! pod, and the pod's `status.extendedResourceClaimStatus` pointing at it (kubelet's
//! `DRAExtendedResource` path). Pods without DRA resources cost nothing here: not even the
//! Slurm call (the reference read every job's layout, quirk 13).
//!
//! Per node of the allocation, the pods placed there split Slurm's cores and GRES indices in pod
//! key order ([`crate::dra::share`]), so each pass computes the same split and no two
//! pods get one device. Any failure on the way deletes the claim it made, and a failed binding
//! deletes it too ([`undo`]): none is left behind. A pod that already has its claim (named by its
//! `extendedResourceClaimStatus` and holding this allocation's devices, or labelled with the pod's
//! uid when the cache is behind) is not given a second one.

use crate::dra::{self, DeviceAsk, DraError, NodeAllocation, NodeInventory};
use crate::k8s::pod_key;
use crate::k8s::slim_pod::Pod;
use crate::slurm::SlurmJobs;
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceClaim, DeviceClass,
    DeviceRequestAllocationResult, ResourceClaim, ResourceClaimConsumerReference,
    ResourceClaimSpec, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use slurm_rest::models::NodeResourceLayout;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Condition reason and Event reason of a pod whose claim could not be made.
pub const REASON_CLAIM_FAILED: &str = "DeviceClaimFailed";
/// Annotation kube-scheduler puts on claims it makes for extended resources.
pub const ANNOTATION_EXTENDED_CLAIM: &str = "resource.kubernetes.io/extended-resource-claim";
/// Label of a generated claim: the uid of the pod it is for.
pub const LABEL_CLAIM_POD_UID: &str = "scheduler.slinky.slurm.net/claim-pod-uid";

/// Why a pod's claim could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("{0}")]
    Devices(#[from] DraError),
    #[error("reading the resources of Slurm job {job_id}: {source}")]
    Slurm {
        job_id: u32,
        source: slurm_rest::Error,
    },
    #[error("Slurm job {job_id} reports no resources on node {node}")]
    NoLayout { job_id: u32, node: String },
    #[error("{what}: {}", crate::k8s::api_error::Brief(source))]
    Kube { what: String, source: kube::Error },
}

/// What making, undoing and reading claims needs: the API client, the cached ResourceSlices (the
/// nodes' devices), the drivers whose devices are GRES (the config's included) and the field
/// manager the writes are made as (the scheduler's name).
#[derive(Clone)]
pub struct ClaimWriter {
    pub client: kube::Client,
    pub slices: Store<ResourceSlice>,
    pub drivers: dra::GresDrivers,
    pub field_manager: String,
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ClaimError {
    let what = what.into();
    move |source| ClaimError::Kube { what, source }
}

/// The claims to make for an allocation: per pod to bind, what it gets.
#[derive(Debug, Default)]
pub struct ClaimPlan {
    /// pod key → (node, inventory, ask, share).
    pods: BTreeMap<String, Planned>,
}

#[derive(Debug)]
struct Planned {
    node: String,
    inv: std::sync::Arc<NodeInventory>,
    ask: DeviceAsk,
    share: dra::Share,
}

impl ClaimPlan {
    /// True when no pod needs a claim.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// Works out the devices of every pod of the allocation that asks for DRA resources. `plan` is
/// pod key → Kubernetes node for every pod on the allocation (bound before or now), `pods` the
/// group's pods, `slurm_node` maps a Kubernetes node to its Slurm name. `known` is the job's
/// layout when the job watcher's allocation read has it (else it is read from Slurm). Errors name
/// the pod they concern (pod key) when there is one.
pub async fn plan(
    writer: &ClaimWriter,
    slurm: &impl SlurmJobs,
    job_id: u32,
    known: Option<Arc<[NodeResourceLayout]>>,
    plan: &BTreeMap<String, String>,
    pods: &[&Pod],
    slurm_node: impl Fn(&str) -> String,
) -> Result<ClaimPlan, (Option<String>, ClaimError)> {
    let mut asks: BTreeMap<String, (String, DeviceAsk)> = BTreeMap::new();
    for p in pods {
        let key = pod_key(p);
        let Some(node) = plan.get(&key) else {
            continue;
        };
        match DeviceAsk::of(p) {
            Ok(Some(a)) => {
                asks.insert(key, (node.clone(), a));
            }
            Ok(None) => {}
            Err(e) => return Err((Some(key), e.into())),
        }
    }
    if asks.is_empty() {
        return Ok(ClaimPlan::default());
    }
    let layouts = match known {
        Some(layout) => layout,
        None => slurm
            .job_resources(job_id)
            .await
            .map_err(|source| (None, ClaimError::Slurm { job_id, source }))?
            .into(),
    };
    let slices = writer.slices.state();
    let mut out = ClaimPlan::default();
    let nodes: BTreeSet<&String> = asks.values().map(|(n, _)| n).collect();
    for node in nodes {
        let sname = slurm_node(node);
        let layout = layouts.iter().find(|l| l.node == sname).ok_or_else(|| {
            (
                None,
                ClaimError::NoLayout {
                    job_id,
                    node: sname.clone(),
                },
            )
        })?;
        let alloc = NodeAllocation::parse(
            layout.core_bitmap.as_deref(),
            layout
                .gres
                .iter()
                .map(|g| (g.type_.as_deref(), g.index.as_deref())),
        )
        .map_err(|e| (None, e.into()))?;
        let inv = std::sync::Arc::new(NodeInventory::with_drivers(
            node,
            slices.iter().map(|s| s.as_ref()),
            &writer.drivers,
        ));
        let here: Vec<(&String, &DeviceAsk)> = asks
            .iter()
            .filter(|(_, (n, _))| n == node)
            .map(|(k, (_, a))| (k, a))
            .collect();
        let list: Vec<&DeviceAsk> = here.iter().map(|(_, a)| *a).collect();
        let shares = dra::share(node, &inv, &alloc, &list).map_err(|e| (None, e.into()))?;
        for ((key, ask), share) in here.into_iter().zip(shares) {
            out.pods.insert(
                key.clone(),
                Planned {
                    node: node.clone(),
                    inv: inv.clone(),
                    ask: ask.clone(),
                    share,
                },
            );
        }
    }
    Ok(out)
}

/// Makes `pod`'s claim (if the plan has one for it and it has none yet): create, allocate and
/// reserve in the claim's status, then point the pod's `extendedResourceClaimStatus` at it.
/// Returns the claim name. On any failure the claim made is deleted.
pub async fn ensure_claim(
    writer: &ClaimWriter,
    plan: &ClaimPlan,
    pod: &Pod,
) -> Result<Option<String>, ClaimError> {
    let Some(p) = plan.pods.get(&pod_key(pod)) else {
        return Ok(None);
    };
    let ns = pod.namespace().unwrap_or_default();
    let claims: Api<ResourceClaim> = Api::namespaced(writer.client.clone(), &ns);
    let uid = pod.uid().unwrap_or_default();
    let classes = existing_classes(writer, p).await?;
    let parts = dra::claim_parts(&p.node, &p.inv, &p.ask, &p.share, &classes, &writer.drivers)?;
    if parts.requests.is_empty() || parts.mappings.is_empty() {
        return Ok(None);
    }
    // A claim named by the pod is kept only when it holds this plan's devices on this node: a
    // pod whose earlier allocation ended before it was bound must not carry its old devices.
    if let Some(name) = claim_of(pod) {
        let current = claims
            .get_opt(name)
            .await
            .map_err(kube_err(format!("reading ResourceClaim {ns}/{name}")))?;
        if current
            .as_ref()
            .is_some_and(|c| holds(c, &p.node, &parts.results, &uid))
        {
            return Ok(Some(name.to_string()));
        }
        tracing::info!(pod = %pod_key(pod), claim = %name, node = %p.node,
            "the pod's ResourceClaim does not hold this allocation's devices; making a new one");
    }
    // A claim made by an earlier pass whose pod status write the cache does not show yet, or
    // that failed half way: deleted and made again, so the pod gets exactly one.
    let old = claims
        .list(&ListParams::default().labels(&format!("{LABEL_CLAIM_POD_UID}={uid}")))
        .await
        .map_err(kube_err("listing the pod's ResourceClaims"))?;
    for c in old.items {
        delete_claim(&claims, &c.name_any()).await?;
    }
    let claim = ResourceClaim {
        metadata: ObjectMeta {
            namespace: Some(ns.clone()),
            generate_name: Some(format!("{}-extended-resources-", pod.name_any())),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.name_any(),
                uid: uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            annotations: Some([(ANNOTATION_EXTENDED_CLAIM.to_string(), "true".to_string())].into()),
            labels: Some([(LABEL_CLAIM_POD_UID.to_string(), uid.clone())].into()),
            ..Default::default()
        },
        spec: ResourceClaimSpec {
            devices: Some(DeviceClaim {
                requests: Some(parts.requests.clone()),
                ..Default::default()
            }),
        },
        status: None,
    };
    let params = PatchParams {
        field_manager: Some(writer.field_manager.clone()),
        ..Default::default()
    };
    let created = claims
        .create(&PostParams::default(), &claim)
        .await
        .map_err(kube_err(format!(
            "creating the ResourceClaim for extended resources of {}",
            pod_key(pod)
        )))?;
    let name = created.name_any();
    let rollback = |e: ClaimError| async {
        if let Err(d) = delete_claim(&claims, &name).await {
            tracing::warn!(claim = %name, error = %d, "deleting a half-made ResourceClaim failed");
        }
        e
    };
    let status = json!({"status": {
        "allocation": AllocationResult {
            allocation_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            devices: Some(DeviceAllocationResult { results: Some(parts.results.clone()), config: None }),
            node_selector: Some(NodeSelector { node_selector_terms: vec![NodeSelectorTerm {
                match_fields: Some(vec![NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: "In".into(),
                    values: Some(vec![p.node.clone()]),
                }]),
                ..Default::default()
            }]}),
        },
        "reservedFor": [ResourceClaimConsumerReference {
            api_group: None, resource: "pods".into(), name: pod.name_any(), uid: uid.clone(),
        }],
    }});
    if let Err(e) = claims
        .patch_status(&name, &params, &Patch::Merge(&status))
        .await
    {
        return Err(rollback(ClaimError::Kube {
            what: format!("allocating ResourceClaim {ns}/{name} in its status"),
            source: e,
        })
        .await);
    }
    let pods: Api<Pod> = Api::namespaced(writer.client.clone(), &ns);
    let pod_status = json!({"status": {"extendedResourceClaimStatus": {
        "requestMappings": parts.mappings,
        "resourceClaimName": name,
    }}});
    if let Err(e) = pods
        .patch_status(&pod.name_any(), &params, &Patch::Merge(&pod_status))
        .await
    {
        return Err(rollback(ClaimError::Kube {
            what: format!("setting extendedResourceClaimStatus of {}", pod_key(pod)),
            source: e,
        })
        .await);
    }
    tracing::info!(pod = %pod_key(pod), claim = %name, node = %p.node,
        devices = ?parts.results.iter().map(|r| r.device.as_str()).collect::<Vec<_>>(),
        "allocated ResourceClaim for extended resources");
    Ok(Some(name))
}

/// The claim the pod's `extendedResourceClaimStatus` names.
fn claim_of(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .map(|s| s.resource_claim_name.as_str())
        .filter(|n| !n.is_empty())
}

/// True when `claim` is allocated exactly `results` on `node` and reserved for the pod `uid`.
fn holds(
    claim: &ResourceClaim,
    node: &str,
    results: &[DeviceRequestAllocationResult],
    uid: &str,
) -> bool {
    let Some(status) = claim.status.as_ref() else {
        return false;
    };
    let Some(alloc) = status.allocation.as_ref() else {
        return false;
    };
    let on_node = alloc
        .node_selector
        .as_ref()
        .and_then(|s| s.node_selector_terms.first())
        .and_then(|t| t.match_fields.as_ref())
        .and_then(|f| f.first())
        .and_then(|r| r.values.as_ref())
        .is_some_and(|v| v.len() == 1 && v[0] == node);
    let triple = |r: &DeviceRequestAllocationResult| {
        (
            r.request.clone(),
            r.driver.clone(),
            r.pool.clone(),
            r.device.clone(),
        )
    };
    let have: BTreeSet<_> = alloc
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(triple)
        .collect();
    let want: BTreeSet<_> = results.iter().map(triple).collect();
    let reserved = status
        .reserved_for
        .as_ref()
        .is_some_and(|r| r.iter().any(|c| c.uid == uid));
    on_node && have == want && reserved
}

/// Undoes [`ensure_claim`] for a pod that could not be bound: deletes its claim and clears its
/// `extendedResourceClaimStatus`, so no claim holds devices for a pod that does not run there.
/// Failures are logged: the claim is owned by the pod, and the next pass checks it again.
pub async fn undo(writer: &ClaimWriter, pod: &Pod, name: &str) {
    let ns = pod.namespace().unwrap_or_default();
    let claims: Api<ResourceClaim> = Api::namespaced(writer.client.clone(), &ns);
    if let Err(e) = delete_claim(&claims, name).await {
        tracing::warn!(pod = %pod_key(pod), claim = %name, error = %e,
            "deleting the ResourceClaim of a pod that was not bound failed");
    }
    let pods: Api<Pod> = Api::namespaced(writer.client.clone(), &ns);
    let params = PatchParams {
        field_manager: Some(writer.field_manager.clone()),
        ..Default::default()
    };
    let clear = json!({"status": {"extendedResourceClaimStatus": null}});
    match pods
        .patch_status(&pod.name_any(), &params, &Patch::Merge(&clear))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tracing::warn!(pod = %pod_key(pod), error = %e,
            "clearing the pod's extendedResourceClaimStatus failed"),
    }
}

/// The DeviceClasses of the pod's asks that exist.
async fn existing_classes(
    writer: &ClaimWriter,
    p: &Planned,
) -> Result<BTreeSet<String>, ClaimError> {
    let api: Api<DeviceClass> = Api::all(writer.client.clone());
    let mut wanted: Vec<&str> = p.ask.gpus.keys().map(String::as_str).collect();
    if p.ask.cpus > 0 {
        wanted.push(crate::wellknown::DEVICECLASS_DRA_CPU);
    }
    let mut out = BTreeSet::new();
    for class in wanted {
        if api
            .get_opt(class)
            .await
            .map_err(kube_err(format!("reading DeviceClass {class:?}")))?
            .is_some()
        {
            out.insert(class.to_string());
        }
    }
    Ok(out)
}

async fn delete_claim(claims: &Api<ResourceClaim>, name: &str) -> Result<(), ClaimError> {
    match claims.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ClaimError::Kube {
            what: format!("deleting ResourceClaim {name}"),
            source: e,
        }),
    }
}

/// Deletes the claim a finished pod's `extendedResourceClaimStatus` names (reference §6.1); a
/// claim already gone is fine.
pub async fn delete_pod_claim(client: &kube::Client, pod: &Pod) -> Result<(), kube::Error> {
    let Some(name) = claim_of(pod) else {
        return Ok(());
    };
    let claims: Api<ResourceClaim> =
        Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    match claims.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(pod = %pod_key(pod), claim = %name, "deleted the pod's ResourceClaim");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
