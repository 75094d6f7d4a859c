//! What Slurm node a labelled Kubernetes node should be (reference §6.2 `AddNode`): its
//! `node_conf` for creation, the feature and topology updates of an existing node, and whether a
//! changed node must be re-created. Pure: no I/O.
//!
//! Differences from the reference, on purpose:
//! - CPUs, memory and GRES are computed once, in [`desired`], and both registration and the
//!   re-creation check use that one value (quirk 7: the reference registered DRA CPU counts and
//!   compared capacity counts, re-creating nodes with E-cores forever). CPUs and cores come from
//!   the node's `dra.cpu` ResourceSlices when it has them (E-cores excluded: Slurm does not
//!   enumerate them), else from `allocatable.cpu`; GPUs from its `gpu.nvidia.com` /
//!   `gpu.example.com` slices (one `file=` per device), else from device-plugin capacity.
//! - CPUs and memory are the kubelet's *allocatable* (rounded down), not its capacity as in the
//!   reference: the kubelet admits a pod only within its allocatable, so a Slurm node larger
//!   than that gets pods placed that the kubelet rejects (OutOfcpu, OutOfmemory). Capacity
//!   (CPUs rounded up) is used only for a node that reports no allocatable.
//! - `NodeAddr=` is the node's InternalIP when it has one: slurmctld otherwise resolves the node
//!   name through DNS, and stalls on names that do not resolve.
//! - A Slurm name or topology string that would break the `node_conf` line is refused with a
//!   message instead of sent.

use crate::dra::{DraError, NodeInventory};
use crate::k8s::slurm_node_name;
use crate::resources::quantity::{Quantity, QuantityError};
use crate::wellknown::{
    ANNOTATION_EXTERNAL_NODE_PARTITIONS, ANNOTATION_TOPOLOGY_SPEC, DEVICE_PLUGIN_GPUS,
};
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use slurm_rest::models::{Node as SlurmNode, UpdateNodeMsg};
use std::collections::{BTreeMap, BTreeSet};

const MIB: i128 = 1024 * 1024;

/// The Slurm node a Kubernetes node should be registered as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Slurm NodeName.
    pub slurm_name: String,
    /// Slurm's CPUs: the non-E-core CPUs of the `dra.cpu` slices, else `floor(allocatable.cpu)`
    /// (`ceil(capacity.cpu)` for a node reporting no allocatable).
    pub cpus: u32,
    /// Cores (`CoresPerSocket`, one socket): the abstract cores of the `dra.cpu` slices, else
    /// `cpus`.
    pub cores: u32,
    /// `allocatable.memory` (else `capacity.memory`) in MiB, rounded down.
    pub memory_mib: u64,
    /// GRES, e.g. `gpu:nvidia.com:4`; empty for none.
    pub gres: String,
    /// GRES configuration with one `file=` per device (Slurm needs them to hand out indexes).
    pub gres_conf: String,
    /// Partitions from the partitions annotation, in order, without duplicates: the node's
    /// `Feature=` list. Empty when the annotation is absent or blank.
    pub partitions: Vec<String>,
    /// The topology annotation; empty for none.
    pub topology: String,
    /// `NodeAddr=`: the node's InternalIP, if any.
    pub address: Option<String>,
}

/// Why a node cannot be registered as asked (shown to users in a Warning Event).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DesiredError {
    #[error("node has no {0} capacity")]
    MissingCapacity(&'static str),
    #[error("capacity {resource}: {source}")]
    Quantity {
        resource: String,
        source: QuantityError,
    },
    #[error("capacity {resource} is {value}, which is not a whole number of at least {min}")]
    OutOfRange {
        resource: String,
        value: String,
        min: u32,
    },
    #[error(
        "node has GPUs of two kinds (nvidia.com/gpu and amd.com/gpu capacity, or device-plugin \
         capacity and GPU ResourceSlices); an external node takes one GPU type only"
    )]
    MixedGpus,
    #[error("DRA devices: {0}")]
    Dra(#[from] DraError),
    #[error(
        "Slurm node name {0:?} (label slinky.slurm.net/slurm-nodename or the node name) must be \
         non-empty, without spaces, quotes, '=' or ','"
    )]
    SlurmName(String),
    #[error(
        "annotation topology.slinky.slurm.net/spec is {0:?}; it must not contain spaces or quotes \
         (e.g. topo-switch:s2,topo-block:b2)"
    )]
    Topology(String),
}

