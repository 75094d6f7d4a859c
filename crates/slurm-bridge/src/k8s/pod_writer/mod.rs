//! The bridge's Kubernetes writes on pods: job id label (with the finalizer and toleration where
//! missing: [`label_patch`]), node annotation, binding, the PodScheduled condition, and Events.
//! The scheduler binds with it; the pod controller removes finalizers and job labels with it.
//! Every request that writes is counted in [`KubeWrites`] by its [`write_kind`].

use super::label_memo::{Claim, LabelMemo, LabelTicket};
use super::label_patch::label_patch;
use super::writes::{KubeWrites, write_kind};
use crate::k8s::pod_key;
use crate::k8s::slim_pod::Pod;
use crate::sync::MutexExt;
use crate::wellknown::{
    ANNOTATION_SLURM_NODE, FINALIZER, LABEL_SLURM_JOBID, managed_node_toleration,
};
use k8s_openapi::api::core::v1::{Binding, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use label_queue::LabelQueue;
use report_queue::ReportQueue;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A binding this writer posted (or is posting), kept while the pod exists. Not judged by
/// resourceVersions as the label patches are ([`LabelMemo`]): a Binding's answer carries none, and the cache may apply
/// the label patch's version before the binding is even sent, so a pass reading that version
/// would bind again (1.11 Bindings per pod in a burst before this). Nor dropped when the cache
/// shows the pod bound: a pass that took its copy of the pod just before still holds an unbound
/// one (1.05 Bindings per pod with that). About 150 bytes per bound pod.
struct Bound {
    uid: Option<String>,
    node: String,
    /// The job id label the Binding carried, until the cache first shows the pod bound
    /// ([`binding_labels`]).
    label: Option<u32>,
}

/// How a pod's job id label reaches it when it is bound ([`PodWriter::label_for_binding`]):
/// patched already, or carried on the Binding (under the ticket, unless a patch of it is in
/// flight beside).
#[derive(Default)]
pub struct BindLabel(Option<(u32, Option<LabelTicket>)>);

/// Writes pods and records events as the scheduler.
#[derive(Clone)]
pub struct PodWriter {
    client: Client,
    /// Shared, as `instance`: thousands of queued background writes each hold a copy of the
    /// writer.
    scheduler_name: Arc<str>,
    /// `reportingInstance` of Events: the pod name when set, else the host name.
    instance: Arc<str>,
    /// Label patches sent and in flight ([`LabelMemo`]): a pod is labelled once, whatever copy
    /// of it a pass holds.
    labels: LabelMemo,
    /// Bindings posted, by pod key, until the pod goes (or another pod of that name is seen).
    bound: Arc<Mutex<HashMap<String, Bound>>>,
    /// Events and label patches being sent in the background ([`PodWriter::event_in_background`],
    /// [`PodWriter::label_in_background`]).
    background: Arc<tokio::sync::watch::Sender<usize>>,
    /// Background Events in flight at once ([`BACKGROUND_EVENTS`]).
    event_slots: Arc<tokio::sync::Semaphore>,
    /// Label patches and Bindings in flight: the writes a pod waits for, which background
    /// Events give way to ([`EVENT_MAX_LAG`]).
    urgent: Arc<tokio::sync::watch::Sender<usize>>,
    /// Bindings and submits in flight, which background label patches give way to
    /// ([`LABEL_MAX_LAG`]).
    label_holds: Arc<tokio::sync::watch::Sender<usize>>,
    /// True once the queued label patches go out at once ([`PodWriter::flush_labels`]).
    flushing: Arc<tokio::sync::watch::Sender<bool>>,
    /// How long a background label patch gives way to them ([`LABEL_MAX_LAG`]).
    label_max_lag: std::time::Duration,
    /// How long a background Event gives way to them ([`EVENT_MAX_LAG`]).
    event_max_lag: std::time::Duration,
    /// PodScheduled=False reports for [`REPORT_WORKERS`] to send ([`PodWriter::report`]).
    reports: Arc<ReportQueue>,
    /// Background label patches waiting for their turn ([`label_queue`]).
    label_queue: Arc<LabelQueue>,
    /// Whether the job id label may ride on the Binding ([`binding_labels`]).
    binding_labels: Arc<binding_labels::BindingLabels>,
    /// Where the label patch of a pod whose Binding's label was dropped is counted.
    repair_writes: Option<KubeWrites>,
}

/// The action of the scheduler's Events about pods.
const SCHEDULING: &str = "Scheduling";

/// Background Events sent at once. Few, as client-go's event broadcaster sends them one at a
/// time: in a burst the API server serves the label patches and Bindings first, which a pod
/// waits for, and the Events (which no decision reads) queue behind them, in bind order.
pub const BACKGROUND_EVENTS: usize = 2;

/// How long a background Event gives way to the label patches and Bindings in flight: it is
/// sent once none is in flight, or after this long. In a burst the API server, the scarcest
/// thing on a small control plane, then spends itself on the writes the pods wait for, and the
/// Events follow when it ends; under a steady load they go out in the gaps between binds,
/// never more than this late.
pub const EVENT_MAX_LAG: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a background label patch gives way to the Bindings and submits in flight
/// ([`PodWriter::labels_wait`]): it is sent once none is, or after this long. In a burst the
/// pods allocated meanwhile are bound with their label on the Binding (one write, not two:
/// [`PodWriter::label_for_binding`]), and the API server spends itself on the Bindings; a pod
/// that waits for Slurm shows its job id this much later at most.
pub const LABEL_MAX_LAG: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a background label patch waits before it may go out at all. A pod whose job Slurm
/// starts within this is bound with the label on the Binding (one write, not two), whether or
/// not submits and Bindings are in flight at that moment: under a steady arrival they often are
/// not, and before this each pod cost a label patch besides its Binding. A pod that waits for
/// Slurm shows its job id this much later (crash safety never rested on the label: the job's
/// admin_comment names its pods).
pub const LABEL_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(2);

/// Workers sending background label patches, one at a time each
/// ([`PodWriter::label_in_background`]), as many as the scheduler's default workers: the label
/// patches of a burst are in flight beside its Bindings, not all at once in front of them.
pub const BACKGROUND_LABELS: usize = 64;

/// Tasks sending the queued PodScheduled=False reports ([`PodWriter::report`]), each one
/// request at a time: fewer than the label patches and Bindings a pod waits for.
pub const REPORT_WORKERS: usize = 16;

mod binding_labels;
mod label_queue;
mod report_queue;
mod reports;

/// One write (or submit) in flight, counted while it lives.
pub struct Counted<'a>(&'a tokio::sync::watch::Sender<usize>);

