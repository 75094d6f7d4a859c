//! DRA devices of a node and of a pod (reference §1.6, §5.7, §5.10). Pure, no I/O.
//!
//! - [`NodeInventory`]: a node's CPUs (`dra.cpu`) and GPUs (`gpu.nvidia.com`, `gpu.example.com`)
//!   from its ResourceSlices, and the `Gres=`/`GresConf=` it registers in Slurm with.
//! - [`parse_gres_index`]: Slurm's GRES index lists (`0-1,3`).
//! - [`DeviceAsk`]: what a pod asks of DRA extended resources (`deviceclass.resource.kubernetes.io/<class>`).
//! - [`share`]: the part of a node's Slurm allocation that one pod gets, and [`claim_parts`] the
//!   ResourceClaim requests and allocation results naming exactly those devices.
//!
//! Merging slices (a difference from the reference, which let the last slice of a kind win): a
//! node's devices are the union of the devices of all its slices per driver. When two slices
//! describe the same CPU id or GPU index, the slice of the newer pool generation wins, then the
//! slice name sorting last, so the result does not depend on list order.

use super::bitmap::{BitmapError, parse_core_bitmap};
use super::cpumap::{CpuInfo, CpuMap};
use super::quantity::Quantity;
use crate::wellknown::{DEVICECLASS_DRA_CPU, DEVICECLASS_PREFIX, GPU_DEVICECLASSES};
use k8s_openapi::api::core::v1::{ContainerExtendedResourceRequest, Pod};
use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, Device, DeviceRequest, DeviceRequestAllocationResult, DeviceSelector,
    ExactDeviceRequest, ResourceSlice,
};
use std::collections::{BTreeMap, BTreeSet};

/// DeviceClass (and driver) names of the GPU drivers.
pub const GPU_NVIDIA: &str = "gpu.nvidia.com";
pub const GPU_EXAMPLE: &str = "gpu.example.com";
/// The request name of CPUs in a generated claim.
pub const REQUEST_CPU: &str = "cpu";
/// The request name of GPUs in a generated claim (the GRES name).
pub const REQUEST_GPU: &str = "gpu";
/// Largest number of indices one GRES index list may expand to.
const MAX_INDICES: usize = 1 << 16;

/// Why DRA devices cannot be worked out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraError {
    #[error("GRES index list {input:?} does not parse (e.g. 0-1,3): {reason}")]
    Index { input: String, reason: String },
    #[error(transparent)]
    Bitmap(#[from] BitmapError),
    #[error(
        "the node has GPUs of more than one DRA driver ({0}); an external node takes one GPU type only"
    )]
    MixedGpus(String),
    #[error(
        "DeviceClass {class:?} is asked in containers {first:?} and {second:?}; a DRA class may be \
         asked in one container only"
    )]
    ClassInTwoContainers {
        class: String,
        first: String,
        second: String,
    },
    #[error("resource {resource}: {value} is not a whole number of devices")]
    NotWhole { resource: String, value: String },
    #[error(
        "the pod asks for CPU DRA resource \"deviceclass.resource.kubernetes.io/dra.cpu\" but \
         DeviceClass \"dra.cpu\" does not exist"
    )]
    NoCpuDeviceClass,
    #[error(
        "the pod asks for CPU DRA resource \"deviceclass.resource.kubernetes.io/dra.cpu\" but \
         node {node} has no dra.cpu ResourceSlice"
    )]
    NoCpuSlice { node: String },
    #[error(
        "Slurm allocated {allocated} CPU(s) on node {node} (cores {cores}); the pod asks for {asked}"
    )]
    NotEnoughCpus {
        node: String,
        cores: String,
        allocated: usize,
        asked: u64,
    },
    #[error(
        "not enough allocated Slurm GRES indices for DeviceClass {class:?} on node {node}: \
         requested {asked}, allocated {allocated}"
    )]
    NotEnoughGres {
        node: String,
        class: String,
        asked: u64,
        allocated: usize,
    },
    #[error("cpu ID {cpu} from the Slurm allocation not found on node {node}'s dra.cpu slices")]
    CpuNotOnNode { node: String, cpu: i64 },
    #[error(
        "GRES index {index} ({class}) from the Slurm allocation not found on node {node}'s \
         ResourceSlices ({count} device(s))"
    )]
    GpuNotOnNode {
        node: String,
        class: String,
        index: u32,
        count: usize,
    },
}

