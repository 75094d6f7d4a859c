//! The host's CPUs, as slurmd nodes confined by cgroups describe them, and CPU lists
//! (`0-1,3`: `CPU_IDs` of `scontrol show -d job`, `Cpus_allowed_list` of `/proc/PID/status`).

use std::collections::BTreeMap;
use std::fs;

/// The host's CPUs (those online and in this process's affinity mask) and memory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostCpus {
    pub sockets: u32,
    pub cores_per_socket: u32,
    pub threads_per_core: u32,
    /// Machine CPU ids in Slurm's abstract order (socket, then core, then thread): abstract CPU
    /// `i` (what `CPU_IDs` and `CpuSpecList` count) is machine CPU `machine[i]`. Identity on
    /// hosts numbering CPUs that way (VMs, hosts without SMT); not on hosts numbering the
    /// second thread of every core after all the first ones.
    pub machine: Vec<u32>,
    /// MemTotal in MB.
    pub memory_mb: u64,
}

impl HostCpus {
    /// Reads `/sys/devices/system/cpu` (topology of the online CPUs this process may run on)
    /// and `/proc/meminfo`. An irregular topology (some threads offline, an affinity mask
    /// splitting cores) is described as one socket of single-thread cores.
    pub fn detect() -> std::io::Result<HostCpus> {
        let online = parse_list(&fs::read_to_string("/sys/devices/system/cpu/online")?);
        let allowed = affinity();
        let cpus: Vec<u32> = online
            .into_iter()
            .filter(|c| allowed.as_ref().is_none_or(|a| a.contains(c)))
            .collect();
        if cpus.is_empty() {
            return Err(std::io::Error::other("no online CPU found"));
        }
        let topo = |cpu: u32, file: &str| -> u32 {
            fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{file}"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        // (package, core) -> machine ids of its threads.
        let mut cores: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
        for &cpu in &cpus {
            let key = (topo(cpu, "physical_package_id"), topo(cpu, "core_id"));
            cores.entry(key).or_default().push(cpu);
        }
        let sockets: BTreeMap<u32, u32> = cores.keys().fold(BTreeMap::new(), |mut m, (p, _)| {
            *m.entry(*p).or_default() += 1;
            m
        });
        let threads = cores.values().next().map_or(1, |t| t.len() as u32);
        let per_socket = sockets.values().next().copied().unwrap_or(1);
        let regular = cores.values().all(|t| t.len() as u32 == threads)
            && sockets.values().all(|&n| n == per_socket);
        let mem_kb = fs::read_to_string("/proc/meminfo")?
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(2 * 1024 * 1024);
        let memory_mb = mem_kb / 1024;
        if !regular {
            return Ok(HostCpus {
                sockets: 1,
                cores_per_socket: cpus.len() as u32,
                threads_per_core: 1,
                machine: cpus,
                memory_mb,
            });
        }
        Ok(HostCpus {
            sockets: sockets.len() as u32,
            cores_per_socket: per_socket,
            threads_per_core: threads,
            machine: cores.into_values().flatten().collect(),
            memory_mb,
        })
    }

    /// Number of CPUs (hardware threads).
    pub fn count(&self) -> u32 {
        self.machine.len() as u32
    }

    /// The machine ids of abstract CPU ids (ids beyond the host's are kept as they are).
    pub fn to_machine(&self, abstract_ids: &[u32]) -> Vec<u32> {
        let mut out: Vec<u32> = abstract_ids
            .iter()
            .map(|&a| self.machine.get(a as usize).copied().unwrap_or(a))
            .collect();
        out.sort_unstable();
        out
    }

    /// The abstract ids of machine CPUs.
    pub fn to_abstract(&self, machine_ids: &[u32]) -> Vec<u32> {
        let mut out: Vec<u32> = machine_ids
            .iter()
            .filter_map(|m| self.machine.iter().position(|x| x == m).map(|i| i as u32))
            .collect();
        out.sort_unstable();
        out
    }

    /// The machine CPUs the jobs of each of `nodes` slurmd nodes use: all of them for one node;
    /// for more, whole cores split into contiguous blocks (node-1 the first block), or with
    /// more nodes than cores, core `i mod cores` for node `i` (nodes then share cores).
    pub fn split(&self, nodes: usize) -> Vec<Vec<u32>> {
        let threads = self.threads_per_core.max(1) as usize;
        let cores: Vec<&[u32]> = self.machine.chunks(threads).collect();
        let n = cores.len();
        (0..nodes)
            .map(|i| {
                let picked: Vec<&[u32]> = if nodes == 1 {
                    cores.clone()
                } else if nodes <= n {
                    cores[i * n / nodes..(i + 1) * n / nodes].to_vec()
                } else {
                    vec![cores[i % n]]
                };
                let mut ids: Vec<u32> = picked.into_iter().flatten().copied().collect();
                ids.sort_unstable();
                ids
            })
            .collect()
    }
}

/// This process's CPU affinity mask, if it can be read.
fn affinity() -> Option<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .map(|c| c as u32)
                .collect(),
        )
    }
}

/// Parses a CPU list as the kernel and Slurm write it (`0-2,5`, `7`); sorted, no duplicates.
/// Anything unparsable is skipped.
pub fn parse_list(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in text
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(c) = part.parse() {
                    out.push(c);
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Writes a CPU list with ranges (`[0, 1, 2, 5]` -> `0-2,5`).
pub fn format_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// The CPUs of the first `Cpus_allowed_list:` line in `text` (the output of
/// `grep Cpus_allowed_list /proc/self/status`, or the whole status file), if any.
pub fn cpus_allowed_list(text: &str) -> Option<Vec<u32>> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Cpus_allowed_list:"))
        .map(parse_list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(sockets: u32, cores: u32, threads: u32, machine: Vec<u32>) -> HostCpus {
        HostCpus {
            sockets,
            cores_per_socket: cores,
            threads_per_core: threads,
            machine,
            memory_mb: 4000,
        }
    }

    #[test]
    fn lists_parse_and_format() {
        assert_eq!(parse_list("0-2,5\n"), [0, 1, 2, 5]);
        assert_eq!(parse_list("1"), [1]);
        assert_eq!(parse_list(""), Vec::<u32>::new());
        assert_eq!(format_list(&[5, 0, 1, 2]), "0-2,5");
        assert_eq!(format_list(&[1]), "1");
        assert_eq!(
            cpus_allowed_list("Name:\tsh\nCpus_allowed:\t2\nCpus_allowed_list:\t1\n"),
            Some(vec![1])
        );
        assert_eq!(cpus_allowed_list("nothing"), None);
    }

    #[test]
    fn one_node_owns_every_cpu_and_more_split_whole_cores() {
        let two = host(1, 2, 1, vec![0, 1]);
        assert_eq!(two.split(1), [vec![0, 1]]);
        assert_eq!(two.split(2), [vec![0], vec![1]]);
        assert_eq!(two.split(3), [vec![0], vec![1], vec![0]]);
        // Hyperthreads numbered N apart: core 0 is machine CPUs 0 and 2.
        let smt = host(1, 2, 2, vec![0, 2, 1, 3]);
        assert_eq!(smt.split(2), [vec![0, 2], vec![1, 3]]);
        assert_eq!(smt.to_machine(&[0, 1]), [0, 2]);
        assert_eq!(smt.to_abstract(&[1, 3]), [2, 3]);
    }

    #[test]
    fn detects_this_host() {
        let h = HostCpus::detect().unwrap();
        assert_eq!(
            h.count(),
            h.sockets * h.cores_per_socket * h.threads_per_core
        );
        assert!(h.memory_mb > 0);
    }
}
