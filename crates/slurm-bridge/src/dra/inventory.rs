//! A node's DRA devices from its ResourceSlices, and Slurm's GRES index lists.

use super::{DraError, GresDrivers, MAX_INDICES};
use crate::resources::cpumap::{CpuInfo, CpuMap};
use crate::wellknown::DEVICECLASS_DRA_CPU;
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use std::collections::{BTreeMap, BTreeSet};

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
    /// `index` attribute (gpu.example.com), the number of `gpu-<n>` (gpu.nvidia.com), or as
    /// the config says for its drivers ([`GresDrivers::index_of`]).
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
    /// The inventory of `node` from `slices` (any slices; those of other nodes are skipped),
    /// with the built-in GPU drivers only ([`GresDrivers::builtin`]).
    pub fn from_slices<'a>(
        node: &str,
        slices: impl IntoIterator<Item = &'a ResourceSlice>,
    ) -> NodeInventory {
        Self::with_drivers(node, slices, &GresDrivers::builtin())
    }

    /// The inventory of `node` from `slices`, the devices of `drivers` as GPUs (GRES).
    pub fn with_drivers<'a>(
        node: &str,
        slices: impl IntoIterator<Item = &'a ResourceSlice>,
        drivers: &GresDrivers,
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
                } else if drivers.contains(driver) {
                    let index = drivers.index_of(driver, d);
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