/// Expands a Slurm GRES index list: `0-1,3` → [0, 1, 3]. Also takes the `IDX:` form
/// (`gpu:a100:2(IDX:0-1)` shows `IDX:0-1`) and brackets. Order is Slurm's; repeats are dropped.
pub fn parse_gres_index(input: &str) -> Result<Vec<u32>, DraError> {
    let err = |reason: String| DraError::Index {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    let s = s.strip_prefix("IDX:").unwrap_or(s);
    let s = s
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(s);
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    if s.trim().is_empty() {
        return Err(err("empty".into()));
    }
    let num = |t: &str| {
        let t = t.trim();
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(format!("{t:?} is not an index")));
        }
        t.parse::<u32>()
            .map_err(|_| err(format!("{t:?} is out of range")))
    };
    for part in s.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(part)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(err(format!("range {part:?} goes down")));
        }
        if out.len() + (hi - lo) as usize >= MAX_INDICES {
            return Err(err(format!("more than {MAX_INDICES} indices")));
        }
        for i in lo..=hi {
            if seen.insert(i) {
                out.push(i);
            }
        }
    }
    Ok(out)
}

/// One GPU of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuDevice {
    /// Device name in the slice (`gpu-0`).
    pub name: String,
    pub pool: String,
    /// `index` attribute (gpu.example.com) or the number of `gpu-<n>` (gpu.nvidia.com).
    pub index: i64,
}

/// A node's DRA devices, from all its ResourceSlices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInventory {
    /// CPUs of the `dra.cpu` slices.
    pub cpus: CpuMap,
    /// Pool of each CPU, by cpu id.
    pub cpu_pools: BTreeMap<i64, String>,
    /// GPUs by driver, each sorted by index: position `i` is Slurm's GRES index `i` (the order
    /// of the `file=` entries registered).
    pub gpus: BTreeMap<String, Vec<GpuDevice>>,
}

fn int_attr(driver: &str, d: &Device, name: &str) -> Option<i64> {
    let attrs = d.attributes.as_ref()?;
    attrs
        .get(&format!("{driver}/{name}"))
        .or_else(|| attrs.get(name))
        .and_then(|a| a.int)
}

/// Slice order for merging: older generation first, then name; later entries win.
fn merge_order(slices: &mut [&ResourceSlice]) {
    slices.sort_by_key(|s| (s.spec.pool.generation, s.metadata.name.clone()));
}