impl<'a> Counted<'a> {
    fn new(count: &'a tokio::sync::watch::Sender<usize>) -> Self {
        count.send_modify(|n| *n += 1);
        Counted(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// True when a [`label_patch`] sets the job id label and nothing else.
fn is_label_only(patch: &serde_json::Value) -> bool {
    patch.get("spec").is_none()
        && patch["metadata"].as_object().is_some_and(|m| m.len() == 1)
        && patch["metadata"]["labels"]
            .as_object()
            .is_some_and(|l| l.len() == 1)
}

/// Logs how a background label patch of the pod `key` ended.
fn label_outcome(key: &str, job_id: u32, sent: Result<(), kube::Error>) {
    match sent {
        Ok(()) => tracing::debug!(pod = %key, job_id, "labelled"),
        // Deleted meanwhile: its job is the sweep's and the next pass's business.
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tracing::warn!(pod = %key, job_id,
            error = %crate::k8s::api_error::Brief(&e),
            "labelling failed; the pod's next pass labels it"),
    }
}

fn api_for(client: &Client, pod: &Pod) -> Api<Pod> {
    Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default())
}

fn params(scheduler_name: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(scheduler_name.to_string()),
        ..Default::default()
    }
}

impl PodWriter {
    pub fn new(client: Client, scheduler_name: &str) -> Self {
        PodWriter {
            instance: crate::leader::identity().into(),
            client,
            scheduler_name: scheduler_name.into(),
            labels: LabelMemo::default(),
            bound: Default::default(),
            background: Arc::new(tokio::sync::watch::channel(0).0),
            event_slots: Arc::new(tokio::sync::Semaphore::new(BACKGROUND_EVENTS)),
            urgent: Arc::new(tokio::sync::watch::channel(0).0),
            label_holds: Arc::new(tokio::sync::watch::channel(0).0),
            flushing: Arc::new(tokio::sync::watch::channel(false).0),
            label_max_lag: LABEL_MAX_LAG,
            event_max_lag: EVENT_MAX_LAG,
            reports: Arc::default(),
            label_queue: Arc::new(LabelQueue::new(BACKGROUND_LABELS)),
            binding_labels: Arc::default(),
            repair_writes: None,
        }
    }

