//! Which CPUs a container may run on: the pure decision of the node agent.
//!
//! A pod the bridge bound carries its Slurm job's id in a label; the job's admin_comment names
//! the pod (namespace, name and uid) and Slurm's layout says which abstract cores the job holds
//! on this node. Only when all three agree is the container pinned to those cores' machine
//! CPUs. A label that names a job which does not name the pod (written by the pod's author, or
//! left from another pod) makes the pod unmanaged: a pod's author can never choose CPUs.
//!
//! A pod whose `dra.cpu` claim this agent prepared (`--dra-cpu`) is pinned to the claim's CPUs
//! instead: the bridge wrote them from the same job's cores, split between the job's pods on
//! the node, so each pod gets its part. Claim CPUs outside the job's cores here are refused.

use super::topology::Topology;
use crate::dra::NodeAllocation;
use crate::slurm::WatchedJob;
use slurm_rest::models::NodeResourceLayout;
use std::collections::BTreeSet;

/// The pod a container belongs to, as the runtime reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The bridge's job-id label (`scheduler.slinky.slurm.net/slurm-jobid`), if any.
    pub job_label: Option<String>,
}

impl PodFacts {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The job id of the label, when it is a number.
    pub fn job_id(&self) -> Option<u32> {
        self.job_label.as_deref()?.trim().parse().ok()
    }
}

/// What Slurm said about the job a pod's label names.
#[derive(Debug, Clone)]
pub enum JobLookup {
    /// Slurm knows no such job, or it is not a job of this bridge (`from_info_of`).
    Unknown,
    /// The job, and what it holds on each node (read only for a running job).
    Found {
        job: WatchedJob,
        layout: Vec<NodeResourceLayout>,
    },
    /// Slurm could not be asked.
    Failed(String),
}

/// Where containers of pods the bridge did not bind may run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Unmanaged {
    /// Left as the kubelet made them (the default).
    #[default]
    Leave,
    /// Confined to these machine CPUs (e.g. the cores Slurm's `CpuSpecList` keeps from jobs).
    Cpus(BTreeSet<i64>),
}

/// The agent's answer for one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// Pin to these machine CPUs (and these NUMA nodes' memory, when the machine has several).
    Cpus {
        cpus: BTreeSet<i64>,
        mems: BTreeSet<u32>,
        job_id: Option<u32>,
    },
    /// Leave the container as it is.
    Leave { why: String },
    /// Refuse to create the container (the kubelet retries): a pod of the bridge whose CPUs
    /// cannot be known now must not run on CPUs another job holds.
    Refuse(String),
}

