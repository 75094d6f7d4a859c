//! The agent as an NRI plugin: the runtime's questions turned into [`decide`] calls and the
//! answers into cpusets ([`nri_plugin`]), and the reconnecting loop around the connection.

use super::dra_cpu::Prepared;
use super::jobs::JobReads;
use super::pin::{JobLookup, Pin, PodFacts, Unmanaged, decide};
use super::topology::Topology;
use crate::resources::cpulist::format_cpu_list;
use crate::slurm::SlurmJobs;
use crate::wellknown::LABEL_SLURM_JOBID;
use nri_plugin::{
    Container, ContainerAdjustment, ContainerUpdate, Handler, LinuxResources, PodSandbox, Runtime,
};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The plugin's name among the runtime's NRI plugins.
pub const PLUGIN_NAME: &str = "slurm-bridge";

/// The node agent: what it knows of this node and how it reads Slurm.
pub struct Agent<S> {
    reads: JobReads<S>,
    slurm_node: String,
    topology: Topology,
    unmanaged: Unmanaged,
    prepared: Option<Prepared>,
}

impl<S: SlurmJobs> Agent<S> {
    /// The agent of Slurm node `slurm_node`, for the bridge of cluster `cluster`.
    pub fn new(
        slurm: S,
        cluster: Option<String>,
        slurm_node: String,
        topology: Topology,
        unmanaged: Unmanaged,
    ) -> Self {
        Agent {
            reads: JobReads::new(slurm, cluster),
            slurm_node,
            topology,
            unmanaged,
            prepared: None,
        }
    }

    /// Pins pods with `dra.cpu` claims this agent prepared to the claims' CPUs
    /// (`--dra-cpu`).
    pub fn with_prepared(mut self, prepared: Prepared) -> Self {
        self.prepared = Some(prepared);
        self
    }

    /// The decision for a container of `pod`, Slurm read as needed.
    pub async fn pin(&self, pod: &PodFacts) -> Pin {
        let lookup: Option<JobLookup> = match pod.job_id() {
            Some(id) => Some(self.reads.lookup(id).await),
            None => None,
        };
        let claimed = self.prepared.as_ref().and_then(|p| p.cpus_of_pod(&pod.uid));
        decide(
            pod,
            lookup.as_ref(),
            claimed.as_ref(),
            &self.slurm_node,
            &self.topology,
            &self.unmanaged,
        )
    }
}

/// What the runtime says of a pod, as the decision needs it.
pub fn pod_facts(pod: &PodSandbox) -> PodFacts {
    PodFacts {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        job_label: pod.labels.get(LABEL_SLURM_JOBID).cloned(),
    }
}

/// The cpuset text of a pin: `(cpus, mems)`, mems empty when the machine has one NUMA node.
fn cpuset(cpus: &BTreeSet<i64>, mems: &BTreeSet<u32>) -> (String, String) {
    let cpus: Vec<u32> = cpus.iter().filter_map(|c| u32::try_from(*c).ok()).collect();
    (format_cpu_list(&cpus), format_cpu_list(mems))
}

fn resources(cpus: &str, mems: &str) -> Option<LinuxResources> {
    Some(LinuxResources::cpuset(cpus, mems))
}

impl<S: SlurmJobs> Handler for Agent<S> {
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Vec<ContainerUpdate> {
        let pods: HashMap<&str, &PodSandbox> = pods.iter().map(|p| (p.id.as_str(), p)).collect();
        let mut updates = Vec::new();
        for c in &containers {
            let Some(pod) = pods.get(c.pod_sandbox_id.as_str()) else {
                continue;
            };
            let facts = pod_facts(pod);
            match self.pin(&facts).await {
                Pin::Cpus { cpus, mems, job_id } => {
                    let (cpus, mems) = cpuset(&cpus, &mems);
                    if c.cpus() != cpus {
                        tracing::info!(pod = %facts.key(), container = %c.name, ?job_id, %cpus, was = %c.cpus(), "re-pinning a running container");
                        let mut u = ContainerUpdate::cpuset(&c.id, &cpus);
                        if let Some(l) = u.linux.as_mut() {
                            l.resources = resources(&cpus, &mems);
                        }
                        updates.push(u);
                    }
                }
                Pin::Leave { why } => {
                    tracing::debug!(pod = %facts.key(), container = %c.name, %why, "left as it is");
                }
                // A running container cannot be refused; it keeps its CPUs until it can be read.
                Pin::Refuse(why) => {
                    tracing::warn!(pod = %facts.key(), container = %c.name, %why, "running container not re-pinned");
                }
            }
        }
        updates
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> Result<ContainerAdjustment, String> {
        let facts = pod_facts(&pod);
        match self.pin(&facts).await {
            Pin::Cpus { cpus, mems, job_id } => {
                let (cpus, mems) = cpuset(&cpus, &mems);
                tracing::info!(pod = %facts.key(), container = %container.name, ?job_id, %cpus, %mems, "pinned");
                let mut a = ContainerAdjustment::cpuset(&cpus);
                if let Some(l) = a.linux.as_mut() {
                    l.resources = resources(&cpus, &mems);
                }
                Ok(a)
            }
            // A job label the job does not confirm was written by someone else than the bridge.
            Pin::Leave { why } if facts.job_label.is_some() => {
                tracing::warn!(pod = %facts.key(), container = %container.name, %why, "left as it is");
                Ok(ContainerAdjustment::none())
            }
            Pin::Leave { why } => {
                tracing::debug!(pod = %facts.key(), container = %container.name, %why, "left as it is");
                Ok(ContainerAdjustment::none())
            }
            Pin::Refuse(why) => {
                tracing::warn!(pod = %facts.key(), container = %container.name, %why, "container refused");
                Err(format!("slurm-bridge node agent: {why}"))
            }
        }
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        _resources: Option<LinuxResources>,
    ) -> Vec<ContainerUpdate> {
        // The kubelet's update (a resize) keeps the job's CPUs: the pin is sent with it.
        match self.pin(&pod_facts(&pod)).await {
            Pin::Cpus { cpus, mems, .. } => {
                let (cpus, mems) = cpuset(&cpus, &mems);
                let mut u = ContainerUpdate::cpuset(&container.id, &cpus);
                if let Some(l) = u.linux.as_mut() {
                    l.resources = resources(&cpus, &mems);
                }
                vec![u]
            }
            _ => Vec::new(),
        }
    }
}

/// Serves the runtime on `socket` for good: reconnects (1 s, then up to 30 s apart) whenever
/// the runtime closes the connection or is not there yet; each connection starts with a
/// synchronization that re-pins the containers already running.
pub async fn serve<S: SlurmJobs>(
    agent: Agent<S>,
    socket: &Path,
    plugin_index: &str,
) -> Result<(), nri_plugin::Error> {
    let agent = Arc::new(agent);
    let runtime = Runtime::new();
    let mut wait = Duration::from_secs(1);
    loop {
        match nri_plugin::run_with(socket, PLUGIN_NAME, plugin_index, agent.clone(), &runtime).await
        {
            Ok(()) => {
                tracing::info!(socket = %socket.display(), "the runtime closed the NRI connection; reconnecting");
                wait = Duration::from_secs(1);
            }
            // A bad plugin name or index will not get better.
            Err(e @ nri_plugin::Error::Identity(_)) => return Err(e),
            Err(e) => {
                tracing::warn!(socket = %socket.display(), error = %e, retry_in = ?wait, "NRI connection failed");
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
        tokio::time::sleep(wait).await;
    }
}
