//! The part of a node's Slurm allocation (cores, GRES indices) that each pod placed there gets.

use super::{DeviceAsk, DraError, NodeInventory, parse_gres_index};
use crate::resources::bitmap::parse_core_bitmap;
use std::collections::{BTreeMap, BTreeSet};

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
                        cores: crate::resources::bitmap::format_core_bitmap(&alloc.cores),
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