/// The decision for a container of `pod` on this node (`slurm_node`, Slurm's name for it);
/// `claimed`: the CPUs of the `dra.cpu` claims prepared for the pod, if any.
pub fn decide(
    pod: &PodFacts,
    lookup: Option<&JobLookup>,
    claimed: Option<&BTreeSet<i64>>,
    slurm_node: &str,
    topology: &Topology,
    unmanaged: &Unmanaged,
) -> Pin {
    let not_ours = |why: String| match unmanaged {
        Unmanaged::Leave => Pin::Leave { why },
        Unmanaged::Cpus(cpus) => Pin::Cpus {
            cpus: cpus.clone(),
            mems: topology.mems_of(cpus),
            job_id: None,
        },
    };
    let Some(label) = pod.job_label.as_deref() else {
        return not_ours("not bound by the bridge (no Slurm job label)".into());
    };
    let Some(job_id) = pod.job_id() else {
        return not_ours(format!("Slurm job label {label:?} is not a job id"));
    };
    let key = pod.key();
    match lookup {
        None => Pin::Refuse(format!("Slurm job {job_id} of pod {key} was not read")),
        Some(JobLookup::Failed(e)) => Pin::Refuse(format!(
            "Slurm job {job_id} of pod {key} could not be read ({e}); the container is created once its CPUs are known"
        )),
        Some(JobLookup::Unknown) => Pin::Refuse(format!(
            "Slurm knows no job {job_id} of this bridge for pod {key}"
        )),
        Some(JobLookup::Found { job, .. }) if !job.comment.names_pod(&key, Some(&pod.uid)) => {
            not_ours(format!(
                "Slurm job {job_id} does not name pod {key} (uid {}): the label is not the bridge's",
                pod.uid
            ))
        }
        Some(JobLookup::Found { job, layout }) => {
            if !job.is_running() {
                return Pin::Refuse(format!(
                    "Slurm job {job_id} of pod {key} is not running ({:?})",
                    job.state
                ));
            }
            let Some(here) = layout.iter().find(|l| l.node == slurm_node) else {
                return Pin::Refuse(format!(
                    "Slurm job {job_id} of pod {key} holds nothing on node {slurm_node} (it runs on {})",
                    job.nodes.as_deref().unwrap_or("no node")
                ));
            };
            let cores = match NodeAllocation::parse(here.core_bitmap.as_deref(), []) {
                Ok(a) => a.cores,
                Err(e) => return Pin::Refuse(format!("Slurm job {job_id}: {e}")),
            };
            let cpus = topology.cpus.to_machine_cpus(&cores);
            if cpus.is_empty() {
                return Pin::Refuse(format!(
                    "Slurm job {job_id} holds cores {:?} on node {slurm_node}, none of them on this machine ({} cores)",
                    here.core_bitmap.as_deref().unwrap_or(""),
                    topology.cpus.slurm_cores()
                ));
            }
            let cpus = match claimed.filter(|c| !c.is_empty()) {
                None => cpus,
                Some(claimed) if claimed.is_subset(&cpus) => claimed.clone(),
                Some(claimed) => {
                    return Pin::Refuse(format!(
                        "the dra.cpu claim of pod {key} names CPUs {claimed:?}, not all of them CPUs of its Slurm job {job_id} on node {slurm_node} ({cpus:?})"
                    ));
                }
            };
            Pin::Cpus {
                mems: topology.mems_of(&cpus),
                cpus,
                job_id: Some(job_id),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::admin_comment::AdminComment;
    use slurm_rest::models::JobState;

    fn pod(label: Option<&str>) -> PodFacts {
        PodFacts {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u1".into(),
            job_label: label.map(str::to_string),
        }
    }

    fn found(uid: &str, state: JobState, bitmap: &str) -> JobLookup {
        JobLookup::Found {
            job: WatchedJob {
                job_id: 7,
                state: vec![state],
                state_reason: None,
                nodes: Some("node-1".into()),
                comment: AdminComment::new(
                    Some("g".into()),
                    [("ns/p".to_string(), Some(uid.to_string()))],
                ),
            },
            layout: vec![NodeResourceLayout {
                node: "node-1".into(),
                core_bitmap: Some(bitmap.into()),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn a_pod_its_job_names_is_pinned_to_the_jobs_cores_on_this_node() {
        let d = decide(
            &pod(Some("7")),
            Some(&found("u1", JobState::Running, "0x6")),
            None,
            "node-1",
            &Topology::flat(4),
            &Unmanaged::Leave,
        );
        assert_eq!(
            d,
            Pin::Cpus {
                cpus: BTreeSet::from([1, 2]),
                mems: BTreeSet::new(),
                job_id: Some(7)
            }
        );
    }

    #[test]
    fn a_label_the_job_does_not_confirm_gives_the_unmanaged_policy() {
        // Another pod's uid under the same name (a recreated pod), and another pod's name.
        let other_name = PodFacts {
            name: "q".into(),
            ..pod(Some("7"))
        };
        for (facts, lookup) in [
            (pod(Some("7")), found("other-uid", JobState::Running, "0x1")),
            (other_name, found("u1", JobState::Running, "0x1")),
        ] {
            let d = decide(
                &facts,
                Some(&lookup),
                None,
                "node-1",
                &Topology::flat(4),
                &Unmanaged::Leave,
            );
            assert!(
                matches!(&d, Pin::Leave { why } if why.contains("does not name")),
                "{d:?}"
            );
        }
        let d = decide(
            &pod(None),
            None,
            None,
            "node-1",
            &Topology::flat(4),
            &Unmanaged::Cpus(BTreeSet::from([3])),
        );
        assert!(matches!(&d, Pin::Cpus { cpus, job_id: None, .. } if cpus == &BTreeSet::from([3])));
        let d = decide(
            &pod(Some("x")),
            None,
            None,
            "node-1",
            &Topology::flat(4),
            &Unmanaged::Leave,
        );
        assert!(
            matches!(&d, Pin::Leave { why } if why.contains("not a job id")),
            "{d:?}"
        );
    }

    #[test]
    fn a_bridge_pod_whose_cpus_cannot_be_known_is_refused() {
        let cases = [
            (
                JobLookup::Failed("connection refused".into()),
                "could not be read",
            ),
            (JobLookup::Unknown, "knows no job"),
            (found("u1", JobState::Completed, "0x1"), "not running"),
            (
                found("u1", JobState::Running, "0x10"),
                "none of them on this machine",
            ),
        ];
        for (lookup, says) in cases {
            let d = decide(
                &pod(Some("7")),
                Some(&lookup),
                None,
                "node-1",
                &Topology::flat(4),
                &Unmanaged::Leave,
            );
            assert!(
                matches!(&d, Pin::Refuse(m) if m.contains(says)),
                "{says}: {d:?}"
            );
        }
        let d = decide(
            &pod(Some("7")),
            Some(&found("u1", JobState::Running, "0x1")),
            None,
            "node-2",
            &Topology::flat(4),
            &Unmanaged::Leave,
        );
        assert!(
            matches!(&d, Pin::Refuse(m) if m.contains("holds nothing on node node-2")),
            "{d:?}"
        );
    }

    #[test]
    fn a_prepared_dra_cpu_claim_narrows_the_pin_to_its_cpus_within_the_job() {
        // The job holds cores 1-3 here; two pods of it share the node, this one claimed CPU 2.
        let job = found("u1", JobState::Running, "0xe");
        let d = decide(
            &pod(Some("7")),
            Some(&job),
            Some(&BTreeSet::from([2])),
            "node-1",
            &Topology::flat(4),
            &Unmanaged::Leave,
        );
        assert_eq!(
            d,
            Pin::Cpus {
                cpus: BTreeSet::from([2]),
                mems: BTreeSet::new(),
                job_id: Some(7)
            }
        );
        // No claim, or an empty one: the job's cores.
        for claimed in [None, Some(BTreeSet::new())] {
            let d = decide(
                &pod(Some("7")),
                Some(&job),
                claimed.as_ref(),
                "node-1",
                &Topology::flat(4),
                &Unmanaged::Leave,
            );
            assert!(
                matches!(&d, Pin::Cpus { cpus, .. } if cpus == &BTreeSet::from([1, 2, 3])),
                "{d:?}"
            );
        }
        // A claim naming a CPU the job does not hold: refused.
        let d = decide(
            &pod(Some("7")),
            Some(&job),
            Some(&BTreeSet::from([0, 2])),
            "node-1",
            &Topology::flat(4),
            &Unmanaged::Leave,
        );
        assert!(
            matches!(&d, Pin::Refuse(m) if m.contains("not all of them")),
            "{d:?}"
        );
        // A pod the bridge did not bind keeps the unmanaged policy, claim or not.
        let d = decide(
            &pod(None),
            None,
            Some(&BTreeSet::from([2])),
            "node-1",
            &Topology::flat(4),
            &Unmanaged::Leave,
        );
        assert!(matches!(&d, Pin::Leave { .. }), "{d:?}");
    }
}
