//! The observer: every 500 ms, which pods are bound (first seen, for the recovery times) and
//! which pods Slurm lists in more than one live job at once (duplicates).

use super::within;
use crate::e2e::NS;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use slurm_bridge::workload::admin_comment::AdminComment;
use slurm_rest::models::JobState;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Default, Debug)]
pub struct Observed {
    /// When each bound pod was first seen bound, in order.
    pub binds: Vec<Instant>,
    bound: HashSet<String>,
    /// `pod: job ids` for every pod seen in two live jobs at once.
    pub duplicated: BTreeSet<String>,
    pub pod_polls: usize,
    pub job_polls: usize,
}

impl Observed {
    /// Time from `end` to the first bind seen after it.
    pub fn recovery(&self, end: Instant) -> Option<Duration> {
        self.binds.iter().find(|b| **b >= end).map(|b| *b - end)
    }

    /// How many distinct pods were seen bound.
    pub fn bound_pods(&self) -> usize {
        self.bound.len()
    }
}

/// Polls until `stop` turns true. Uses the test's own clients, not the proxies.
pub async fn run(
    kube: Client,
    rest: slurm_rest::Client,
    state: Arc<Mutex<Observed>>,
    mut stop: watch::Receiver<bool>,
) {
    let pods: Api<Pod> = Api::namespaced(kube, NS);
    loop {
        if let Ok(list) = within(5, pods.list(&ListParams::default())).await {
            let now = Instant::now();
            let mut s = state.lock().unwrap();
            s.pod_polls += 1;
            for p in list.items {
                let bound = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some();
                if bound && s.bound.insert(p.uid().unwrap_or_default()) {
                    s.binds.push(now);
                }
            }
        }
        if let Ok(jobs) = within(5, rest.jobs(None)).await {
            let mut by_pod: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            for j in jobs.jobs.iter().filter(|j| {
                j.job_state
                    .iter()
                    .any(|s| matches!(s, JobState::Pending | JobState::Running))
            }) {
                let Ok(c) = AdminComment::decode(j.admin_comment.as_deref().unwrap_or("")) else {
                    continue;
                };
                for p in c.pods {
                    by_pod.entry(p).or_default().push(j.job_id);
                }
            }
            let mut s = state.lock().unwrap();
            s.job_polls += 1;
            for (p, ids) in by_pod.into_iter().filter(|(_, ids)| ids.len() > 1) {
                s.duplicated.insert(format!("{p}: {ids:?}"));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => return,
        }
    }
}
