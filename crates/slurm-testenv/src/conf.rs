//! slurm.conf (and cgroup.conf) for one instance.

use crate::cpus::{self, HostCpus};
use crate::paths::INSTANCE_MOUNT;

/// CPUs and memory of every node slurm-testenv makes, slurmd-run or external.
pub const NODE_CPUS: u32 = 8;
/// Memory of every node slurm-testenv makes, in MB.
pub const NODE_MEMORY_MB: u64 = 16000;
/// `DefMemPerCPU` of instances with cgroups unless the policy sets one (MB): a job asking no
/// memory gets this much per CPU instead of the node's whole memory, so jobs share a node.
pub const CGROUPS_DEF_MEM_PER_CPU_MB: u64 = 500;
/// How long slurmctld waits for a silent slurmd before marking its node DOWN (seconds). Short,
/// so tests of a lost slurmd finish quickly; long enough for a loaded 2-core machine.
pub const SLURMD_TIMEOUT_SECS: u32 = 10;

/// The ports, nodes and policy an instance's slurm.conf is rendered from.
#[derive(Clone, Debug)]
pub struct ConfParams {
    pub cluster_name: String,
    pub slurmctld_port: u16,
    pub slurmd_port: u16,
    pub max_node_count: u32,
    /// Nodes run by a real slurmd.
    pub slurmd_nodes: Vec<SlurmdNode>,
    pub policy: Policy,
    /// The port of the instance's slurmdbd when it runs with accounting: slurm.conf then stores
    /// accounting there, enforces associations, limits and QoS, and prioritises by fairshare.
    pub slurmdbd_port: Option<u16>,
    /// With cgroups: the host's CPUs. slurmd then confines job steps (proctrack/cgroup,
    /// task/cgroup,task/affinity, cgroup/v1 with ConstrainCores and ConstrainRAMSpace), and its
    /// nodes are described as the host's real CPUs (abstract CPU ids must map onto machine ids).
    pub cgroups: Option<HostCpus>,
}

/// A node run by a real slurmd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmdNode {
    pub name: String,
    /// The port its slurmd listens on.
    pub port: u16,
    /// With cgroups: the machine CPUs its jobs use; the host's others are its `CpuSpecList`
    /// (CPUs left to slurmd itself, none to jobs). All of the host's: no `CpuSpecList`.
    pub cpus: Vec<u32>,
}

/// How long usage takes to decay to half (`PriorityDecayHalfLife`): short, so fairshare tests
/// see usage matter and fade within minutes.
pub const PRIORITY_DECAY_HALF_LIFE: &str = "0-00:01:00";
/// `PriorityCalcPeriod` in minutes: how often usage and fairshare are recomputed. One minute is
/// the least Slurm takes (it counts whole minutes; less is refused).
pub const PRIORITY_CALC_PERIOD_MINUTES: u32 = 1;

/// Scheduling policy knobs of an instance: preemption, more partitions, licenses, raw lines.
///
/// QoS-based preemption ([`PreemptType::Qos`]) needs QoS records, which live in slurmdbd's
/// database: only instances started with accounting offer it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// `PreemptType` (by [`Policy::preempt_type`]) with this `PreemptMode`; `None`: no preemption.
    pub preempt: Option<PreemptMode>,
    /// What decides who preempts whom: partition priority tiers (the default) or QoS (needs
    /// accounting). Used only with [`Policy::preempt`].
    pub preempt_type: PreemptType,
    /// Partitions over the same nodes as `slurm-bridge` (the `slurm-bridge` node set), each
    /// with its own priority tier (`slurm-bridge` has tier 1).
    pub partitions: Vec<Partition>,
    /// Cluster-local licenses (`Licenses=name:count,...`), shared by batch jobs and pods.
    pub licenses: Vec<(String, u32)>,
    /// `DefMemPerCPU=`: memory a job gets per CPU when it asks for none (by default such a
    /// job takes all of a node's memory, so no other job can share the node).
    pub def_mem_per_cpu_mb: Option<u64>,
    /// Raw slurm.conf lines appended last, for any other knob.
    pub extra_lines: Vec<String>,
}

