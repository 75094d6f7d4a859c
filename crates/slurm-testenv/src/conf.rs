//! slurm.conf for one instance.

use crate::paths::INSTANCE_MOUNT;

/// The ports and limits an instance's slurm.conf is rendered from.
#[derive(Clone, Debug)]
pub struct ConfParams {
    pub cluster_name: String,
    pub slurmctld_port: u16,
    pub slurmd_port: u16,
    pub max_node_count: u32,
}

/// Renders slurm.conf: auth/slurm plus auth/jwt for slurmrestd, dynamic external nodes in a
/// `slurm-bridge` partition fed by the `slurm-bridge` feature, and fast scheduling for tests.
pub fn render(p: &ConfParams) -> String {
    let d = INSTANCE_MOUNT;
    format!(
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
SlurmdSpoolDir={d}/spool
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
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
Nodeset=slurm-bridge Feature=slurm-bridge
PartitionName=slurm-bridge Nodes=slurm-bridge State=UP Default=YES MaxTime=INFINITE
",
        cluster = p.cluster_name,
        ctld = p.slurmctld_port,
        slurmd = p.slurmd_port,
        max_nodes = p.max_node_count,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_ports_and_partition() {
        let text = render(&ConfParams {
            cluster_name: "t1".into(),
            slurmctld_port: 7001,
            slurmd_port: 7002,
            max_node_count: 5000,
        });
        assert!(text.contains("SlurmctldPort=7001\n"));
        assert!(text.contains("SlurmdPort=7002\n"));
        assert!(text.contains("MaxNodeCount=5000\n"));
        assert!(text.contains("PartitionName=slurm-bridge Nodes=slurm-bridge"));
        assert!(text.contains("AuthAltParameters=jwt_key=/slurm-testenv/jwt_hs256.key"));
    }
}
