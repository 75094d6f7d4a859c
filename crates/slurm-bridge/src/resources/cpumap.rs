//! The CPU map of a node (reference §5.10.2): machine CPUs (the `dra.cpu` driver's devices) ↔
//! Slurm's abstract cores. Pure, no I/O.
//!
//! Slurm numbers the cores of a node 0, 1, ... and a job's `core_bitmap` sets the bits of the
//! cores it holds; a core holds its SMT siblings (hardware threads). CPUs are sorted by (socket,
//! core, cpu id); each new (socket, core) pair is the next abstract core, holding every CPU of
//! that pair. Efficiency cores get no abstract core: Slurm does not enumerate E-cores.

use std::collections::{BTreeMap, BTreeSet};

/// `dra.cpu/coreType` of efficiency cores.
pub const CORE_TYPE_EFFICIENCY: i64 = 3;

/// One machine CPU as the `dra.cpu` slice describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuInfo {
    /// Device name in the slice (what a claim allocates).
    pub name: String,
    /// `dra.cpu/cpuID` (-1 when missing).
    pub cpu_id: i64,
    /// `dra.cpu/coreID` (-1 when missing).
    pub core_id: i64,
    /// `dra.cpu/socketID` (-1 when missing).
    pub socket_id: i64,
    /// `dra.cpu/coreType`: 0 undefined, 1 standard, 2 performance, 3 efficiency.
    pub core_type: i64,
}

impl CpuInfo {
    pub fn is_efficiency(&self) -> bool {
        self.core_type == CORE_TYPE_EFFICIENCY
    }
}

/// Machine CPUs ↔ abstract cores.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuMap {
    /// Every CPU (E-cores too) by cpu id.
    pub cpus: BTreeMap<i64, CpuInfo>,
    /// Abstract core `i` → its machine CPUs (SMT siblings).
    pub abstract_to_machine: Vec<BTreeSet<i64>>,
    /// Machine CPU → its abstract core (E-cores absent).
    pub machine_to_abstract: BTreeMap<i64, usize>,
}

impl CpuMap {
    pub fn new(infos: impl IntoIterator<Item = CpuInfo>) -> CpuMap {
        let mut sorted: Vec<CpuInfo> = infos.into_iter().collect();
        sorted.sort_by_key(|c| (c.socket_id, c.core_id, c.cpu_id));
        let mut map = CpuMap::default();
        let mut core_index: BTreeMap<(i64, i64), usize> = BTreeMap::new();
        for c in &sorted {
            map.cpus.insert(c.cpu_id, c.clone());
            if c.is_efficiency() {
                continue;
            }
            let next = map.abstract_to_machine.len();
            let i = *core_index.entry((c.socket_id, c.core_id)).or_insert(next);
            if i == next {
                map.abstract_to_machine.push(BTreeSet::new());
            }
            map.abstract_to_machine[i].insert(c.cpu_id);
            map.machine_to_abstract.insert(c.cpu_id, i);
        }
        map
    }

    /// Slurm enumerates these CPUs: every CPU but the E-cores.
    pub fn slurm_cpus(&self) -> usize {
        self.machine_to_abstract.len()
    }

    /// Slurm's cores: the abstract cores.
    pub fn slurm_cores(&self) -> usize {
        self.abstract_to_machine.len()
    }

    /// The machine CPUs of a set of abstract cores; cores beyond the map are ignored.
    pub fn to_machine_cpus(&self, cores: &BTreeSet<usize>) -> BTreeSet<i64> {
        cores
            .iter()
            .filter_map(|i| self.abstract_to_machine.get(*i))
            .flatten()
            .copied()
            .collect()
    }

