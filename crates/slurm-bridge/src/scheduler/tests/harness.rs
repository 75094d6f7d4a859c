//! The real scheduler context on the fakes: runs one pass and records what it did.

use super::fake_kube::{FakeKube, object_path};
use super::fake_slurm::FakeSlurm;
use super::objects::Obj;
use super::world::{Fault, SlurmJob, Step, World};
use super::{NS, SCHEDULER};
use crate::caches::CacheHandles;
use crate::config::Config;
use crate::k8s::slim_pod::Pod;
use crate::scheduler::context::Ctx;
use crate::scheduler::metrics::Metrics;
use crate::scheduler::reconcile::{error_policy, reconcile};
use crate::scheduler::runner::Action;
use crate::slurm::JobEvent;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What one pass did.
#[derive(Debug)]
pub struct Outcome {
    pub action: Action,
    /// The pass's error, when it failed (`action` is then `error_policy`'s).
    pub error: Option<String>,
    pub slurm: Vec<String>,
    pub kube: Vec<String>,
}

/// The real scheduler context on the fakes.
pub struct Harness {
    pub ctx: Arc<Ctx<FakeSlurm>>,
    pub slurm: Arc<FakeSlurm>,
    pub kube: Arc<FakeKube>,
    pods: Writer<Pod>,
    given: Option<Obj>,
}

impl Harness {
    pub async fn new(world: World) -> Harness {
        let kube = FakeKube::new();
        let client = kube.client();
        let slurm = Arc::new(FakeSlurm::default());
        let (pod_store, pods) = reflector::store();
        let (node_store, mut nodes) = reflector::store::<Node>();
        let mut slurm_names = Vec::new();
        for obj in &world.objects {
            kube.put(obj.0.clone());
            if obj.kind() == "Node" {
                let n: Node = serde_json::from_value(obj.0.clone()).expect("node");
                slurm_names.push(crate::k8s::slurm_node_name(&n));
                nodes.apply_watcher_event(&watcher::Event::Apply(n));
            }
        }
        slurm.set_nodes(world.slurm_nodes.as_deref().unwrap_or(&slurm_names));
        let config = Config {
            scheduler_name: SCHEDULER.into(),
            ..Default::default()
        };
        let ctx = Arc::new(Ctx::new(
            config,
            client,
            CacheHandles::detached(slurm.clone(), node_store, pod_store),
            Metrics::new(&mut Default::default()),
        ));
        ctx.leader.store(world.leader, Ordering::Relaxed);
        ctx.stopping.store(world.stopping, Ordering::Relaxed);
        ctx.slurm_nodes.refresh().await.expect("slurm nodes");
        let mut h = Harness {
            ctx,
            slurm,
            kube,
            pods,
            given: None,
        };
        for j in &world.jobs {
            h.set_job(j);
        }
        for j in &world.slurm_only {
            h.slurm.set_job(j.info());
        }
        h.sync_pods();
        for step in world.before {
            match step {
                Step::Pass(name) => {
                    h.pass(name).await;
                }
                Step::Job(j) => h.set_job(&j),
                Step::Put(obj) => h.kube.put(obj.0),
                Step::Fault(f) => h.inject(f),
                Step::Heal => h.heal(),
            }
            h.sync_pods();
        }
        for fault in world.faults {
            h.inject(fault);
        }
        h.given = world.given;
        h.slurm.clear_calls();
        h.kube.clear_writes();
        h
    }

    pub fn inject(&self, fault: Fault) {
        match fault {
            Fault::Submit(f) => self.slurm.fail_submit(Some(f)),
            Fault::Update(f) => self.slurm.fail_update(Some(f)),
            Fault::Cancel(f) => self.slurm.fail_cancel(Some(f)),
            Fault::Kube(method, path, code) => self.kube.fail(method, path, code),
        }
    }

    /// No more injected failures.
    pub fn heal(&self) {
        self.slurm.fail_submit(None);
        self.slurm.fail_update(None);
        self.slurm.fail_cancel(None);
        self.kube.heal();
    }

    /// Slurm and the watcher's index show `job`, as after a poll that saw it change.
    pub fn set_job(&self, job: &SlurmJob) {
        self.slurm.set_job(job.info());
        self.ctx.watcher.record(job.watched());
        self.ctx
            .job_event(&JobEvent::Changed(Arc::new(job.watched())));
    }

    /// The pod cache catches up with the API server (and the writer learns it, as
    /// `Ctx::pod_event` does in production).
    fn sync_pods(&mut self) {
        for pod in self.kube.pods() {
            let event = watcher::Event::Apply(pod);
            self.pods.apply_watcher_event(&event);
            self.ctx.pod_event(&event);
        }
    }

    /// The pod `ns/<name>` as the API server holds it now.
    pub fn pod(&self, name: &str) -> Pod {
        let obj = self
            .kube
            .get(&object_path("v1", "Pod", Some(NS), name))
            .unwrap_or_else(|| panic!("no pod {NS}/{name} in the fake API server"));
        serde_json::from_value(obj).expect("pod")
    }

    /// One pass of `ns/<name>` (or of the given stale copy), with `error_policy` on failure.
    pub async fn pass(&self, name: &str) -> Outcome {
        let pod = match &self.given {
            Some(obj) if obj.name() == name => {
                let mut v = obj.0.clone();
                if v["metadata"]["uid"].is_null() {
                    v["metadata"]["uid"] = json!(format!("uid-{name}"));
                }
                serde_json::from_value(v).expect("pod")
            }
            _ => self.pod(name),
        };
        let pod = Arc::new(pod);
        let (calls, writes) = (self.slurm.calls().len(), self.kube.writes().len());
        let pass = reconcile(pod.clone(), self.ctx.clone());
        let Ok(result) = tokio::time::timeout(Duration::from_secs(5), pass).await else {
            panic!("the pass of {name} did not end within 5 s");
        };
        // Events sent in the background are the pass's writes too.
        self.ctx.writer.background_done().await;
        let (action, error) = match result {
            Ok(action) => (action, None),
            Err(e) => (error_policy(pod, &e, self.ctx.clone()), Some(e.to_string())),
        };
        Outcome {
            action,
            error,
            slurm: self.slurm.calls()[calls..].to_vec(),
            kube: self.kube.writes()[writes..].to_vec(),
        }
    }
}