impl NodeInventory {
    /// The inventory of `node` from `slices` (any slices; those of other nodes are skipped).
    pub fn from_slices<'a>(
        node: &str,
        slices: impl IntoIterator<Item = &'a ResourceSlice>,
    ) -> NodeInventory {
        let mut mine: Vec<&ResourceSlice> = slices
            .into_iter()
            .filter(|s| s.spec.node_name.as_deref() == Some(node))
            .collect();
        merge_order(&mut mine);
        let mut cpus: BTreeMap<i64, (CpuInfo, String)> = BTreeMap::new();
        let mut gpus: BTreeMap<String, BTreeMap<i64, GpuDevice>> = BTreeMap::new();
        for s in mine {
            let driver = s.spec.driver.as_str();
            let pool = &s.spec.pool.name;
            for d in s.spec.devices.iter().flatten() {
                if driver == DEVICECLASS_DRA_CPU {
                    let info = CpuInfo {
                        name: d.name.clone(),
                        cpu_id: int_attr(driver, d, "cpuID").unwrap_or(-1),
                        core_id: int_attr(driver, d, "coreID").unwrap_or(-1),
                        socket_id: int_attr(driver, d, "socketID").unwrap_or(-1),
                        core_type: int_attr(driver, d, "coreType").unwrap_or(0),
                    };
                    if info.cpu_id >= 0 {
                        cpus.insert(info.cpu_id, (info, pool.clone()));
                    }
                } else if GPU_DEVICECLASSES.contains(&driver) {
                    let index = if driver == GPU_NVIDIA {
                        d.name
                            .strip_prefix("gpu-")
                            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                            .and_then(|n| n.parse::<i64>().ok())
                    } else {
                        int_attr(driver, d, "index").filter(|i| *i >= 0)
                    };
                    if let Some(index) = index {
                        gpus.entry(driver.to_string()).or_default().insert(
                            index,
                            GpuDevice {
                                name: d.name.clone(),
                                pool: pool.clone(),
                                index,
                            },
                        );
                    }
                }
            }
        }
        NodeInventory {
            cpus: CpuMap::new(cpus.values().map(|(c, _)| c.clone())),
            cpu_pools: cpus.iter().map(|(id, (_, p))| (*id, p.clone())).collect(),
            gpus: gpus
                .into_iter()
                .map(|(k, v)| (k, v.into_values().collect()))
                .collect(),
        }
    }

    /// True when the node has no DRA device the bridge uses.
    pub fn is_empty(&self) -> bool {
        self.cpus.cpus.is_empty() && self.gpus.is_empty()
    }

    /// `Gres=` and `GresConf=` for registration: `gpu:<driver>:<n>` and
    /// `count=<n>,name=gpu,type=<driver>,file=<dev0>,...` (devices by index); empty strings
    /// without GPUs.
    pub fn gres_and_conf(&self) -> Result<(String, String), DraError> {
        let mut drivers = self.gpus.iter().filter(|(_, v)| !v.is_empty());
        let Some((driver, devices)) = drivers.next() else {
            return Ok((String::new(), String::new()));
        };
        if drivers.next().is_some() {
            return Err(DraError::MixedGpus(
                self.gpus.keys().cloned().collect::<Vec<_>>().join(", "),
            ));
        }
        let n = devices.len();
        let files: Vec<String> = devices.iter().map(|d| format!("file={}", d.name)).collect();
        Ok((
            format!("gpu:{driver}:{n}"),
            format!("count={n},name=gpu,type={driver},{}", files.join(",")),
        ))
    }
}

/// What a pod asks of DRA extended resources.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAsk {
    /// CPUs of `deviceclass.resource.kubernetes.io/dra.cpu` (summed over containers).
    pub cpus: u64,
    /// Devices per GPU DeviceClass.
    pub gpus: BTreeMap<String, u64>,
    /// `(container, class, full resource name)`, init containers first, for the pod's
    /// `extendedResourceClaimStatus`.
    pub containers: Vec<(String, String, String)>,
}

impl DeviceAsk {
    /// The DRA extended resources a pod asks for (requests, falling back to limits), `None` when
    /// it asks for none. Refuses a GPU class asked in two containers and fractional counts.
    pub fn of(pod: &Pod) -> Result<Option<DeviceAsk>, DraError> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(None);
        };
        let mut ask = DeviceAsk::default();
        let mut owner: BTreeMap<String, String> = BTreeMap::new();
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter());
        for c in containers {
            let Some(res) = c.resources.as_ref() else {
                continue;
            };
            let mut asked: BTreeMap<
                &String,
                &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
            > = res.limits.iter().flatten().collect();
            asked.extend(res.requests.iter().flatten());
            for (name, q) in asked {
                let Some(class) = name.strip_prefix(DEVICECLASS_PREFIX) else {
                    continue;
                };
                let n = Quantity::from_k8s(q)
                    .ok()
                    .and_then(|q| q.as_integer())
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| DraError::NotWhole {
                        resource: name.clone(),
                        value: q.0.clone(),
                    })?;
                if n == 0 {
                    continue;
                }
                if class == DEVICECLASS_DRA_CPU {
                    ask.cpus += n;
                } else {
                    if let Some(first) = owner.get(class)
                        && first != &c.name
                    {
                        return Err(DraError::ClassInTwoContainers {
                            class: class.to_string(),
                            first: first.clone(),
                            second: c.name.clone(),
                        });
                    }
                    owner.insert(class.to_string(), c.name.clone());
                    *ask.gpus.entry(class.to_string()).or_default() = n;
                }
                ask.containers
                    .push((c.name.clone(), class.to_string(), name.clone()));
            }
        }
        Ok((ask.cpus > 0 || !ask.gpus.is_empty()).then_some(ask))
    }
}