/// What happens to a preempted job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreemptMode {
    /// The job is requeued (batch jobs run again later; an external job's pods are removed).
    Requeue,
    /// The job is cancelled.
    Cancel,
}

/// What decides preemption (`PreemptType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreemptType {
    /// `preempt/partition_prio`: a job in a partition of a higher `PriorityTier` preempts.
    #[default]
    PartitionPrio,
    /// `preempt/qos`: a job whose QoS lists another in `Preempt=` preempts jobs of that QoS
    /// (`sacctmgr add qos high Preempt=normal`); needs an instance with accounting.
    Qos,
}

impl PreemptType {
    fn conf(self) -> &'static str {
        match self {
            PreemptType::PartitionPrio => "preempt/partition_prio",
            PreemptType::Qos => "preempt/qos",
        }
    }
}

impl PreemptMode {
    fn conf(self) -> &'static str {
        match self {
            PreemptMode::Requeue => "REQUEUE",
            PreemptMode::Cancel => "CANCEL",
        }
    }
}

/// One more partition over the bridge's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// Jobs of a higher tier preempt those of a lower one (with [`Policy::preempt`]).
    pub priority_tier: u16,
}

impl Partition {
    pub fn new(name: impl Into<String>, priority_tier: u16) -> Self {
        Partition {
            name: name.into(),
            priority_tier,
        }
    }
}

