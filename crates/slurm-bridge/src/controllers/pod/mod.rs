//! The pod controller: the life of a pod after binding. A bound pod runs only while its Slurm
//! job runs; the job ends with the last of its pods; finalizers are released once the job no
//! longer serves anything. The rules are in [`decide`]; this module gathers the facts from the
//! shared caches and carries the plan out ([`actions`]).
//!
//! Triggers: pod changes, the job watcher's changes (a job that ends in Slurm reaches its pods
//! within a poll interval), nodes that are lost or not Ready, and a slow resync as a safety net.

pub mod actions;
pub mod decide;

use crate::caches::{CacheHandles, Change};
use crate::controllers::metrics::ControllerMetrics;
use crate::controllers::state_loss::StateLoss;
use crate::k8s::PodWriter;
use crate::k8s::slim_pod::Pod;
use crate::slurm::Slurm;
use crate::slurm::{JobEvent, WatchedJob};
use crate::sync::MutexExt;
use crate::wellknown::LABEL_SLURM_JOBID;
use crate::workload::ir::pod_key;
use crate::workload::kinds::{is_terminal, jobid_label, parse_job_id};
use decide::{JobView, Member, Plan};
use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// How the pod controller runs.
#[derive(Clone, Debug)]
pub struct PodControllerOptions {
    pub scheduler_name: String,
    /// Pods reconciled at once.
    pub workers: u16,
    /// How long a node may be gone or NotReady before its pods are released (their job
    /// cancelled, their finalizer dropped): no kubelet will report them any more.
    pub lost_node_grace: Duration,
    /// Interval of the safety-net pass over every cached pod.
    pub resync: Duration,
}