/// What Slurm allocated a job on one node: abstract cores and GRES indices per type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAllocation {
    pub cores: BTreeSet<usize>,
    pub gres: BTreeMap<String, Vec<u32>>,
}

impl NodeAllocation {
    /// From the `core_bitmap` and GRES entries (`type`, `index`) of GET /resources/{id}.
    pub fn parse<'a>(
        core_bitmap: Option<&str>,
        gres: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>)>,
    ) -> Result<NodeAllocation, DraError> {
        let mut a = NodeAllocation {
            cores: parse_core_bitmap(core_bitmap.unwrap_or_default())?,
            ..Default::default()
        };
        for (t, index) in gres {
            let idx = match index.map(str::trim).filter(|i| !i.is_empty()) {
                Some(i) => parse_gres_index(i)?,
                None => continue,
            };
            a.gres
                .entry(t.unwrap_or_default().to_string())
                .or_default()
                .extend(idx);
        }
        Ok(a)
    }
}

/// The devices one pod gets of a node's allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Share {
    /// Machine CPUs (of whole abstract cores).
    pub cpus: BTreeSet<i64>,
    /// Slurm GRES indices per GPU class.
    pub gpus: BTreeMap<String, Vec<u32>>,
}

/// Splits a node's allocation between the pods placed on it, in the given order: each pod gets
/// what it asked for and no device goes to two pods. CPUs go by whole abstract cores (SMT
/// siblings together), in core order, until the pod's count is met; GPUs by Slurm's index order.
pub fn share(
    node: &str,
    inv: &NodeInventory,
    alloc: &NodeAllocation,
    asks: &[&DeviceAsk],
) -> Result<Vec<Share>, DraError> {
    let mut cores = alloc.cores.iter().copied();
    let mut gres: BTreeMap<&str, std::slice::Iter<'_, u32>> = alloc
        .gres
        .iter()
        .map(|(k, v)| (k.as_str(), v.iter()))
        .collect();
    let mut out = Vec::new();
    for ask in asks {
        let mut s = Share::default();
        if ask.cpus > 0 {
            if inv.cpus.slurm_cores() == 0 {
                return Err(DraError::NoCpuSlice {
                    node: node.to_string(),
                });
            }
            while (s.cpus.len() as u64) < ask.cpus {
                let Some(core) = cores.next() else {
                    return Err(DraError::NotEnoughCpus {
                        node: node.to_string(),
                        cores: super::bitmap::format_core_bitmap(&alloc.cores),
                        allocated: inv.cpus.to_machine_cpus(&alloc.cores).len(),
                        asked: ask.cpus,
                    });
                };
                s.cpus.extend(inv.cpus.to_machine_cpus(&[core].into()));
            }
        }
        for (class, n) in &ask.gpus {
            let allocated = alloc.gres.get(class).map_or(0, Vec::len);
            let it = gres.get_mut(class.as_str());
            let taken: Vec<u32> = it
                .map(|i| i.take(*n as usize).copied().collect())
                .unwrap_or_default();
            if (taken.len() as u64) < *n {
                return Err(DraError::NotEnoughGres {
                    node: node.to_string(),
                    class: class.clone(),
                    asked: *n,
                    allocated,
                });
            }
            s.gpus.insert(class.clone(), taken);
        }
        out.push(s);
    }
    Ok(out)
}

/// A claim's device requests, their allocation results, and the pod's request mappings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimParts {
    pub requests: Vec<DeviceRequest>,
    pub results: Vec<DeviceRequestAllocationResult>,
    pub mappings: Vec<ContainerExtendedResourceRequest>,
}