    /// The abstract cores of a set of machine CPUs; CPUs not in the map are ignored.
    pub fn to_abstract_cores(&self, cpus: &BTreeSet<i64>) -> BTreeSet<usize> {
        cpus.iter()
            .filter_map(|c| self.machine_to_abstract.get(c))
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cpu(cpu_id: i64, core_id: i64, socket_id: i64, core_type: i64) -> CpuInfo {
        CpuInfo {
            name: format!("cpu{cpu_id}"),
            cpu_id,
            core_id,
            socket_id,
            core_type,
        }
    }

    fn sets(v: &[&[i64]]) -> Vec<BTreeSet<i64>> {
        v.iter().map(|s| s.iter().copied().collect()).collect()
    }

    #[test]
    fn spec_layouts() {
        // 4 sockets x 1 core.
        let m = CpuMap::new((0..4).map(|i| cpu(i, 0, i, 1)));
        assert_eq!(m.abstract_to_machine, sets(&[&[0], &[1], &[2], &[3]]));
        // 1 socket, 4 cores, no SMT.
        let m = CpuMap::new((0..4).map(|i| cpu(i, i, 0, 1)));
        assert_eq!(m.abstract_to_machine, sets(&[&[0], &[1], &[2], &[3]]));
        // Sequential SMT: cores (0,0),(0,1),(1,0),(1,1) by cpu 0..3.
        let m = CpuMap::new([
            cpu(0, 0, 0, 1),
            cpu(1, 0, 0, 1),
            cpu(2, 1, 0, 1),
            cpu(3, 1, 0, 1),
        ]);
        assert_eq!(m.abstract_to_machine, sets(&[&[0, 1], &[2, 3]]));
        assert_eq!((m.slurm_cpus(), m.slurm_cores()), (4, 2));
        // Non-sequential SMT: cpu0 core0, cpu1 core1, cpu2 core0, cpu3 core1.
        let m = CpuMap::new([
            cpu(0, 0, 0, 1),
            cpu(1, 1, 0, 1),
            cpu(2, 0, 0, 1),
            cpu(3, 1, 0, 1),
        ]);
        assert_eq!(m.abstract_to_machine, sets(&[&[0, 2], &[1, 3]]));
        assert_eq!(m.machine_to_abstract.get(&2), Some(&0));
        // Sequential SMT with two E-cores: excluded from both maps, kept in `cpus`.
        let m = CpuMap::new([
            cpu(0, 0, 0, 2),
            cpu(1, 0, 0, 2),
            cpu(2, 1, 0, 2),
            cpu(3, 1, 0, 2),
            cpu(4, 2, 0, 3),
            cpu(5, 3, 0, 3),
        ]);
        assert_eq!(m.abstract_to_machine, sets(&[&[0, 1], &[2, 3]]));
        assert_eq!((m.slurm_cpus(), m.slurm_cores(), m.cpus.len()), (4, 2, 6));
        assert!(!m.machine_to_abstract.contains_key(&4));
        // Bitmap {0} with SMT pair {0,1}.
        let m = CpuMap::new([
            cpu(0, 0, 0, 1),
            cpu(1, 0, 0, 1),
            cpu(2, 1, 0, 1),
            cpu(3, 1, 0, 1),
        ]);
        assert_eq!(m.to_machine_cpus(&[0].into()), [0, 1].into());
        assert_eq!(m.to_machine_cpus(&[].into()), BTreeSet::new());
        assert_eq!(m.to_machine_cpus(&[1, 9].into()), [2, 3].into());
        assert_eq!(m.to_abstract_cores(&[3, 99].into()), [1].into());
        assert_eq!(m.to_abstract_cores(&[].into()), BTreeSet::new());
    }

    /// A node: sockets x cores x threads, CPU ids assigned in `order` (a permutation), and some
    /// cores made E-cores.
    fn layout() -> impl Strategy<Value = (usize, usize, usize, Vec<usize>, Vec<bool>)> {
        (1usize..3, 1usize..5, 1usize..3).prop_flat_map(|(s, c, t)| {
            let n = s * c * t;
            (
                Just(s),
                Just(c),
                Just(t),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
                proptest::collection::vec(any::<bool>(), s * c),
            )
        })
    }

    proptest! {
        /// SMT siblings share one abstract core, E-cores have none, every other CPU has exactly
        /// one, and both directions agree, whatever the CPU numbering.
        #[test]
        fn maps_agree((s, c, t, order, ecore) in layout()) {
            let mut infos = Vec::new();
            for (k, id) in order.iter().enumerate() {
                let (socket, core) = (k / (c * t), (k / t) % c);
                let e = ecore[socket * c + core];
                infos.push(cpu(*id as i64, core as i64, socket as i64, if e { 3 } else { 1 }));
            }
            let m = CpuMap::new(infos.clone());
            let p_cores = ecore.iter().filter(|e| !**e).count();
            prop_assert_eq!(m.slurm_cores(), p_cores);
            prop_assert_eq!(m.slurm_cpus(), p_cores * t);
            prop_assert_eq!(m.cpus.len(), s * c * t);
            for info in &infos {
                match m.machine_to_abstract.get(&info.cpu_id) {
                    None => prop_assert!(info.is_efficiency()),
                    Some(i) => {
                        let siblings = &m.abstract_to_machine[*i];
                        prop_assert_eq!(siblings.len(), t);
                        for sib in siblings {
                            let o = &m.cpus[sib];
                            prop_assert_eq!((o.socket_id, o.core_id), (info.socket_id, info.core_id));
                        }
                    }
                }
            }
            let all: BTreeSet<usize> = (0..m.slurm_cores()).collect();
            let machine = m.to_machine_cpus(&all);
            prop_assert_eq!(machine.len(), m.slurm_cpus());
            prop_assert_eq!(m.to_abstract_cores(&machine), all);
        }
    }
}