/// The partitions annotation: comma-separated, items trimmed, empty items and repeats dropped.
pub fn partitions(node: &Node) -> Vec<String> {
    let mut seen = BTreeSet::new();
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_EXTERNAL_NODE_PARTITIONS))
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty() && seen.insert(p.to_string()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The wanted partitions that are not among `existing`.
pub fn missing_partitions(wanted: &[String], existing: &[String]) -> Vec<String> {
    wanted
        .iter()
        .filter(|p| !existing.contains(p))
        .cloned()
        .collect()
}

/// `resource` in one of the node status's quantity maps (`capacity`, `allocatable`), parsed.
fn status_quantity(
    node: &Node,
    map: impl FnOnce(&NodeStatus) -> Option<&BTreeMap<String, K8sQuantity>>,
    resource: &str,
) -> Result<Option<Quantity>, DesiredError> {
    node.status
        .as_ref()
        .and_then(map)
        .and_then(|m| m.get(resource))
        .map(|q| {
            Quantity::from_k8s(q).map_err(|source| DesiredError::Quantity {
                resource: resource.to_string(),
                source,
            })
        })
        .transpose()
}

fn capacity(node: &Node, resource: &str) -> Result<Option<Quantity>, DesiredError> {
    status_quantity(node, |s| s.capacity.as_ref(), resource)
}

/// The kubelet's `allocatable` of `resource` (what it admits pods within), else `capacity`;
/// true when it came from allocatable.
fn allocatable(node: &Node, resource: &str) -> Result<Option<(Quantity, bool)>, DesiredError> {
    let from_allocatable = status_quantity(node, |s| s.allocatable.as_ref(), resource)?;
    match from_allocatable {
        Some(q) => Ok(Some((q, true))),
        None => Ok(capacity(node, resource)?.map(|q| (q, false))),
    }
}

fn out_of_range(resource: &str, q: Quantity, min: u32) -> DesiredError {
    DesiredError::OutOfRange {
        resource: resource.to_string(),
        value: q.to_string(),
        min,
    }
}

/// GRES and GRES configuration from device-plugin GPU capacity (`nvidia.com/gpu`,
/// `amd.com/gpu`): `gpu:<vendor>:<n>` and `count=<n>,name=gpu,type=<vendor>,file=gpu-0,...`.
/// The type is the resource's vendor domain (a pod's `gres/gpu=N` matches any type).
pub fn gpu_gres(node: &Node) -> Result<(String, String), DesiredError> {
    let mut found = Vec::new();
    for resource in DEVICE_PLUGIN_GPUS {
        let Some(q) = capacity(node, resource)? else {
            continue;
        };
        let count = q
            .as_integer()
            .filter(|n| (0..=i128::from(u16::MAX)).contains(n))
            .ok_or_else(|| out_of_range(resource, q, 0))?;
        if count > 0 {
            let vendor = resource.split('/').next().unwrap_or(resource);
            found.push((vendor, count));
        }
    }
    match found.as_slice() {
        [] => Ok((String::new(), String::new())),
        [(vendor, count)] => {
            let files: Vec<String> = (0..*count).map(|i| format!("file=gpu-{i}")).collect();
            Ok((
                format!("gpu:{vendor}:{count}"),
                format!("count={count},name=gpu,type={vendor},{}", files.join(",")),
            ))
        }
        _ => Err(DesiredError::MixedGpus),
    }
}

fn internal_ip(node: &Node) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .filter(|a| !a.is_empty() && a.parse::<std::net::IpAddr>().is_ok())
}

fn conf_safe(s: &str) -> bool {
    !s.chars()
        .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '=' | ','))
}

/// The Slurm node `node` should be, with its DRA devices `inv` (empty without slices).
pub fn desired(node: &Node, inv: &NodeInventory) -> Result<Desired, DesiredError> {
    let slurm_name = slurm_node_name(node);
    if slurm_name.is_empty() || !conf_safe(&slurm_name) {
        return Err(DesiredError::SlurmName(slurm_name));
    }
    let (cpu, admitted) = allocatable(node, "cpu")?.ok_or(DesiredError::MissingCapacity("cpu"))?;
    // The kubelet admits pods within its allocatable: never more whole CPUs than it holds.
    let whole = if admitted {
        cpu.nanos().div_euclid(1_000_000_000)
    } else {
        cpu.ceil_units()
    };
    let cpus = u32::try_from(whole)
        .ok()
        .filter(|c| *c >= 1)
        .ok_or_else(|| out_of_range("cpu", cpu, 1))?;
    let (memory, _) =
        allocatable(node, "memory")?.ok_or(DesiredError::MissingCapacity("memory"))?;
    let memory_mib = u64::try_from(memory.ceil_units() / MIB)
        .ok()
        .filter(|m| *m >= 1)
        .ok_or_else(|| out_of_range("memory", memory, 1))?;
    let (mut cpus, mut cores) = (cpus, cpus);
    if inv.cpus.slurm_cores() > 0 {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        cpus = n(inv.cpus.slurm_cpus());
        cores = n(inv.cpus.slurm_cores());
    }
    let (plugin_gres, plugin_conf) = gpu_gres(node)?;
    let (dra_gres, dra_conf) = inv.gres_and_conf()?;
    let (gres, gres_conf) = match (plugin_gres.is_empty(), dra_gres.is_empty()) {
        (_, true) => (plugin_gres, plugin_conf),
        (true, false) => (dra_gres, dra_conf),
        (false, false) => return Err(DesiredError::MixedGpus),
    };
    let topology = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_TOPOLOGY_SPEC))
        .map(|t| t.trim().to_string())
        .unwrap_or_default();
    if topology
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '"' | '\''))
    {
        return Err(DesiredError::Topology(topology));
    }
    Ok(Desired {
        slurm_name,
        cpus,
        cores,
        memory_mib,
        gres,
        gres_conf,
        partitions: partitions(node),
        topology,
        address: internal_ip(node),
    })
}

