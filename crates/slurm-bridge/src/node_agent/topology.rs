//! This machine's CPUs as Slurm numbers them: read from sysfs into a [`CpuMap`], so a job's
//! abstract cores (`core_bitmap`) become the machine CPUs a container is pinned to.

use crate::resources::cpulist::parse_cpu_list;
use crate::resources::cpumap::{CORE_TYPE_EFFICIENCY, CpuInfo, CpuMap};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// sysfs could not be read as a CPU topology.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Parse { path: PathBuf, reason: String },
}

/// The machine's CPUs: Slurm's abstract cores and each CPU's NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub cpus: CpuMap,
    /// Machine CPU → NUMA node (absent on machines sysfs shows no NUMA nodes for).
    pub numa: BTreeMap<i64, u32>,
}

impl Topology {
    /// For tests: `cpus` CPUs, each its own core, on one socket and no NUMA node.
    #[cfg(test)]
    pub(crate) fn flat(cpus: i64) -> Topology {
        Topology {
            cpus: CpuMap::new((0..cpus).map(|c| CpuInfo {
                name: format!("cpu{c}"),
                cpu_id: c,
                core_id: c,
                socket_id: 0,
                core_type: 0,
            })),
            numa: Default::default(),
        }
    }

    /// Reads `<root>/devices/system/cpu` (`root` is `/sys` on a node; tests give a copy).
    /// Efficiency cores are those `<root>/devices/cpu_atom/cpus` lists, as Slurm skips them.
    pub fn read(root: &Path) -> Result<Topology, TopologyError> {
        let cpu_dir = root.join("devices/system/cpu");
        let online = read_list(&cpu_dir.join("online"))?;
        let atom = root.join("devices/cpu_atom/cpus");
        let efficiency = if atom.exists() {
            read_list(&atom)?
        } else {
            BTreeSet::new()
        };
        let mut infos = Vec::new();
        let mut numa = BTreeMap::new();
        for cpu in online {
            let dir = cpu_dir.join(format!("cpu{cpu}"));
            let core_id = read_number(&dir.join("topology/core_id"))?;
            let socket_id = read_number(&dir.join("topology/physical_package_id"))?;
            infos.push(CpuInfo {
                name: format!("cpu{cpu}"),
                cpu_id: i64::from(cpu),
                core_id,
                socket_id,
                core_type: if efficiency.contains(&cpu) {
                    CORE_TYPE_EFFICIENCY
                } else {
                    0
                },
            });
            if let Some(node) = numa_node(&dir) {
                numa.insert(i64::from(cpu), node);
            }
        }
        Ok(Topology {
            cpus: CpuMap::new(infos),
            numa,
        })
    }

    /// The NUMA nodes of `cpus`, when the machine has more than one (else none: nothing to
    /// place).
    pub fn mems_of(&self, cpus: &BTreeSet<i64>) -> BTreeSet<u32> {
        let all: BTreeSet<u32> = self.numa.values().copied().collect();
        if all.len() < 2 {
            return BTreeSet::new();
        }
        cpus.iter()
            .filter_map(|c| self.numa.get(c))
            .copied()
            .collect()
    }
}

fn read(path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_list(path: &Path) -> Result<BTreeSet<u32>, TopologyError> {
    parse_cpu_list(&read(path)?).map_err(|e| TopologyError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn read_number(path: &Path) -> Result<i64, TopologyError> {
    let text = read(path)?;
    text.trim().parse().map_err(|_| TopologyError::Parse {
        path: path.to_path_buf(),
        reason: format!("{:?} is not a number", text.trim()),
    })
}

/// The `nodeN` link sysfs puts in a CPU's folder on NUMA machines.
fn numa_node(cpu_dir: &Path) -> Option<u32> {
    std::fs::read_dir(cpu_dir)
        .ok()?
        .flatten()
        .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder removed when dropped.
    struct Dir(PathBuf);
    impl Dir {
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A sysfs copy: `(cpu, core_id, socket, numa node)`.
    fn fake_sys(cpus: &[(u32, i64, i64, Option<u32>)], atom: Option<&str>) -> Dir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = Dir(std::env::temp_dir().join(format!("sb-sysfs-{}-{n}", std::process::id())));
        let base = root.path().join("devices/system/cpu");
        std::fs::create_dir_all(&base).unwrap();
        let online: Vec<u32> = cpus.iter().map(|c| c.0).collect();
        std::fs::write(
            base.join("online"),
            crate::resources::cpulist::format_cpu_list(&online) + "\n",
        )
        .unwrap();
        for (cpu, core, socket, node) in cpus {
            let t = base.join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("core_id"), format!("{core}\n")).unwrap();
            std::fs::write(t.join("physical_package_id"), format!("{socket}\n")).unwrap();
            if let Some(n) = node {
                std::fs::create_dir_all(base.join(format!("cpu{cpu}/node{n}"))).unwrap();
            }
        }
        if let Some(list) = atom {
            let d = root.path().join("devices/cpu_atom");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpus"), list).unwrap();
        }
        root
    }

    #[test]
    fn smt_siblings_share_an_abstract_core_in_socket_then_core_order() {
        // Linux numbers the second thread of each core after all first threads.
        let sys = fake_sys(
            &[
                (0, 0, 0, Some(0)),
                (1, 1, 0, Some(0)),
                (2, 0, 1, Some(1)),
                (3, 1, 1, Some(1)),
                (4, 0, 0, Some(0)),
                (5, 1, 0, Some(0)),
                (6, 0, 1, Some(1)),
                (7, 1, 1, Some(1)),
            ],
            None,
        );
        let t = Topology::read(sys.path()).unwrap();
        assert_eq!(t.cpus.slurm_cores(), 4);
        assert_eq!(
            t.cpus.to_machine_cpus(&BTreeSet::from([0, 3])),
            BTreeSet::from([0, 4, 3, 7])
        );
        assert_eq!(t.mems_of(&BTreeSet::from([3, 7])), BTreeSet::from([1]));
    }

    #[test]
    fn efficiency_cores_get_no_abstract_core_and_one_numa_node_places_nothing() {
        let sys = fake_sys(
            &[(0, 0, 0, Some(0)), (1, 1, 0, Some(0)), (2, 8, 0, Some(0))],
            Some("2\n"),
        );
        let t = Topology::read(sys.path()).unwrap();
        assert_eq!(t.cpus.slurm_cores(), 2);
        assert!(t.mems_of(&BTreeSet::from([0, 1])).is_empty());
    }

    #[test]
    fn a_missing_or_bad_file_is_named() {
        let sys = fake_sys(&[(0, 0, 0, None)], None);
        std::fs::write(
            sys.path().join("devices/system/cpu/cpu0/topology/core_id"),
            "x",
        )
        .unwrap();
        let e = Topology::read(sys.path()).unwrap_err().to_string();
        assert!(e.contains("core_id") && e.contains("not a number"), "{e}");
        let e = Topology::read(Path::new("/nonexistent"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("online"), "{e}");
    }

    #[test]
    fn this_machine_reads() {
        let t = Topology::read(Path::new("/sys")).unwrap();
        assert!(t.cpus.slurm_cores() >= 1);
    }
}