/// Renders slurm.conf: auth/slurm plus auth/jwt for slurmrestd, dynamic external nodes and
/// slurmd-run nodes in a `slurm-bridge` partition fed by the `slurm-bridge` feature, fast
/// scheduling for tests, and the instance's policy.
pub fn render(p: &ConfParams) -> String {
    let d = INSTANCE_MOUNT;
    let mut text = format!(
        "# Written by slurm-testenv for one isolated test instance.
ClusterName={cluster}
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmdPort={slurmd}
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={d}/jwt_hs256.key
SlurmUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmdPidFile={d}/slurmd.%n.pid
SlurmdLogFile={d}/slurmd.%n.log
SlurmdParameters=config_overrides
SlurmdTimeout={slurmd_timeout}
SlurmctldPidFile={d}/slurmctld.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmctldDebug=info
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
MaxNodeCount={max_nodes}
MaxJobCount=100000
SchedulerParameters=sched_interval=1,bf_interval=1,default_queue_depth=1000,sched_min_interval=100000
{tracking}MpiDefault=none
ReturnToService=2
",
        cluster = p.cluster_name,
        ctld = p.slurmctld_port,
        slurmd = p.slurmd_port,
        max_nodes = p.max_node_count,
        slurmd_timeout = SLURMD_TIMEOUT_SECS,
        tracking = if p.cgroups.is_some() {
            "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup,task/affinity\nJobAcctGatherType=jobacct_gather/linux\n"
        } else {
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
        },
    );
    let pol = &p.policy;
    if let Some(mode) = pol.preempt {
        text.push_str(&format!("PreemptType={}\n", pol.preempt_type.conf()));
        text.push_str(&format!("PreemptMode={}\n", mode.conf()));
    }
    if let Some(port) = p.slurmdbd_port {
        text.push_str(&format!(
            "AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={port}
AccountingStorageEnforce=associations,limits,qos,safe
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
PriorityType=priority/multifactor
PriorityWeightFairshare=100000
PriorityWeightQOS=10000
PriorityWeightAge=1000
PriorityWeightPartition=1000
PriorityWeightJobSize=0
PriorityDecayHalfLife={PRIORITY_DECAY_HALF_LIFE}
PriorityCalcPeriod={PRIORITY_CALC_PERIOD_MINUTES}
"
        ));
    }
    let def_mem = pol
        .def_mem_per_cpu_mb
        .or(p.cgroups.as_ref().map(|_| CGROUPS_DEF_MEM_PER_CPU_MB));
    if let Some(mb) = def_mem {
        text.push_str(&format!("DefMemPerCPU={mb}\n"));
    }
    if !pol.licenses.is_empty() {
        let list: Vec<String> = pol
            .licenses
            .iter()
            .map(|(n, c)| format!("{n}:{c}"))
            .collect();
        text.push_str(&format!("Licenses={}\n", list.join(",")));
    }
    for node in &p.slurmd_nodes {
        let (name, port) = (&node.name, node.port);
        let hardware = match &p.cgroups {
            None => format!(
                "CPUs={NODE_CPUS} Sockets=1 CoresPerSocket={NODE_CPUS} ThreadsPerCore=1 \
                 RealMemory={NODE_MEMORY_MB}"
            ),
            Some(host) => {
                let spec: Vec<u32> = host
                    .machine
                    .iter()
                    .copied()
                    .filter(|c| !node.cpus.contains(c))
                    .collect();
                let spec = if spec.is_empty() {
                    String::new()
                } else {
                    format!(
                        " CpuSpecList={}",
                        cpus::format_list(&host.to_abstract(&spec))
                    )
                };
                format!(
                    "CPUs={} Sockets={} CoresPerSocket={} ThreadsPerCore={} RealMemory={}{spec}",
                    host.count(),
                    host.sockets,
                    host.cores_per_socket,
                    host.threads_per_core,
                    node_memory_mb(host, p.slurmd_nodes.len()),
                )
            }
        };
        text.push_str(&format!(
            "NodeName={name} NodeAddr=127.0.0.1 NodeHostname=localhost Port={port} \
             {hardware} Feature=slurm-bridge State=UNKNOWN\n"
        ));
    }
    text.push_str("Nodeset=slurm-bridge Feature=slurm-bridge\n");
    text.push_str(
        "PartitionName=slurm-bridge Nodes=slurm-bridge State=UP Default=YES MaxTime=INFINITE PriorityTier=1\n",
    );
    for part in &pol.partitions {
        text.push_str(&format!(
            "PartitionName={} Nodes=slurm-bridge State=UP MaxTime=INFINITE PriorityTier={}\n",
            part.name, part.priority_tier
        ));
    }
    for line in &pol.extra_lines {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// `RealMemory` of each of `nodes` slurmd nodes with cgroups (MB): three quarters of the host's
/// memory shared out, in hundreds, at least 1000.
pub fn node_memory_mb(host: &HostCpus, nodes: usize) -> u64 {
    let share = host.memory_mb * 3 / 4 / nodes.max(1) as u64;
    (share / 100 * 100).max(1000)
}

/// cgroup.conf. Without cgroups: no cgroup plugin (slurmd exits when a plugin is configured and
/// its sandbox has no hierarchy). With: cgroup/v1 confining cores and memory (the hierarchies
/// the sandbox of each slurmd mounts in its own cgroup namespace).
pub fn render_cgroup(cgroups: bool) -> &'static str {
    if cgroups {
        "# Written by slurm-testenv: job steps are confined by cgroup v1 (cpuset, memory, freezer).\nCgroupPlugin=cgroup/v1\nConstrainCores=yes\nConstrainRAMSpace=yes\n"
    } else {
        "# Written by slurm-testenv: jobs are tracked by /proc (proctrack/linuxproc), not cgroups.\nCgroupPlugin=disabled\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ConfParams {
        ConfParams {
            cluster_name: "t1".into(),
            slurmctld_port: 7001,
            slurmd_port: 7002,
            max_node_count: 5000,
            slurmd_nodes: Vec::new(),
            policy: Policy::default(),
            slurmdbd_port: None,
            cgroups: None,
        }
    }

    fn node(name: &str, port: u16, cpus: Vec<u32>) -> SlurmdNode {
        SlurmdNode {
            name: name.into(),
            port,
            cpus,
        }
    }

    #[test]
    fn renders_ports_and_partition() {
        let text = render(&params());
        assert!(text.contains("SlurmctldPort=7001\n"));
        assert!(text.contains("SlurmdPort=7002\n"));
        assert!(text.contains("MaxNodeCount=5000\n"));
        assert!(text.contains("PartitionName=slurm-bridge Nodes=slurm-bridge"));
        assert!(text.contains("AuthAltParameters=jwt_key=/slurm-testenv/jwt_hs256.key"));
        assert!(!text.contains("NodeName="));
        assert!(!text.contains("Preempt"));
        assert!(!text.contains("Licenses="));
        assert!(!text.contains("Accounting"));
        assert!(!text.contains("PriorityType"));
        assert!(text.contains("ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"));
        assert!(!text.contains("DefMemPerCPU"));
        assert!(render_cgroup(false).contains("CgroupPlugin=disabled\n"));
    }

    #[test]
    fn renders_cgroups_with_the_host_cpus_split_by_cpu_spec_list() {
        let mut p = params();
        p.cgroups = Some(HostCpus {
            sockets: 1,
            cores_per_socket: 2,
            threads_per_core: 1,
            machine: vec![0, 1],
            memory_mb: 4000,
        });
        p.slurmd_nodes = vec![node("node-1", 9001, vec![0, 1])];
        let text = render(&p);
        assert!(
            text.contains("ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup,task/affinity\n")
        );
        assert!(text.contains("DefMemPerCPU=500\n"));
        assert!(text.contains(
            "Port=9001 CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=3000 Feature="
        ));
        p.slurmd_nodes = vec![node("node-1", 9001, vec![0]), node("node-2", 9002, vec![1])];
        p.policy.def_mem_per_cpu_mb = Some(100);
        let text = render(&p);
        assert!(text.contains("RealMemory=1500 CpuSpecList=1 Feature="));
        assert!(text.contains("RealMemory=1500 CpuSpecList=0 Feature="));
        assert!(text.contains("DefMemPerCPU=100\n"));
        let cg = render_cgroup(true);
        assert!(cg.contains("CgroupPlugin=cgroup/v1\nConstrainCores=yes\nConstrainRAMSpace=yes\n"));
    }

    #[test]
    fn renders_accounting_and_qos_preemption() {
        let mut p = params();
        p.slurmdbd_port = Some(7009);
        p.policy.preempt = Some(PreemptMode::Requeue);
        p.policy.preempt_type = PreemptType::Qos;
        let text = render(&p);
        assert!(text.contains("AccountingStorageType=accounting_storage/slurmdbd\n"));
        assert!(text.contains("AccountingStoragePort=7009\n"));
        assert!(text.contains("AccountingStorageEnforce=associations,limits,qos,safe\n"));
        assert!(text.contains("PriorityType=priority/multifactor\n"));
        assert!(text.contains("PriorityWeightFairshare=100000\n"));
        assert!(text.contains("PriorityCalcPeriod=1\n"));
        assert!(text.contains("PreemptType=preempt/qos\nPreemptMode=REQUEUE\n"));
    }

    #[test]
    fn renders_slurmd_nodes_and_policy() {
        let mut p = params();
        p.slurmd_nodes = vec![node("node-1", 9001, vec![]), node("node-2", 9002, vec![])];
        p.policy = Policy {
            preempt: Some(PreemptMode::Requeue),
            preempt_type: PreemptType::PartitionPrio,
            partitions: vec![Partition::new("high", 10)],
            licenses: vec![("lic".into(), 2), ("fluent".into(), 4)],
            def_mem_per_cpu_mb: Some(1000),
            extra_lines: vec!["PriorityType=priority/basic".into()],
        };
        let text = render(&p);
        assert!(text.contains(
            "NodeName=node-1 NodeAddr=127.0.0.1 NodeHostname=localhost Port=9001 CPUs=8 "
        ));
        assert!(
            text.contains("NodeName=node-2 NodeAddr=127.0.0.1 NodeHostname=localhost Port=9002")
        );
        assert!(text.contains("RealMemory=16000 Feature=slurm-bridge State=UNKNOWN\n"));
        assert!(text.contains("PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n"));
        assert!(text.contains(
            "PartitionName=high Nodes=slurm-bridge State=UP MaxTime=INFINITE PriorityTier=10\n"
        ));
        assert!(text.contains("Licenses=lic:2,fluent:4\n"));
        assert!(text.contains("DefMemPerCPU=1000\n"));
        assert!(text.ends_with("PriorityType=priority/basic\n"));
        // Node lines come before the node set and partitions that use them.
        assert!(text.find("NodeName=node-2").unwrap() < text.find("Nodeset=").unwrap());
    }
}