fn exact(class: &str, name: &str, count: usize, cel: String) -> DeviceRequest {
    DeviceRequest {
        name: name.to_string(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.to_string(),
            allocation_mode: Some("ExactCount".into()),
            count: Some(count as i64),
            selectors: Some(vec![DeviceSelector {
                cel: Some(CELDeviceSelector { expression: cel }),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn join<T: ToString>(v: impl IntoIterator<Item = T>) -> String {
    v.into_iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The claim naming exactly `share`'s devices. `classes` are the DeviceClasses that exist: a GPU
/// class without one is left out of the claim (as the reference), a CPU ask without `dra.cpu`
/// is refused.
pub fn claim_parts(
    node: &str,
    inv: &NodeInventory,
    ask: &DeviceAsk,
    share: &Share,
    classes: &BTreeSet<String>,
) -> Result<ClaimParts, DraError> {
    let mut parts = ClaimParts::default();
    let mut request_of: BTreeMap<&str, &str> = BTreeMap::new();
    if !share.cpus.is_empty() {
        if !classes.contains(DEVICECLASS_DRA_CPU) {
            return Err(DraError::NoCpuDeviceClass);
        }
        parts.requests.push(exact(
            DEVICECLASS_DRA_CPU,
            REQUEST_CPU,
            share.cpus.len(),
            format!(
                "device.attributes['dra.cpu'].cpuID in [{}]",
                join(&share.cpus)
            ),
        ));
        for cpu in &share.cpus {
            let (Some(info), Some(pool)) = (inv.cpus.cpus.get(cpu), inv.cpu_pools.get(cpu)) else {
                return Err(DraError::CpuNotOnNode {
                    node: node.to_string(),
                    cpu: *cpu,
                });
            };
            parts.results.push(DeviceRequestAllocationResult {
                request: REQUEST_CPU.into(),
                driver: DEVICECLASS_DRA_CPU.into(),
                pool: pool.clone(),
                device: info.name.clone(),
                ..Default::default()
            });
        }
        request_of.insert(DEVICECLASS_DRA_CPU, REQUEST_CPU);
    }
    for (class, indices) in &share.gpus {
        if !classes.contains(class) {
            tracing::debug!(%class, "no DeviceClass: the claim leaves these devices out");
            continue;
        }
        let devices = inv.gpus.get(class).map(Vec::as_slice).unwrap_or_default();
        let mut chosen = Vec::new();
        for i in indices {
            let d = devices
                .get(*i as usize)
                .ok_or_else(|| DraError::GpuNotOnNode {
                    node: node.to_string(),
                    class: class.clone(),
                    index: *i,
                    count: devices.len(),
                })?;
            chosen.push(d);
            parts.results.push(DeviceRequestAllocationResult {
                request: REQUEST_GPU.into(),
                driver: class.clone(),
                pool: d.pool.clone(),
                device: d.name.clone(),
                ..Default::default()
            });
        }
        let cel = if class == GPU_NVIDIA {
            format!(
                "device.attributes['{class}'].name in [{}]",
                join(chosen.iter().map(|d| format!("'{}'", d.name)))
            )
        } else {
            format!(
                "device.attributes['{class}'].index in [{}]",
                join(chosen.iter().map(|d| d.index))
            )
        };
        parts
            .requests
            .push(exact(class, REQUEST_GPU, chosen.len(), cel));
        request_of.insert(class, REQUEST_GPU);
    }
    for (container, class, resource) in &ask.containers {
        if let Some(req) = request_of.get(class.as_str()) {
            parts.mappings.push(ContainerExtendedResourceRequest {
                container_name: container.clone(),
                request_name: req.to_string(),
                resource_name: resource.clone(),
            });
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn slice(
        name: &str,
        node: &str,
        driver: &str,
        pool: &str,
        devices: serde_json::Value,
    ) -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices},
        }))
        .expect("slice")
    }

    /// `dra.cpu` devices: (cpu, core, socket, type).
    pub fn cpu_devices(cpus: &[(i64, i64, i64, i64)]) -> serde_json::Value {
        json!(
            cpus.iter()
                .map(|(c, core, s, t)| json!({
                    "name": format!("cpu{c}"),
                    "attributes": {
                        "dra.cpu/cpuID": {"int": c}, "dra.cpu/coreID": {"int": core},
                        "dra.cpu/socketID": {"int": s}, "dra.cpu/coreType": {"int": t},
                    }
                }))
                .collect::<Vec<_>>()
        )
    }

    fn example_gpus(idx: &[i64]) -> serde_json::Value {
        json!(
            idx.iter()
                .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"index": {"int": i}}}))
                .collect::<Vec<_>>()
        )
    }

    #[test]
    fn gres_index_lists() {
        assert_eq!(parse_gres_index("0").unwrap(), [0]);
        assert_eq!(parse_gres_index("0-1").unwrap(), [0, 1]);
        assert_eq!(parse_gres_index("0,2-3").unwrap(), [0, 2, 3]);
        assert_eq!(parse_gres_index("IDX:1-2").unwrap(), [1, 2]);
        assert_eq!(parse_gres_index("[3,1]").unwrap(), [3, 1]);
        for bad in ["", " ", "a", "1-", "-1", "3-1", "1,,2", "0-99999999"] {
            assert!(parse_gres_index(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// A list of ranges expands to exactly their members, in order, once each.
        #[test]
        fn gres_index_expands(ranges in proptest::collection::vec((0u32..200, 0u32..5), 1..6)) {
            let text = ranges.iter().map(|(a, l)| if *l == 0 { a.to_string() } else { format!("{a}-{}", a + l) })
                .collect::<Vec<_>>().join(",");
            let mut want = Vec::new();
            for (a, l) in &ranges {
                for i in *a..=a + l {
                    if !want.contains(&i) { want.push(i); }
                }
            }
            prop_assert_eq!(parse_gres_index(&text).unwrap(), want);
        }
    }

    #[test]
    fn inventory_and_gres_strings() {
        let s = [
            slice(
                "cpu",
                "n1",
                "dra.cpu",
                "n1",
                cpu_devices(&[
                    (0, 0, 0, 1),
                    (1, 0, 0, 1),
                    (2, 0, 1, 1),
                    (3, 0, 1, 1),
                    (4, 1, 0, 3),
                    (5, 1, 1, 3),
                ]),
            ),
            slice(
                "gpu",
                "n1",
                GPU_EXAMPLE,
                "pool-numa0",
                example_gpus(&[0, 1, 2, 3]),
            ),
            slice("other", "n2", GPU_EXAMPLE, "x", example_gpus(&[0])),
        ];
        let inv = NodeInventory::from_slices("n1", &s);
        assert_eq!((inv.cpus.slurm_cpus(), inv.cpus.slurm_cores()), (4, 2));
        assert_eq!(
            inv.gres_and_conf().unwrap(),
            (
                "gpu:gpu.example.com:4".into(),
                "count=4,name=gpu,type=gpu.example.com,file=gpu-0,file=gpu-1,file=gpu-2,file=gpu-3"
                    .into()
            )
        );
        let one = NodeInventory::from_slices("n2", &s);
        assert_eq!(
            one.gres_and_conf().unwrap().1,
            "count=1,name=gpu,type=gpu.example.com,file=gpu-0"
        );
        assert_eq!(
            NodeInventory::from_slices("n3", &s)
                .gres_and_conf()
                .unwrap(),
            (String::new(), String::new())
        );
        // Nvidia: names gpu-<n> only.
        let nv = [slice(
            "nv",
            "n1",
            GPU_NVIDIA,
            "n1",
            json!([{"name": "gpu-1"}, {"name": "gpu-0"}, {"name": "mig-1"}]),
        )];
        let inv = NodeInventory::from_slices("n1", &nv);
        assert_eq!(inv.gres_and_conf().unwrap().0, "gpu:gpu.nvidia.com:2");
        // Two slices of one driver merge.
        let split = [
            slice("a", "n1", GPU_EXAMPLE, "p", example_gpus(&[0, 1])),
            slice("b", "n1", GPU_EXAMPLE, "p", example_gpus(&[2])),
        ];
        assert_eq!(
            NodeInventory::from_slices("n1", &split)
                .gres_and_conf()
                .unwrap()
                .0,
            "gpu:gpu.example.com:3"
        );
        // Two GPU drivers: refused.
        let mixed = [split[0].clone(), nv[0].clone()];
        assert!(matches!(
            NodeInventory::from_slices("n1", &mixed).gres_and_conf(),
            Err(DraError::MixedGpus(_))
        ));
    }

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": containers}}),
        )
        .unwrap()
    }

    #[test]
    fn asks_and_claims() {
        let s = [
            slice(
                "cpu",
                "n1",
                "dra.cpu",
                "n1",
                cpu_devices(&[(0, 0, 0, 1), (1, 0, 0, 1), (2, 1, 0, 1), (3, 1, 0, 1)]),
            ),
            slice(
                "gpu",
                "n1",
                GPU_EXAMPLE,
                "pool-numa0",
                example_gpus(&[0, 1, 2, 3]),
            ),
        ];
        let inv = NodeInventory::from_slices("n1", &s);
        let gpu_pod = |n: &str| {
            pod(
                json!([{"name": "c", "image": "x", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.example.com": n}}}]),
            )
        };
        assert_eq!(DeviceAsk::of(&pod(json!([{"name": "c"}]))).unwrap(), None);
        let a = DeviceAsk::of(&gpu_pod("2")).unwrap().unwrap();
        let b = DeviceAsk::of(&gpu_pod("1")).unwrap().unwrap();
        let alloc = NodeAllocation::parse(Some("0x3"), [(Some(GPU_EXAMPLE), Some("1-3"))]).unwrap();
        let shares = share("n1", &inv, &alloc, &[&a, &b]).unwrap();
        assert_eq!(shares[0].gpus[GPU_EXAMPLE], [1, 2]);
        assert_eq!(shares[1].gpus[GPU_EXAMPLE], [3]);
        let classes: BTreeSet<String> = [GPU_EXAMPLE.to_string(), "dra.cpu".into()].into();
        let parts = claim_parts("n1", &inv, &a, &shares[0], &classes).unwrap();
        let devices: Vec<(&str, &str)> = parts
            .results
            .iter()
            .map(|r| (r.pool.as_str(), r.device.as_str()))
            .collect();
        assert_eq!(devices, [("pool-numa0", "gpu-1"), ("pool-numa0", "gpu-2")]);
        assert_eq!(
            parts.requests[0]
                .exactly
                .as_ref()
                .unwrap()
                .selectors
                .as_ref()
                .unwrap()[0]
                .cel
                .as_ref()
                .unwrap()
                .expression,
            "device.attributes['gpu.example.com'].index in [1,2]"
        );
        assert_eq!(parts.mappings[0].request_name, "gpu");
        // Too many asked.
        let c = DeviceAsk::of(&gpu_pod("2")).unwrap().unwrap();
        assert!(matches!(
            share("n1", &inv, &alloc, &[&a, &c]),
            Err(DraError::NotEnoughGres { .. })
        ));
        // An index the slices do not have.
        let far = Share {
            gpus: [(GPU_EXAMPLE.to_string(), vec![7])].into(),
            ..Default::default()
        };
        assert!(matches!(
            claim_parts("n1", &inv, &a, &far, &classes),
            Err(DraError::GpuNotOnNode { index: 7, .. })
        ));
        // CPU: bitmap {0} with SMT pair {0,1}.
        let cpu_pod = pod(
            json!([{"name": "c", "resources": {"requests": {"deviceclass.resource.kubernetes.io/dra.cpu": "2"}}}]),
        );
        let ask = DeviceAsk::of(&cpu_pod).unwrap().unwrap();
        let alloc = NodeAllocation::parse(Some("0x1"), []).unwrap();
        let sh = share("n1", &inv, &alloc, &[&ask]).unwrap();
        let parts = claim_parts("n1", &inv, &ask, &sh[0], &classes).unwrap();
        let ex = parts.requests[0].exactly.as_ref().unwrap();
        assert_eq!(ex.count, Some(2));
        assert_eq!(
            ex.selectors.as_ref().unwrap()[0]
                .cel
                .as_ref()
                .unwrap()
                .expression,
            "device.attributes['dra.cpu'].cpuID in [0,1]"
        );
        assert_eq!(
            parts
                .results
                .iter()
                .map(|r| r.device.as_str())
                .collect::<Vec<_>>(),
            ["cpu0", "cpu1"]
        );
        // No dra.cpu DeviceClass.
        assert_eq!(
            claim_parts("n1", &inv, &ask, &sh[0], &[GPU_EXAMPLE.to_string()].into()),
            Err(DraError::NoCpuDeviceClass)
        );
        // A GPU class in two containers.
        let two = pod(json!([
            {"name": "a", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.example.com": "1"}}},
            {"name": "b", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.example.com": "1"}}},
        ]));
        assert!(matches!(
            DeviceAsk::of(&two),
            Err(DraError::ClassInTwoContainers { .. })
        ));
    }
}