/// Why a pass failed; the pod is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    #[error("Kubernetes API: {}", crate::k8s::api_error::Brief(.0))]
    Kube(#[from] kube::Error),
    #[error("Slurm: {0}")]
    Slurm(#[from] slurm_rest::Error),
}

/// What every pass shares.
pub struct PodCtx<S> {
    /// The shared caches this controller reads.
    pub caches: CacheHandles<S>,
    pub client: kube::Client,
    pub writer: PodWriter,
    pub opts: PodControllerOptions,
    pub metrics: Arc<ControllerMetrics>,
    /// When each node was seen deleted (a deleted node has no condition to tell).
    gone_since: Mutex<HashMap<String, Instant>>,
    /// When each node was first seen not Ready with no `lastTransitionTime` on its condition.
    not_ready_since: Mutex<HashMap<String, Instant>>,
    /// The state-loss census: whether a pod whose job Slurm does not know is kept.
    pub state_loss: Arc<StateLoss>,
    /// Backoff per pod: 0.25 s doubling up to 30 s.
    failures: crate::backoff::Backoffs,
}

impl<S: Slurm> PodCtx<S> {
    pub fn new(
        caches: CacheHandles<S>,
        client: kube::Client,
        opts: PodControllerOptions,
        metrics: Arc<ControllerMetrics>,
        state_loss: Arc<StateLoss>,
    ) -> Arc<Self> {
        Arc::new(PodCtx {
            not_ready_since: Default::default(),
            state_loss,
            writer: PodWriter::new(client.clone(), &opts.scheduler_name),
            caches,
            client,
            opts,
            metrics,
            gone_since: Default::default(),
            failures: crate::backoff::Backoffs::new(
                Duration::from_millis(250),
                Duration::from_secs(30),
            ),
        })
    }

    /// `Some(remaining)` while the node is unhealthy but within its grace, `None` when healthy,
    /// `Some(ZERO)` once lost.
    fn node_loss(&self, node: &str) -> Option<Duration> {
        let grace = self.opts.lost_node_grace;
        let Some(n) = self.caches.nodes.get(&ObjectRef::<Node>::new(node)) else {
            let mut gone = self.gone_since.locked();
            let since = *gone.entry(node.to_string()).or_insert_with(Instant::now);
            return Some(grace.saturating_sub(since.elapsed()));
        };
        self.gone_since.locked().remove(node);
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        match ready {
            Some(c) if c.status == "True" => {
                self.not_ready_since.locked().remove(node);
                None
            }
            Some(c) => {
                let for_ = unhealthy_for(
                    node,
                    c.last_transition_time.as_ref().map(|t| t.0),
                    &self.not_ready_since,
                    k8s_openapi::jiff::Timestamp::now(),
                    Instant::now(),
                );
                Some(grace.saturating_sub(for_))
            }
            // No Ready condition yet: a node still registering.
            None => None,
        }
    }

    fn member(&self, pod: &Pod) -> (Member, Option<Duration>) {
        let node = crate::k8s::bound_node(pod);
        let loss = node.and_then(|n| self.node_loss(n));
        let status = pod.status.as_ref();
        let running = |list: Option<&Vec<crate::k8s::slim_pod::ContainerStatus>>| {
            list.into_iter()
                .flatten()
                .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        };
        let containers_running = status.is_some_and(|s| {
            running(s.container_statuses.as_ref()) || running(s.init_container_statuses.as_ref())
        });
        let member = Member {
            key: pod_key(pod),
            bound: node.is_some(),
            terminal: is_terminal(pod),
            succeeded: status.and_then(|s| s.phase.as_deref()) == Some("Succeeded"),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            containers_running,
            node_lost: loss == Some(Duration::ZERO),
            has_finalizer: crate::wellknown::holds_finalizer(pod),
            disrupted: actions::is_disrupted(pod),
            rejected: actions::kubelet_rejection(pod).is_some(),
            lost_marked: crate::controllers::state_loss::is_marked(pod),
            hold_if_unknown: false,
        };
        (member, loss.filter(|d| !d.is_zero()))
    }

    /// The cached pods carrying job id label `value`: from the pod index (O(job)), or a scan
    /// where no index is kept (unit tests).
    fn pods_of_job(&self, value: &str) -> Vec<Arc<Pod>> {
        let candidates: Vec<Arc<Pod>> = match &self.caches.pod_groups {
            Some(index) => index
                .of_job(value)
                .into_iter()
                .filter_map(|(ns, name)| self.caches.pods.get(&ObjectRef::new(&name).within(&ns)))
                .collect(),
            None => self.caches.pods.state(),
        };
        // Checked on each pod too: the store may hold a newer version than the index has seen.
        candidates
            .into_iter()
            .filter(|p| p.labels().get(LABEL_SLURM_JOBID).map(String::as_str) == Some(value))
            .collect()
    }

    fn backoff(&self, key: &str) -> Duration {
        self.failures.next(key)
    }

    fn succeeded(&self, key: &str) {
        self.failures.forget(key);
    }
}

/// How long a node has been not Ready: since its Ready condition's `lastTransitionTime`, or,
/// when the condition carries none, since this controller first saw it so (remembered in `seen`
/// per node; without that, a node reporting no time would never reach the lost-node grace).
fn unhealthy_for(
    node: &str,
    transition: Option<k8s_openapi::jiff::Timestamp>,
    seen: &Mutex<HashMap<String, Instant>>,
    now: k8s_openapi::jiff::Timestamp,
    now_instant: Instant,
) -> Duration {
    match transition {
        Some(since) => {
            seen.locked().remove(node);
            Duration::try_from(now.duration_since(since)).unwrap_or_default()
        }
        None => {
            let mut seen = seen.locked();
            let first = *seen.entry(node.to_string()).or_insert(now_instant);
            now_instant.saturating_duration_since(first)
        }
    }
}

/// The job a pod names, from the watcher's index; an id the index lacks is asked of Slurm once.
/// A job whose admin_comment does not name the pod with its uid is not the pod's: after Slurm
/// lost its state it hands out job ids from FirstJobId again, so a new job may carry the id an
/// old pod's label names. Such a pod's job counts as unknown (`Err(id)`).
async fn job_of<S: Slurm>(
    ctx: &PodCtx<S>,
    pod: &Pod,
) -> Result<Option<Result<Arc<WatchedJob>, u32>>, PodError> {
    let Some(id) = jobid_label(pod).and_then(parse_job_id) else {
        return Ok(None);
    };
    let cached = ctx.caches.jobs.index().get(id);
    let job = match cached {
        Some(j) => Some(j),
        None => ctx.caches.jobs.refresh(id).await?,
    };
    Ok(Some(own_job(pod, job).ok_or(id)))
}

/// `job` when it names `pod` with its uid (see [`job_of`]).
fn own_job(pod: &Pod, job: Option<Arc<WatchedJob>>) -> Option<Arc<WatchedJob>> {
    job.filter(|j| {
        j.comment
            .names_pod(&pod_key(pod), pod.metadata.uid.as_deref())
    })
}

/// How long a pod the scheduler bound without the job id label has left to get it: the
/// Binding carried the label, and an API server that does not copy a Binding's labels
/// (Kubernetes before 1.35, or PodTopologyLabelsAdmission off) dropped it; the scheduler sees
/// that in its cache and patches it (`k8s::pod_writer::binding_labels`). Without the grace such
/// a pod would be removed as bound with no job.
pub const LABEL_GRACE: Duration = Duration::from_secs(30);

/// The rest of [`LABEL_GRACE`] for a pod bound by this scheduler (it carries the node
/// annotation only a Binding of the bridge sets) less than that long before `now`.
fn label_grace(pod: &Pod, now: k8s_openapi::jiff::Timestamp) -> Option<Duration> {
    pod.annotations()
        .get(crate::wellknown::ANNOTATION_SLURM_NODE)?;
    let scheduled = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")?;
    let since = scheduled.last_transition_time.as_ref()?.0;
    let age = now.duration_since(since);
    let age = Duration::try_from(age).unwrap_or_default();
    LABEL_GRACE.checked_sub(age).filter(|d| !d.is_zero())
}

/// One pass for a pod and, through it, its job.
pub async fn reconcile<S: Slurm>(pod: Arc<Pod>, ctx: Arc<PodCtx<S>>) -> Result<Action, PodError> {
    let started = Instant::now();
    // Every line a pass logs carries the pod.
    let span = tracing::info_span!("pod_lifecycle_pass", pod = %pod_key(&pod));
    let result = reconcile_inner(&pod, &ctx).instrument(span).await;
    ctx.metrics
        .reconcile
        .observe("pod", started, result.is_ok());
    if result.is_ok() {
        ctx.succeeded(&pod_key(&pod));
    }
    result
}

async fn reconcile_inner<S: Slurm>(pod: &Pod, ctx: &PodCtx<S>) -> Result<Action, PodError> {
    let (mut me, recheck_in) = ctx.member(pod);
    let released_unbound = me.deleting && me.has_finalizer && jobid_label(pod).is_none();
    if !me.bound && !me.terminal && !released_unbound {
        // Pending: the scheduler's (one deleted before it was labelled is decided below).
        return Ok(Action::await_change());
    }
    let mut job = job_of(ctx, pod).await?;
    // A live pod is removed only on a fresh answer: the index may lag behind Slurm.
    if !me.finished()
        && !me.deleting
        && let Some(Ok(j)) = &job
        && !j.is_running()
    {
        let id = j.job_id;
        job = Some(own_job(pod, ctx.caches.jobs.refresh(id).await?).ok_or(id));
    }
    if job.is_none()
        && me.bound
        && !me.finished()
        && !me.deleting
        && let Some(wait) = label_grace(pod, k8s_openapi::jiff::Timestamp::now())
    {
        tracing::debug!(
            ?wait,
            "bound without its job id label just now; waiting for it"
        );
        return Ok(Action::requeue(wait + Duration::from_millis(100)));
    }
    let view = match &job {
        None => JobView::NoLabel,
        Some(Err(id)) => JobView::Unknown(*id),
        Some(Ok(j)) => JobView::Known(j),
    };
    // Slurm may have lost its state: the census decides whether a pod whose job is unknown is
    // kept (taken only then: it reads every cached pod).
    let census = match view {
        JobView::Unknown(_) if me.bound && !me.finished() && !me.deleting => {
            let census = ctx.state_loss.census();
            me.hold_if_unknown = census.holds(me.lost_marked);
            Some(census)
        }
        _ => None,
    };
    let siblings: Vec<Arc<Pod>> = match jobid_label(pod) {
        Some(value) if job.is_some() => ctx.pods_of_job(value),
        _ => Vec::new(),
    };
    // The members of a known job are the pods it names: a pod still labelled with the id of a
    // job Slurm lost is not a member of the new job that got that id.
    let siblings: Vec<Arc<Pod>> = match &view {
        JobView::Known(j) => job_members(&j.comment, siblings, |ns, name| {
            ctx.caches.pods.get(&ObjectRef::new(name).within(ns))
        }),
        _ => siblings,
    };
    let mut members: Vec<Member> = siblings.iter().map(|p| ctx.member(p).0).collect();
    if !members.iter().any(|m| m.key == me.key) {
        members.push(me.clone());
    }
    match decide::decide(&me, &view, &members) {
        Plan::Keep => {}
        Plan::Hold => {
            if !me.lost_marked
                && let (Some(census), Some(job_id)) = (&census, view.job_id())
            {
                actions::hold(ctx, pod, job_id, census).await?;
            }
        }
        Plan::Unhold => {
            if let Some(job_id) = view.job_id() {
                actions::unhold(ctx, pod, job_id).await?;
            }
        }
        Plan::Remove(cause) => {
            actions::remove(ctx, pod, &view, cause).await?;
        }
        Plan::Release { cancel, pods } => {
            if let Some((job_id, cause)) = cancel {
                actions::cancel(ctx, job_id, cause).await?;
            }
            release_all(ctx, pod, &me.key, &siblings, &pods).await?;
        }
        Plan::Disband { remove, pods } => {
            for key in &remove {
                if let Some(p) = find(pod, &me.key, &siblings, key) {
                    tracing::info!(deleted = %me.key, job_id = ?view.job_id(), "a pod of the group was deleted: removing its sibling");
                    actions::remove(ctx, p, &view, decide::Cause::GroupMemberDeleted).await?;
                }
            }
            release_all(ctx, pod, &me.key, &siblings, &pods).await?;
        }
    }
    // A node within its grace: look again when the grace is over.
    Ok(match recheck_in {
        Some(d) => Action::requeue(d + Duration::from_millis(100)),
        None => Action::await_change(),
    })
}

/// The pod named `key`: the reconciled one or one of its siblings.
fn find<'a>(pod: &'a Pod, me: &str, siblings: &'a [Arc<Pod>], key: &str) -> Option<&'a Pod> {
    siblings
        .iter()
        .find(|p| pod_key(p) == key)
        .map(|p| &**p)
        .or((key == me).then_some(pod))
}

/// Releases the finalizers of `keys` (the reconciled pod or its siblings).
async fn release_all<S: Slurm>(
    ctx: &PodCtx<S>,
    pod: &Pod,
    me: &str,
    siblings: &[Arc<Pod>],
    keys: &[String],
) -> Result<(), PodError> {
    for key in keys {
        if let Some(p) = find(pod, me, siblings, key) {
            if actions::kubelet_rejection(p).is_some() {
                actions::rejected_event(ctx, p).await;
            }
            actions::release(ctx, p).await?;
        }
    }
    Ok(())
}

/// Backoff per pod.
pub fn error_policy<S: Slurm>(pod: Arc<Pod>, err: &PodError, ctx: Arc<PodCtx<S>>) -> Action {
    let key = pod_key(&pod);
    let delay = ctx.backoff(&key);
    tracing::warn!(pod = %key, error = %err, retry_in = ?delay, "pod lifecycle pass failed");
    Action::requeue(delay)
}

/// The pods to look at after a job change: those its admin_comment lists and those labelled
/// with its id.
fn pods_of_event<S: Slurm>(ctx: &PodCtx<S>, event: &JobEvent) -> Vec<ObjectRef<Pod>> {
    let job = event.job();
    let mut refs: Vec<ObjectRef<Pod>> = job
        .comment
        .pod_names()
        .map(|(ns, name)| ObjectRef::new(name).within(ns))
        .collect();
    refs.extend(
        ctx.pods_of_job(&job.job_id.to_string())
            .iter()
            .map(|p| crate::k8s::pod_ref(p)),
    );
    refs
}

/// The bound pods on `node`.
fn pods_on<S: Slurm>(ctx: &PodCtx<S>, node: &str) -> Vec<ObjectRef<Pod>> {
    ctx.caches
        .pods
        .state()
        .iter()
        .filter(|p| crate::k8s::bound_node(p) == Some(node))
        .map(|p| crate::k8s::pod_ref(p))
        .collect()
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_none_or(|c| c.status == "True")
}

/// The changes of the shared caches that trigger pod passes, subscribed to before the
/// controller starts so none falls in between.
pub struct PodTriggers {
    /// Pod changes ([`crate::caches::Caches::pod_changes`]).
    pub pod_changes: tokio::sync::mpsc::UnboundedReceiver<Change<Pod>>,
    /// Node changes ([`crate::caches::Caches::node_changes`]).
    pub node_changes: tokio::sync::mpsc::UnboundedReceiver<Change<Node>>,
}

/// Runs the controller until `stop` completes (the passes in flight finish first).
pub async fn run<S: Slurm>(
    ctx: Arc<PodCtx<S>>,
    triggers: PodTriggers,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (tx, rx) = mpsc::unbounded::<ObjectRef<Pod>>();
    let PodTriggers {
        mut pod_changes,
        mut node_changes,
    } = triggers;
    let mut job_events = ctx.caches.jobs.subscribe();
    let feeder = {
        let ctx = ctx.clone();
        async move {
            loop {
                let refs: Vec<ObjectRef<Pod>> = tokio::select! {
                    Some(change) = pod_changes.recv() => match change {
                        Change::Applied(p) => vec![crate::k8s::pod_ref(&p)],
                        // Its siblings may now be the last ones alive.
                        Change::Deleted(p) => match jobid_label(&p) {
                            Some(v) => ctx.pods_of_job(v).iter().map(|p| crate::k8s::pod_ref(p)).collect(),
                            None => Vec::new(),
                        },
                        Change::Relisted => Vec::new(),
                    },
                    Some(event) = job_events.recv() => pods_of_event(&ctx, &event),
                    Some(change) = node_changes.recv() => match change {
                        Change::Deleted(n) => pods_on(&ctx, &n.name_any()),
                        Change::Applied(n) if !node_ready(&n) => pods_on(&ctx, &n.name_any()),
                        _ => Vec::new(),
                    },
                    else => return,
                };
                for r in refs {
                    if tx.unbounded_send(r).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let resync = ctx.opts.resync;
    let ticks = futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(resync).await;
        Some(((), ()))
    });
    let controller = Controller::for_stream(
        futures::stream::empty::<Result<Pod, watcher::Error>>(),
        ctx.caches.pods.clone(),
    )
    .with_config(ControllerConfig::default().concurrency(ctx.opts.workers))
    .reconcile_all_on(futures::stream::once(async {}).chain(ticks))
    .reconcile_on(rx)
    .graceful_shutdown_on(stop)
    .run(reconcile, error_policy, ctx.clone())
    .for_each(|res| {
        if let Err(e) = res {
            tracing::debug!(error = %e, "pod lifecycle error");
        }
        futures::future::ready(())
    });
    tokio::select! {
        _ = controller => {}
        _ = feeder => {}
    }
}

/// The pods of a job its comment names: those `labelled` with its id (a pod labelled with the
/// id of a job Slurm lost is not a member of the new job that got that id), and those it names
/// that `get` finds with the named uid but no label yet (its label waits, or its Binding
/// failed): their siblings finishing must not end the job they wait to join.
fn job_members(
    comment: &crate::workload::admin_comment::AdminComment,
    labelled: Vec<Arc<Pod>>,
    get: impl Fn(&str, &str) -> Option<Arc<Pod>>,
) -> Vec<Arc<Pod>> {
    let mut named: Vec<Arc<Pod>> = labelled
        .into_iter()
        .filter(|p| comment.names_pod(&pod_key(p), p.metadata.uid.as_deref()))
        .collect();
    // Every pod of a large gang passes through here: a set, not a scan per named key.
    let labelled_keys: std::collections::HashSet<String> =
        named.iter().map(|p| pod_key(p)).collect();
    for key in &comment.pods {
        if labelled_keys.contains(key) {
            continue;
        }
        if let Some((ns, name)) = key.split_once('/')
            && let Some(p) = get(ns, name)
            && comment.names_pod(key, p.metadata.uid.as_deref())
        {
            named.push(p);
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn named_pod(name: &str, uid: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": uid},
            }))
            .expect("pod"),
        )
    }

    #[test]
    fn a_pod_the_job_names_is_a_member_before_its_label() {
        let comment = crate::workload::admin_comment::AdminComment::new(
            Some("coscheduling/ns/g".into()),
            [("a", "ua"), ("b", "ub"), ("c", "uc")]
                .map(|(n, u)| (format!("ns/{n}"), Some(u.to_string()))),
        );
        let labelled = vec![named_pod("a", "ua"), named_pod("b", "ub")];
        let names = |members: Vec<Arc<Pod>>| -> Vec<String> {
            let mut v: Vec<String> = members.iter().map(|p| pod_key(p)).collect();
            v.sort();
            v
        };
        // c is unbound and unlabelled (its Binding failed): a member all the same.
        let got = job_members(&comment, labelled.clone(), |ns, name| {
            (ns == "ns" && name == "c").then(|| named_pod("c", "uc"))
        });
        assert_eq!(names(got), ["ns/a", "ns/b", "ns/c"]);
        // A c recreated under another uid is another pod: not a member.
        let got = job_members(&comment, labelled.clone(), |_, name| {
            (name == "c").then(|| named_pod("c", "other"))
        });
        assert_eq!(names(got), ["ns/a", "ns/b"]);
        // A labelled pod the job does not name (a lost job's id reused) is not one either.
        let mut with_stranger = labelled;
        with_stranger.push(named_pod("z", "uz"));
        let got = job_members(&comment, with_stranger, |_, _| None);
        assert_eq!(names(got), ["ns/a", "ns/b"]);
    }

    fn pod(annotated: bool, scheduled_at: Option<&str>) -> Pod {
        let annotations = if annotated {
            json!({crate::wellknown::ANNOTATION_SLURM_NODE: "n1"})
        } else {
            json!({})
        };
        let conditions = match scheduled_at {
            Some(t) => json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": t}]),
            None => json!([]),
        };
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
            "spec": {"nodeName": "n1"},
            "status": {"conditions": conditions},
        }))
        .expect("pod")
    }

    #[test]
    fn a_not_ready_node_without_a_transition_time_is_timed_from_when_first_seen() {
        let seen = Mutex::new(HashMap::new());
        let now: k8s_openapi::jiff::Timestamp = "2026-12-03T12:00:30Z".parse().unwrap();
        let t0 = Instant::now();
        // No lastTransitionTime: first seen now, then counted from then (it used to count from
        // "now" at every pass, so the node never reached the grace).
        assert_eq!(unhealthy_for("n1", None, &seen, now, t0), Duration::ZERO);
        let later = t0 + Duration::from_secs(400);
        assert_eq!(
            unhealthy_for("n1", None, &seen, now, later),
            Duration::from_secs(400)
        );
        assert_eq!(
            unhealthy_for("n2", None, &seen, now, later),
            Duration::ZERO,
            "per node"
        );
        // With a time, the condition's transition counts (and the remembered time goes).
        let since: k8s_openapi::jiff::Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        assert_eq!(
            unhealthy_for("n1", Some(since), &seen, now, later),
            Duration::from_secs(30)
        );
        assert!(!seen.locked().contains_key("n1"));
        // A transition time in the future (clock skew): not unhealthy yet.
        let ahead: k8s_openapi::jiff::Timestamp = "2026-12-03T12:01:00Z".parse().unwrap();
        assert_eq!(
            unhealthy_for("n3", Some(ahead), &seen, now, later),
            Duration::ZERO
        );
    }

    #[test]
    fn a_pod_bound_without_its_label_gets_a_grace_only_when_just_bound_by_the_bridge() {
        let now: k8s_openapi::jiff::Timestamp = "2026-12-03T12:00:30Z".parse().unwrap();
        assert_eq!(
            label_grace(&pod(true, Some("2026-12-03T12:00:10Z")), now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            label_grace(&pod(true, Some("2026-12-03T12:00:00Z")), now),
            None,
            "grace over"
        );
        assert_eq!(
            label_grace(&pod(false, Some("2026-12-03T12:00:10Z")), now),
            None,
            "not bound by the bridge's Binding"
        );
        assert_eq!(label_grace(&pod(true, None), now), None, "no PodScheduled");
        assert_eq!(
            label_grace(&pod(true, Some("2026-12-03T12:01:00Z")), now),
            Some(LABEL_GRACE),
            "a clock behind the API server's"
        );
    }
}
