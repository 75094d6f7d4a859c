//! The agent as an NRI plugin: the runtime's questions turned into [`decide`] calls and the
//! answers into cpusets ([`nri_plugin`]), and the reconnecting loop around the connection.

use super::dra_cpu::Prepared;
use super::health::{self, Health, Metrics};
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
    /// The last CPUs each bridge pod (by uid) was pinned to, or ran on when this agent started:
    /// a container restarting while its job cannot be confirmed (Slurm unreachable, or its
    /// state lost and the pod held by the controllers) keeps them instead of being refused.
    last_pins: std::sync::Mutex<HashMap<String, Pin>>,
    metrics: Arc<Metrics>,
}

/// Pods whose last pin is remembered at most; beyond, the memory starts over (a node runs far
/// fewer pods).
const LAST_PINS_KEPT: usize = 4096;

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
            last_pins: std::sync::Mutex::new(HashMap::new()),
            metrics: Arc::default(),
        }
    }

    /// Counts its pins in `metrics` (registered by the caller).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
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
        let decided = decide(
            pod,
            lookup.as_ref(),
            claimed.as_ref(),
            &self.slurm_node,
            &self.topology,
            &self.unmanaged,
        );
        match decided {
            Pin::Cpus {
                job_id: Some(_), ..
            } => {
                self.remember(&pod.uid, decided.clone());
                decided
            }
            Pin::Refuse(why) => match self.last_pin(&pod.uid) {
                Some(last) => {
                    tracing::warn!(pod = %pod.key(), %why, "keeping the pod's last pin");
                    self.metrics.last_pins_kept.inc();
                    last
                }
                None => Pin::Refuse(why),
            },
            other => other,
        }
    }

    fn remember(&self, uid: &str, pin: Pin) {
        let mut pins = self.last_pins.lock().unwrap_or_else(|p| p.into_inner());
        if pins.len() >= LAST_PINS_KEPT && !pins.contains_key(uid) {
            pins.clear();
        }
        pins.insert(uid.to_string(), pin);
    }

    fn last_pin(&self, uid: &str) -> Option<Pin> {
        self.last_pins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned()
    }

    /// A running container of a bridge pod whose job cannot be confirmed now: its current
    /// cpuset stands as the pod's last pin (an agent restarted during a Slurm outage).
    fn remember_running(&self, pod: &PodFacts, cpus: &str) {
        if pod.job_id().is_none() || self.last_pin(&pod.uid).is_some() {
            return;
        }
        if let Ok(set) = crate::resources::cpulist::parse_cpu_list(cpus)
            && !set.is_empty()
        {
            let cpus: BTreeSet<i64> = set.into_iter().map(i64::from).collect();
            self.remember(
                &pod.uid,
                Pin::Cpus {
                    mems: self.topology.mems_of(&cpus),
                    cpus,
                    job_id: pod.job_id(),
                },
            );
        }
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
                        self.metrics.containers_repinned.inc();
                    }
                }
                Pin::Leave { why } => {
                    tracing::debug!(pod = %facts.key(), container = %c.name, %why, "left as it is");
                }
                // A running container cannot be refused; it keeps its CPUs until it can be read,
                // and they stand as its pod's last pin meanwhile.
                Pin::Refuse(why) => {
                    tracing::warn!(pod = %facts.key(), container = %c.name, %why, "running container not re-pinned");
                    self.remember_running(&facts, c.cpus());
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
                self.metrics.containers_pinned.inc();
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
                self.metrics.containers_refused.inc();
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
/// synchronization that re-pins the containers already running. `health` follows the
/// connection (ready once registered and synchronized), as do the agent's metrics.
pub async fn serve<S: SlurmJobs>(
    agent: Agent<S>,
    socket: &Path,
    plugin_index: &str,
    health: Health,
) -> Result<(), nri_plugin::Error> {
    let runtime = Runtime::new();
    let follow = tokio::spawn(health::follow_nri(
        runtime.registered(),
        runtime.synchronized(),
        health,
        agent.metrics.clone(),
    ));
    let _follow = AbortOnDrop(follow);
    let agent = Arc::new(agent);
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

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::admin_comment::AdminComment;
    use slurm_rest::models::{JobInfo, JobState, JobStateEntry, NodeResourceLayout};

    /// Slurm with at most one job, which a test can make vanish or unreachable.
    #[derive(Default)]
    struct OneJob {
        job: std::sync::Mutex<Option<JobInfo>>,
        down: std::sync::atomic::AtomicBool,
    }

    impl SlurmJobs for Arc<OneJob> {
        async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
            Ok(Vec::new())
        }
        async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
            Ok(Vec::new())
        }
        async fn job(&self, _: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(slurm_rest::Error::synthetic(
                    slurm_rest::ErrorKind::Transient,
                    "connection refused",
                ));
            }
            Ok(self.job.lock().unwrap().clone())
        }
        async fn job_resources(
            &self,
            _: u32,
        ) -> Result<Vec<NodeResourceLayout>, slurm_rest::Error> {
            Ok(vec![NodeResourceLayout {
                node: "node-1".into(),
                core_bitmap: Some("0x2".into()),
                ..Default::default()
            }])
        }
    }

    fn agent(slurm: Arc<OneJob>) -> Agent<Arc<OneJob>> {
        Agent::new(
            slurm,
            None,
            "node-1".into(),
            Topology::flat(2),
            Unmanaged::Leave,
        )
    }

    fn pod(uid: &str) -> PodFacts {
        PodFacts {
            namespace: "ns".into(),
            name: "p".into(),
            uid: uid.into(),
            job_label: Some("7".into()),
        }
    }

    fn running_job() -> JobInfo {
        JobInfo {
            job_id: 7,
            job_state: vec![JobState::Running],
            nodes: Some("node-1".into()),
            admin_comment: Some(
                AdminComment::new(Some("g".into()), [("ns/p".into(), Some("u1".into()))]).encode(),
            ),
            ..Default::default()
        }
    }

    /// A pod pinned once keeps its CPUs when its job can no longer be confirmed (Slurm down,
    /// or its state lost); a pod never pinned is refused as before.
    #[tokio::test]
    async fn a_pinned_pod_keeps_its_last_pin_when_its_job_cannot_be_confirmed() {
        let slurm = Arc::new(OneJob::default());
        *slurm.job.lock().unwrap() = Some(running_job());
        let agent = agent(slurm.clone());
        let first = agent.pin(&pod("u1")).await;
        assert!(
            matches!(&first, Pin::Cpus { cpus, .. } if cpus == &BTreeSet::from([1])),
            "{first:?}"
        );

        // Slurm's state lost: the job is gone (past the read cache's 10 s: a new reader).
        *slurm.job.lock().unwrap() = None;
        let fresh = agent_with_pins(&agent, slurm.clone());
        assert_eq!(fresh.pin(&pod("u1")).await, first);
        // Never pinned: refused.
        assert!(matches!(fresh.pin(&pod("u2")).await, Pin::Refuse(_)));

        // Slurm unreachable: the same.
        slurm.down.store(true, std::sync::atomic::Ordering::SeqCst);
        let fresh = agent_with_pins(&agent, slurm);
        assert_eq!(fresh.pin(&pod("u1")).await, first);
    }

    /// An agent restarted while Slurm cannot confirm a running container's job takes the
    /// container's current cpuset as the pod's last pin.
    #[tokio::test]
    async fn a_running_container_whose_job_cannot_be_read_stands_as_the_last_pin() {
        let slurm = Arc::new(OneJob::default());
        slurm.down.store(true, std::sync::atomic::Ordering::SeqCst);
        let agent = agent(slurm);
        agent.remember_running(&pod("u1"), "1");
        assert!(matches!(
            agent.pin(&pod("u1")).await,
            Pin::Cpus { cpus, .. } if cpus == BTreeSet::from([1])
        ));
        // A pod without the bridge's label is not remembered.
        let mut other = pod("u3");
        other.job_label = None;
        agent.remember_running(&other, "0-1");
        assert!(agent.last_pin("u3").is_none());
    }

    /// The metrics count what the runtime was answered: a pin, a refusal, a last pin kept.
    #[tokio::test]
    async fn pins_refusals_and_kept_pins_are_counted() {
        let slurm = Arc::new(OneJob::default());
        *slurm.job.lock().unwrap() = Some(running_job());
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry);
        let agent = agent(slurm.clone()).with_metrics(metrics.clone());
        let sandbox = |uid: &str| PodSandbox {
            id: format!("sb-{uid}"),
            name: "p".into(),
            uid: uid.into(),
            namespace: "ns".into(),
            labels: [(LABEL_SLURM_JOBID.to_string(), "7".to_string())].into(),
            ..Default::default()
        };
        let adjust = agent
            .create_container(sandbox("u1"), Container::default())
            .await;
        assert!(adjust.is_ok(), "{adjust:?}");
        assert_eq!(metrics.containers_pinned.get(), 1);

        // Slurm down: the pinned pod keeps its CPUs, another is refused.
        slurm.down.store(true, std::sync::atomic::Ordering::SeqCst);
        let fresh = agent_with_pins(&agent, slurm).with_metrics(metrics.clone());
        assert!(
            fresh
                .create_container(sandbox("u1"), Container::default())
                .await
                .is_ok()
        );
        assert_eq!(metrics.last_pins_kept.get(), 1);
        assert!(
            fresh
                .create_container(sandbox("u2"), Container::default())
                .await
                .is_err()
        );
        assert_eq!(metrics.containers_refused.get(), 1);
        assert_eq!(metrics.containers_pinned.get(), 2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("slurm_bridge_node_agent_containers_refused_total 1"),
            "{text}"
        );
    }

    /// A new agent (no read cache) that carries `from`'s last pins.
    fn agent_with_pins(from: &Agent<Arc<OneJob>>, slurm: Arc<OneJob>) -> Agent<Arc<OneJob>> {
        let a = agent(slurm);
        *a.last_pins.lock().unwrap() = from.last_pins.lock().unwrap().clone();
        a
    }
}