    /// The writer labelling (counted in `writes`) a pod whose Binding's label the API server
    /// dropped, as the cache shows it bound ([`binding_labels`]).
    pub fn repairing_labels(mut self, writes: &KubeWrites) -> Self {
        self.repair_writes = Some(writes.clone());
        self
    }

    /// Background label patches wait while the returned guard lives, as they do while a
    /// Binding is in flight ([`LABEL_MAX_LAG`]): held by a submit, so in a burst the pods whose
    /// jobs Slurm starts at once are bound with the label on the Binding, one write, while the
    /// submits and Bindings have the API server and the CPU.
    pub fn labels_wait(&self) -> Counted<'_> {
        Counted::new(&self.label_holds)
    }

    /// The writer with background label patches giving way for `lag` at most (tests).
    pub fn with_label_max_lag(mut self, lag: std::time::Duration) -> Self {
        self.label_max_lag = lag;
        self
    }

    /// The writer with background Events giving way for `lag` at most (tests).
    pub fn with_event_max_lag(mut self, lag: std::time::Duration) -> Self {
        self.event_max_lag = lag;
        self
    }

    fn bound(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bound>> {
        self.bound.locked()
    }

    /// True when this writer posted a Binding of this very pod (same uid) to `node` that the
    /// caller's copy of the pod does not show yet.
    fn bind_posted(&self, pod: &Pod, node: &str) -> bool {
        self.bound()
            .get(&pod_key(pod))
            .is_some_and(|b| b.uid == pod.uid() && b.node == node)
    }

    /// The pod cache applied `pod`: a pod recreated under a known name is another pod, and
    /// nothing is kept for the old one. What was written to this very pod is kept whatever
    /// versions the cache applies: a pass may still hold a copy read before them.
    pub fn seen(&self, pod: &Pod) {
        let key = pod_key(pod);
        let carried = {
            let mut bound = self.bound();
            match bound.get_mut(&key) {
                Some(b) if b.uid != pod.uid() => {
                    bound.remove(&key);
                    None
                }
                // The first sight of the pod bound: did the Binding's label land with it?
                Some(b) if crate::k8s::bound_node(pod) == Some(b.node.as_str()) => b.label.take(),
                _ => None,
            }
        };
        self.labels.seen(pod);
        self.reports.seen(&key, pod.metadata.uid.as_deref());
        if let Some(job_id) = carried
            && pod.labels().get(LABEL_SLURM_JOBID) != Some(&job_id.to_string())
        {
            self.label_dropped(pod, job_id);
        }
    }

    /// The API server bound `pod` without the job id label its Binding carried: labels are
    /// patched from now on, this pod's too.
    fn label_dropped(&self, pod: &Pod, job_id: u32) {
        if self.binding_labels.dropped() {
            tracing::warn!(pod = %pod_key(pod), job_id,
                "the API server does not copy a Binding's labels onto the pod (Kubernetes before \
                 1.35, or feature gate PodTopologyLabelsAdmission off): the job id label is \
                 patched before binding from now on");
        }
        if let Some(writes) = &self.repair_writes {
            self.label_in_background(writes, pod, job_id, false);
        }
    }

    /// Forgets what is kept about a pod (it was deleted).
    pub fn forget_pod(&self, key: &str) {
        self.labels.forget(key);
        self.bound().remove(key);
        self.reports.forget(key);
    }

    /// Keeps what is kept only for the pods `keep` accepts (after a relist of the pods).
    pub fn retain_pods(&self, keep: impl Fn(&str) -> bool) {
        self.labels.retain(&keep);
        self.bound().retain(|key, _| keep(key));
        self.reports.retain(&keep);
    }

    /// Labels a pod with its job id, adds the finalizer once and the bridge toleration once, and
    /// clears a node annotation that does not belong to this job ([`label_patch`]: for a pod the
    /// admission webhook created, the label alone). Nothing is written when the pod has all
    /// this already, or when this writer labelled it with the job on top of `pod` (a copy read
    /// from a cache that has not caught up); a patch of it in flight
    /// ([`PodWriter::label_in_background`]) is waited for, not sent twice.
    pub async fn label(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        job_id: u32,
        clear_node: bool,
    ) -> Result<(), kube::Error> {
        let Some(patch) = label_patch(pod, job_id, clear_node, &self.scheduler_name) else {
            return Ok(());
        };
        let ticket = loop {
            match self.labels.claim(pod, job_id) {
                Claim::Done => return Ok(()),
                Claim::Send(ticket) => break ticket,
                Claim::Wait(mut outcome) => {
                    let landed = outcome
                        .wait_for(|o| o.is_some())
                        .await
                        .is_ok_and(|o| *o == Some(true));
                    if landed {
                        return Ok(());
                    }
                    // It failed: claim again (another caller may be sending it by now).
                }
                Claim::After(mut earlier) => {
                    // Another job's label of this pod first; then this one.
                    let _ = earlier.wait_for(|o| o.is_some()).await;
                }
            }
        };
        self.send_label(writes, pod, &patch, ticket).await
    }

    /// As [`PodWriter::label`], in the background: queued for [`BACKGROUND_LABELS`] workers,
    /// first come first sent ([`label_queue`]): the caller (a pass that just submitted the job) does not hold its
    /// worker for the API server's answer. A later [`PodWriter::label`] of the pod with the job
    /// (the bind's) waits for this one's outcome, and sends the patch itself if it failed.
    pub fn label_in_background(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        job_id: u32,
        clear_node: bool,
    ) {
        let Some(patch) = label_patch(pod, job_id, clear_node, &self.scheduler_name) else {
            return;
        };
        // Claimed now, so a pass right after waits for this patch instead of sending its own.
        match self.labels.claim(pod, job_id) {
            Claim::Done | Claim::Wait(_) => {}
            Claim::Send(ticket) => {
                // Until a worker's turn for it comes, the pod's bind may take it over
                // ([`Self::take_queued`]). A burst queues thousands of these: each keeps the
                // pod's identity and the patch's text, not a copy of the pod and a tree of JSON
                // values (about 4 KiB), nor a task.
                let not_before = tokio::time::Instant::now() + LABEL_MIN_AGE;
                let deadline = not_before.max(tokio::time::Instant::now() + self.label_max_lag);
                let start = self.label_queue.push(
                    pod_key(pod),
                    pod,
                    job_id,
                    patch.to_string(),
                    ticket,
                    (not_before, deadline),
                    writes.clone(),
                );
                if start {
                    self.label_worker();
                }
            }
            // Another job's label is in flight: this one goes after it, through `label`.
            Claim::After(_) => {
                let (writer, writes, pod_) = (self.clone(), writes.clone(), pod.clone());
                self.label_task(pod, job_id, async move {
                    writer.label(&writes, &pod_, job_id, clear_node).await
                })
            }
        }
    }

    /// A worker sending the queued label patches, one at a time, until none is left: each
    /// waits [`LABEL_MIN_AGE`], then gives way to the Bindings and submits in flight until its
    /// deadline ([`LABEL_MAX_LAG`]).
    fn label_worker(&self) {
        let writer = self.clone();
        self.background.send_modify(|n| *n += 1);
        tokio::spawn(async move {
            let mut flushing = writer.flushing.subscribe();
            loop {
                let mut now = tokio::time::Instant::now();
                if *flushing.borrow() {
                    // No queued patch's `not_before` is later than this.
                    now += LABEL_MIN_AGE;
                }
                let w = match writer.label_queue.next(now) {
                    label_queue::Next::Take(w) => w,
                    label_queue::Next::At(t) => {
                        tokio::select! {
                            _ = tokio::time::sleep_until(t) => {}
                            _ = flushing.wait_for(|f| *f) => {}
                        }
                        continue;
                    }
                    label_queue::Next::Done => break,
                };
                let mut holds = writer.label_holds.subscribe();
                tokio::select! {
                    _ = tokio::time::timeout_at(w.deadline, holds.wait_for(|n| *n == 0)) => {}
                    _ = flushing.wait_for(|f| *f) => {}
                }
                // None: a bind took it over (the Binding carried the label, or it sent it).
                let Some(ticket) = writer.label_queue.turn(&w) else {
                    continue;
                };
                let patch: serde_json::Value =
                    serde_json::from_str(&w.patch).expect("a patch this writer printed");
                let sent = writer
                    .send_label(&w.writes, &w.id.pod(), &patch, ticket)
                    .await;
                label_outcome(&w.key, w.job_id, sent);
            }
            writer.background.send_modify(|n| *n -= 1);
        });
    }

    /// The queued label patches go out now, neither waiting for their age nor giving way: the
    /// process is shutting down ([`PodWriter::background_done`] then waits for them).
    pub fn flush_labels(&self) {
        self.flushing.send_replace(true);
    }

    /// The ticket of the pod's background label patch with `job_id` when it has not gone out
    /// yet: the caller sends the label instead, and no worker sends it.
    fn take_queued(&self, pod: &Pod, job_id: u32) -> Option<LabelTicket> {
        self.label_queue
            .take(&pod_key(pod), pod.metadata.uid.as_deref(), job_id)
    }

    /// Labels `pod` with `job_id` before it is bound: with a patch ([`PodWriter::label`]), or,
    /// where the API server copies a Binding's labels ([`binding_labels`]) and the label is all
    /// the pod lacks, nothing now and the label on the Binding ([`PodWriter::bind_carrying`]).
    /// A background patch of it not sent yet is taken over (carried, or sent now rather than
    /// behind the queue); one in flight is waited for where the label cannot ride.
    pub async fn label_for_binding(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        job_id: u32,
    ) -> Result<BindLabel, kube::Error> {
        let Some(patch) = label_patch(pod, job_id, false, &self.scheduler_name) else {
            return Ok(BindLabel::default());
        };
        let carried = is_label_only(&patch) && self.binding_labels.carried(&self.client).await;
        if let Some(ticket) = self.take_queued(pod, job_id) {
            if carried {
                return Ok(BindLabel(Some((job_id, Some(ticket)))));
            }
            self.send_label(writes, pod, &patch, ticket).await?;
            return Ok(BindLabel::default());
        }
        if carried {
            match self.labels.claim(pod, job_id) {
                Claim::Send(ticket) => return Ok(BindLabel(Some((job_id, Some(ticket))))),
                Claim::Done => return Ok(BindLabel::default()),
                // In flight: not waited for, the Binding carries the same label (the patch, no
                // precondition, sets it again whichever lands last).
                Claim::Wait(_) => return Ok(BindLabel(Some((job_id, None)))),
                // Another job's label in flight: waited for as `label` does.
                Claim::After(_) => {}
            }
        }
        self.label(writes, pod, job_id, false).await?;
        Ok(BindLabel::default())
    }

    /// Runs one label patch from a task of its own, counted in `background`.
    fn label_task(
        &self,
        pod: &Pod,
        job_id: u32,
        send: impl std::future::Future<Output = Result<(), kube::Error>> + Send + 'static,
    ) {
        let (writer, key) = (self.clone(), pod_key(pod));
        self.background.send_modify(|n| *n += 1);
        tokio::spawn(async move {
            label_outcome(&key, job_id, send.await);
            writer.background.send_modify(|n| *n -= 1);
        });
    }

    /// The label patch request, under `ticket`.
    async fn send_label(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        patch: &serde_json::Value,
        ticket: LabelTicket,
    ) -> Result<(), kube::Error> {
        writes.inc(write_kind::LABEL);
        let _urgent = Counted::new(&self.urgent);
        let patched = api_for(&self.client, pod)
            .patch(
                &pod.name_any(),
                &params(&self.scheduler_name),
                &Patch::Strategic(patch),
            )
            .await?;
        ticket.landed(pod, patched.resource_version());
        Ok(())
    }

    /// Removes the bridge finalizer (every occurrence), keeping the others.
    pub async fn remove_finalizer(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
    ) -> Result<(), kube::Error> {
        if !crate::wellknown::holds_finalizer(pod) {
            return Ok(());
        }
        let rest: Vec<&String> = pod
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .collect();
        // Guarded by the resourceVersion: a concurrent finalizer change makes this a conflict
        // (retried) rather than a lost update.
        let patch = json!({"metadata": {
            "finalizers": rest,
            "resourceVersion": pod.resource_version(),
        }});
        self.forget_pod(&pod_key(pod));
        writes.inc(write_kind::FINALIZER);
        match api_for(&self.client, pod)
            .patch(
                &pod.name_any(),
                &params(&self.scheduler_name),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Removes the job id label and node annotation (the job was cancelled under the pod).
    pub async fn clear_job(&self, writes: &KubeWrites, pod: &Pod) -> Result<(), kube::Error> {
        if !pod.labels().contains_key(LABEL_SLURM_JOBID)
            && !pod.annotations().contains_key(ANNOTATION_SLURM_NODE)
        {
            return Ok(());
        }
        let patch = json!({"metadata": {
            "labels": {LABEL_SLURM_JOBID: null},
            "annotations": {ANNOTATION_SLURM_NODE: null},
        }});
        self.forget_pod(&pod_key(pod));
        writes.inc(write_kind::UNLABEL);
        api_for(&self.client, pod)
            .patch(
                &pod.name_any(),
                &params(&self.scheduler_name),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
    }

    /// Binds the pod to `node` (pods/binding) in one request. The Binding carries the node
    /// annotation: kube-apiserver copies a Binding's annotations onto the pod as it sets
    /// `spec.nodeName` and PodScheduled=True, so a pod has the annotation exactly when it is
    /// bound. Returns true when this request bound the pod, false when it was bound to that node
    /// already.
    pub async fn bind(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        node: &str,
    ) -> Result<bool, kube::Error> {
        self.bind_carrying(writes, pod, node, BindLabel::default())
            .await
    }

    /// As [`PodWriter::bind`], the Binding carrying the job id label when `label` says so
    /// ([`PodWriter::label_for_binding`]).
    pub async fn bind_carrying(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        node: &str,
        label: BindLabel,
    ) -> Result<bool, kube::Error> {
        if self.bind_posted(pod, node) {
            // Bound by this writer already (or being bound by a pass still running): the caller
            // read the pod before the cache showed the binding.
            return Ok(false);
        }
        // Recorded before the request: the cache may show the label patch (a version the
        // binding is not in) before the answer comes.
        let key = pod_key(pod);
        self.bound().insert(
            key.clone(),
            Bound {
                uid: pod.uid(),
                node: node.to_string(),
                label: label.0.as_ref().map(|(job_id, _)| *job_id),
            },
        );
        // From now on `report` takes nothing for the pod; one in flight lands first.
        self.reports.bind(&key).await;
        let (job_id, ticket) = label.0.unzip();
        let outcome = self.post_binding(writes, pod, node, job_id).await;
        match (&outcome, ticket.flatten()) {
            (Ok(true), Some(ticket)) => ticket.landed(pod, None),
            (Err(_), _) => {
                self.bound().remove(&key);
            }
            // Bound before (the ticket, dropped, counts as not landed: a later pass holding an
            // unbound copy patches the label, if it is missing at all).
            _ => {}
        }
        outcome
    }

    /// The Binding request of [`PodWriter::bind`].
    async fn post_binding(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        node: &str,
        job_id: Option<u32>,
    ) -> Result<bool, kube::Error> {
        let api = api_for(&self.client, pod);
        let name = pod.name_any();
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: pod.namespace(),
                uid: pod.uid(),
                annotations: Some([(ANNOTATION_SLURM_NODE.to_string(), node.to_string())].into()),
                labels: job_id.map(|j| [(LABEL_SLURM_JOBID.to_string(), j.to_string())].into()),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                api_version: Some("v1".into()),
                name: Some(node.to_string()),
                ..Default::default()
            },
        };
        writes.inc(write_kind::BINDING);
        let (_urgent, _label_hold) = (Counted::new(&self.urgent), Counted::new(&self.label_holds));
        match api
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let current = api.get(&name).await?;
                let bound_to = current.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if bound_to == Some(node) {
                    Ok(false)
                } else {
                    Err(kube::Error::Api(status))
                }
            }
            // The answer was lost, not the Binding, maybe: the pod says whether it landed.
            Err(e) if may_have_landed(&e) => match api.get(&name).await {
                Ok(current)
                    if current.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) =>
                {
                    tracing::info!(pod = %crate::k8s::pod_key(pod), node, error = %e, "the Binding's answer was lost; the pod is bound");
                    Ok(true)
                }
                _ => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Records an `events.k8s.io/v1` Event on the pod; failures are logged, never fatal. Plain
    /// creates, unlike kube-runtime's `Recorder`, which keeps every event it sent in memory for
    /// six minutes (tens of MiB with thousands of pods); the scheduler only reports changes, so
    /// there are no repeats to aggregate.
    pub async fn event(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        self.event_for(SCHEDULING, writes, pod, warning, reason, note)
            .await
    }

    /// As [`PodWriter::event`], from a task of its own: the caller (a bind) does not wait for the
    /// Event, which no decision reads, so a pass ends one request sooner. At most
    /// [`BACKGROUND_EVENTS`] are sent at once, first come first sent. The Event is made now
    /// (its time is the caller's) and the task keeps only it, not a copy of the pod: in a burst
    /// thousands wait for their turn.
    pub fn event_in_background(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        reason: &'static str,
        note: String,
    ) {
        let event = self.build_event(SCHEDULING, pod, false, reason, note);
        self.post_in_background(writes, event);
    }

    /// Posts `event` from a task of its own, at most [`BACKGROUND_EVENTS`] at once.
    fn post_in_background(&self, writes: &KubeWrites, event: k8s_openapi::api::events::v1::Event) {
        let (writer, writes) = (self.clone(), writes.clone());
        let deadline = tokio::time::Instant::now() + self.event_max_lag;
        self.background.send_modify(|n| *n += 1);
        tokio::spawn(async move {
            // The semaphore is never closed; without a permit the Event is sent all the same.
            let _slot = writer.event_slots.clone().acquire_owned().await.ok();
            let mut urgent = writer.urgent.subscribe();
            let waited = tokio::time::timeout_at(deadline, urgent.wait_for(|n| *n == 0))
                .await
                .is_err();
            // When the Event went out, and whether it waited its longest (bench phases).
            tracing::trace!(
                reason = event.reason.as_deref().unwrap_or_default(),
                lag_expired = waited,
                "background event going out"
            );
            writes.inc(write_kind::EVENT);
            crate::k8s::events::post(&writer.client, &event).await;
            writer.background.send_modify(|n| *n -= 1);
        });
    }

    /// The Event about `pod` this writer reports, for `action` (what the reporter did).
    fn build_event(
        &self,
        action: &str,
        pod: &Pod,
        warning: bool,
        reason: &str,
        note: String,
    ) -> k8s_openapi::api::events::v1::Event {
        let reporter = crate::k8s::events::Reporter {
            controller: self.scheduler_name.to_string(),
            instance: self.instance.to_string(),
        };
        let note = crate::k8s::events::Note {
            warning,
            action,
            reason,
            note,
        };
        crate::k8s::events::build(&reporter, pod, note)
    }

    /// Returns once no Event, label patch or report is being sent in the background (tests).
    pub async fn background_done(&self) {
        let mut rx = self.background.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
        self.reports.idle().await;
    }

    /// As [`PodWriter::event`], for another `action` (what the reporter did).
    pub async fn event_for(
        &self,
        action: &str,
        writes: &KubeWrites,
        pod: &Pod,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        writes.inc(write_kind::EVENT);
        let event = self.build_event(action, pod, warning, reason, note);
        crate::k8s::events::post(&self.client, &event).await;
    }

    /// The bridge toleration this writer adds.
    pub fn toleration(&self) -> k8s_openapi::api::core::v1::Toleration {
        managed_node_toleration(&self.scheduler_name)
    }
}

/// Whether a write that failed may still have been applied: no answer came (a reset, a
/// timeout) or a gateway's 5xx did. The API server's own refusals (4xx) were not applied.
fn may_have_landed(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500,
        kube::Error::Service(_) | kube::Error::HyperError(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose client points nowhere (these tests make no requests; the client needs a
    /// runtime).
    fn writer() -> PodWriter {
        let client = Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("URL"),
        ))
        .expect("client");
        PodWriter::new(client, "s")
    }

    fn pod(name: &str, uid: &str, rv: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
        }))
        .expect("pod")
    }

    #[tokio::test]
    async fn a_binding_is_known_while_the_pod_exists() {
        let w = writer();
        let posted = |w: &PodWriter| {
            w.bound().insert(
                "ns/a".into(),
                Bound {
                    uid: Some("u1".into()),
                    node: "n1".into(),
                    label: None,
                },
            )
        };
        posted(&w);
        let unbound = pod("a", "u1", "11");
        // Whatever unbound versions the cache applies (the label patch's own, say), the binding
        // stays known.
        w.seen(&unbound);
        assert!(w.bind_posted(&unbound, "n1"));
        assert!(
            !w.bind_posted(&unbound, "n2"),
            "another node is another binding"
        );
        assert!(!w.bind_posted(&pod("a", "u2", "11"), "n1"), "another pod");
        let mut bound = pod("a", "u1", "12");
        bound.spec = Some(crate::k8s::slim_pod::PodSpec {
            node_name: Some("n1".into()),
            ..Default::default()
        });
        w.seen(&bound);
        assert!(
            w.bind_posted(&unbound, "n1"),
            "a pass holding a copy taken before the cache showed the binding"
        );

        w.seen(&pod("a", "u2", "1"));
        assert!(w.bound().is_empty(), "a pod recreated under the same name");
        posted(&w);
        w.forget_pod("ns/a");
        assert!(w.bound().is_empty(), "deleted");
    }
}