/// The slurm.conf node line of POST /new/node/, e.g.
/// `NodeName=n1 NodeAddr=10.0.0.1 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 CPUs=4
/// RealMemory=8192 State=External Feature=a,b Topology=topo-switch:s1 Gres="" GresConf=""`.
pub fn node_conf(d: &Desired) -> String {
    let mut conf = format!("NodeName={}", d.slurm_name);
    if let Some(addr) = &d.address {
        conf.push_str(&format!(" NodeAddr={addr}"));
    }
    let threads = d.cpus.checked_div(d.cores).unwrap_or(1).max(1);
    conf.push_str(&format!(
        " Sockets=1 CoresPerSocket={cores} ThreadsPerCore={threads} CPUs={cpus} RealMemory={mem} State=External",
        cores = d.cores,
        cpus = d.cpus,
        mem = d.memory_mib
    ));
    if !d.partitions.is_empty() {
        conf.push_str(&format!(" Feature={}", d.partitions.join(",")));
    }
    if !d.topology.is_empty() {
        conf.push_str(&format!(" Topology={}", d.topology));
    }
    conf.push_str(&format!(
        " Gres=\"{}\" GresConf=\"{}\"",
        d.gres, d.gres_conf
    ));
    conf
}

/// GRES as Slurm reports it, comparable with [`Desired::gres`]: entries sorted, socket
/// affinity (`(S:0-1)`) and `(null)` dropped.
pub fn normalize_gres(gres: Option<&str>) -> String {
    let mut entries: Vec<String> = gres
        .unwrap_or_default()
        .split(',')
        .map(|e| match e.find('(') {
            Some(i) => e[..i].trim(),
            None => e.trim(),
        })
        .filter(|e| !e.is_empty() && *e != "null")
        .map(str::to_string)
        .collect();
    entries.sort();
    entries.join(",")
}

/// Why the Slurm node must be re-created to match (empty: it matches): CPUs, cores, memory,
/// GRES, or the partitions (features) differ. Features count because Slurm evaluates a partition's
/// `Nodeset Feature=` only when a node is created (or on `scontrol reconfigure`): an updated
/// feature list leaves the node outside its new partitions (tried on Slurm 26.05). Features are
/// compared only while the annotation names partitions; they are never cleared when it goes, as
/// in the reference. Only external nodes are ever re-created; the caller checks that.
pub fn recreate_reasons(d: &Desired, slurm: &SlurmNode) -> Vec<String> {
    let mut why = Vec::new();
    let cpus = slurm.cpus.unwrap_or_default();
    if i64::from(cpus) != i64::from(d.cpus) {
        why.push(format!("CPUs {cpus} -> {}", d.cpus));
    }
    // Same CPUs, other cores: the SMT layout of the `dra.cpu` slices changed, and with it which
    // machine CPUs each of Slurm's abstract cores stands for.
    if let Some(cores) = slurm.cores.filter(|c| *c > 0)
        && i64::from(cores) * i64::from(slurm.sockets.unwrap_or(1).max(1)) != i64::from(d.cores)
    {
        why.push(format!("cores {cores} -> {}", d.cores));
    }
    let mem = slurm.real_memory.unwrap_or_default();
    if u64::try_from(mem).ok() != Some(d.memory_mib) {
        why.push(format!("memory {mem} -> {} MiB", d.memory_mib));
    }
    let gres = normalize_gres(slurm.gres.as_deref());
    if gres != normalize_gres(Some(&d.gres)) {
        why.push(format!("GRES {gres:?} -> {:?}", d.gres));
    }
    if !d.partitions.is_empty() && !same_set(&slurm.features, &d.partitions) {
        why.push(format!(
            "features {:?} -> {:?}",
            slurm.features, d.partitions
        ));
    }
    why
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

/// `d` for re-creating `slurm`: without the partitions annotation the node keeps the features it
/// has, as an existing node's are never cleared when the annotation goes. (Re-created with none,
/// a node put in its partitions by an admin's features would silently leave them.)
pub fn keeping_features(mut d: Desired, slurm: &SlurmNode) -> Desired {
    if d.partitions.is_empty() {
        d.partitions = slurm.features.clone();
    }
    d
}

/// The topology update of an existing node: the annotation, or `""` (clears) without it.
pub fn topology_update(d: &Desired, slurm: &SlurmNode) -> Option<UpdateNodeMsg> {
    if slurm.topology.as_deref().unwrap_or_default() == d.topology {
        return None;
    }
    Some(UpdateNodeMsg {
        topology_str: Some(d.topology.clone()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests;
