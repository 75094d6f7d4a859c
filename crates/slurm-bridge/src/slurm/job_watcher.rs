//! The one Slurm job watcher every component shares (design: "no per-pod scans").
//!
//! At start it lists every job once (GET /jobs/state/, then GET /job/{id} for each, a few at a
//! time) and indexes the bridge's jobs by admin_comment.
//! Then it polls the cheap GET /jobs/state/ (12 ms for 2,500 jobs) and fetches GET /job/{id}
//! only for jobs that are new or whose state changed (for a pending bridge job that started,
//! the lighter GET /resources/{id}: its nodes are all that changed), emitting a [`JobEvent`]
//! for each bridge job that changed or disappeared. So an allocation is noticed within one poll
//! interval and the cost per poll does not depend on how many pods wait. While jobs it just
//! submitted pend, the polls between two full listings ask only for those jobs' states
//! (GET /jobs/state/?job_id=..): a full listing costs Slurm in proportion to every job it
//! holds, and at 100 submits a second the fast poll would list thousands of them ten times a
//! second.

mod recent_layouts;

use super::SlurmJobs;
use super::job_index::{JobIndex, WatchedJob};
use crate::sync::{MutexExt, RwLockExt, Subscribers};
use crate::workload::admin_comment::AdminComment;
use futures::StreamExt;
use recent_layouts::RecentLayouts;
use slurm_rest::models::{JobInfo, JobState, NodeResourceLayout};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Job ids per GET /jobs/state/?job_id=.. request (about 2.4 KB of query; slurmrestd's cost
/// grows with the ids asked).
const STATES_PER_REQUEST: usize = 200;

/// How often and how hard the watcher polls.
#[derive(Clone, Debug)]
pub struct JobWatcherConfig {
    /// Time between two GET /jobs/state/ polls.
    pub interval: Duration,
    /// GET /job/{id} requests in flight at once.
    pub fetch_concurrency: usize,
    /// How often the reason of a pending job (Slurm's `state_reason`: Resources, Priority, ...)
    /// is refreshed; a reason change is not a state change, so polling states misses it.
    pub reason_interval: Duration,
    /// Pending jobs whose reason is refreshed per batch at most (oldest first), to bound the cost.
    pub reason_batch: usize,
    /// Time between two reason batches, however fast the poll.
    pub reason_tick: Duration,
    /// Poll interval while a job recorded (submitted or updated) in the last `fast_window` is
    /// still pending, so its allocation is seen within about this long: the scheduler's
    /// submit-to-bind latency. Jobs pending for longer (a backlog) do not keep the fast poll.
    /// These polls ask for those jobs' states only; the full listing stays at `interval`.
    pub fast_interval: Duration,
    /// How long after its submit or update a pending job keeps the poll at `fast_interval`.
    pub fast_window: Duration,
    /// The bridge's cluster name (config `clusterName`): jobs stamped with another are foreign.
    pub cluster: Option<String>,
}

impl Default for JobWatcherConfig {
    fn default() -> Self {
        JobWatcherConfig {
            interval: Duration::from_secs(1),
            fetch_concurrency: 16,
            reason_interval: Duration::from_secs(5),
            reason_batch: 20,
            reason_tick: Duration::from_secs(1),
            fast_interval: Duration::from_millis(100),
            fast_window: Duration::from_secs(10),
            cluster: None,
        }
    }
}

/// A change of one of the bridge's jobs.
#[derive(Clone, Debug)]
pub enum JobEvent {
    /// New, or its state (and so maybe its nodes) changed.
    Changed(Arc<WatchedJob>),
    /// Slurm no longer lists it (purged after MinJobAge, or lost).
    Gone(Arc<WatchedJob>),
}

impl JobEvent {
    pub fn job(&self) -> &Arc<WatchedJob> {
        match self {
            JobEvent::Changed(j) | JobEvent::Gone(j) => j,
        }
    }
}

/// Counters for metrics and benchmarks.
#[derive(Default, Debug)]
pub struct WatcherStats {
    pub polls: AtomicU64,
    pub fetches: AtomicU64,
    pub errors: AtomicU64,
}

/// The watcher; share it with `Arc`.
pub struct JobWatcher<S> {
    source: Arc<S>,
    config: JobWatcherConfig,
    index: RwLock<JobIndex>,
    /// Jobs recorded by [`JobWatcher::record`], with the poll generation at that time: a poll
    /// that started earlier may not list them yet, so it must not treat them as gone.
    recorded: Mutex<HashMap<u32, u64>>,
    generation: AtomicU64,
    subscribers: Subscribers<JobEvent>,
    synced: watch::Sender<bool>,
    /// When each bridge job was last fetched.
    fetched_at: Mutex<HashMap<u32, std::time::Instant>>,
    /// Jobs recorded (submitted or updated) within `fast_window`, with when: the poll is fast
    /// while one of them is still pending ([`JobWatcher::next_wait`]).
    fresh: Mutex<HashMap<u32, std::time::Instant>>,
    /// Wakes the poll loop early after a record.
    nudge: tokio::sync::Notify,
    /// When pending reasons were last refreshed (see `reason_tick`).
    last_reason_batch: Mutex<Option<std::time::Instant>>,
    /// The layouts the allocation reads fetched, for a DRA bind to reuse.
    layouts: Mutex<RecentLayouts>,
    /// When the last listing that read every job without an error started
    /// ([`JobWatcher::has_listed_since`]).
    clean_listing: Mutex<Option<tokio::time::Instant>>,
    pub stats: WatcherStats,
}

impl<S: SlurmJobs> JobWatcher<S> {
    pub fn new(source: Arc<S>, config: JobWatcherConfig) -> Arc<Self> {
        Arc::new(JobWatcher {
            source,
            config,
            index: RwLock::new(JobIndex::default()),
            recorded: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            subscribers: Subscribers::default(),
            synced: watch::channel(false).0,
            fetched_at: Mutex::new(HashMap::new()),
            fresh: Mutex::new(HashMap::new()),
            nudge: tokio::sync::Notify::new(),
            last_reason_batch: Mutex::new(None),
            layouts: Mutex::new(RecentLayouts::default()),
            clean_listing: Mutex::new(None),
            stats: WatcherStats::default(),
        })
    }

    /// Read access to the index.
    pub fn index(&self) -> RwLockReadGuard<'_, JobIndex> {
        self.index.read_locked()
    }

    /// A stream of job events from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<JobEvent> {
        self.subscribers.subscribe()
    }

    /// True once the first full listing is indexed; before that no decision may rely on the
    /// index (a restarted scheduler would otherwise submit a second job for a group).
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first full listing.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Whether a listing that started at `t` or later has read every job without an error: a
    /// job Slurm made before `t` is in the index then (or is not the bridge's). A submit whose
    /// answer was lost waits for this before the group is submitted again.
    pub fn has_listed_since(&self, t: tokio::time::Instant) -> bool {
        self.clean_listing.locked().is_some_and(|at| at >= t)
    }

    /// Asks for a poll soon, as a record does.
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    fn listed_cleanly(&self, started: tokio::time::Instant) {
        let mut at = self.clean_listing.locked();
        if at.is_none_or(|a| a < started) {
            *at = Some(started);
        }
    }

    /// Records a job the caller just submitted or updated, so lookups see it before the next poll.
    /// It counts as just fetched: its pending reason is not looked at before `reason_interval`
    /// (a fresh job has none worth showing yet, and a burst of submits would otherwise cost a
    /// GET /job/{id} per job and `reason_tick` on top of the one its allocation takes).
    pub fn record(&self, job: WatchedJob) {
        let generation = self.generation.load(Ordering::SeqCst);
        self.recorded.locked().insert(job.job_id, generation);
        self.fetched_at
            .locked()
            .insert(job.job_id, std::time::Instant::now());
        let job_id = job.job_id;
        self.index.write_locked().upsert(job);
        self.fresh
            .locked()
            .insert(job_id, std::time::Instant::now());
        self.nudge.notify_one();
    }

    /// Records the new admin_comment of a job the caller read as `read` and has just updated.
    /// Only the comment is the caller's news: the state and nodes stay as the index holds them
    /// now, because a poll may have recorded an allocation since the caller read the job, and
    /// writing `read` back would undo it. A job the index no longer holds (it ended and went
    /// meanwhile) is not brought back.
    pub fn record_update(&self, read: &WatchedJob, comment: AdminComment) {
        {
            let mut index = self.index.write_locked();
            let Some(current) = index.get(read.job_id) else {
                return;
            };
            if current.comment != comment {
                let mut job = (*current).clone();
                job.comment = comment;
                index.upsert(job);
            }
        }
        // An update (nodes, pods) may let the job start: watched as closely as a new one.
        self.fresh
            .locked()
            .insert(read.job_id, std::time::Instant::now());
        self.nudge.notify_one();
    }

    /// The wait before the next poll: `fast_interval` while a job recorded within `fast_window`
    /// is still pending (its allocation is what a pod waits for), `interval` otherwise, however
    /// many older jobs pend. Forgets the recorded jobs that started, went or aged out.
    fn next_wait(&self) -> Duration {
        let fast = {
            let mut fresh = self.fresh.locked();
            let index = self.index();
            let window = self.config.fast_window;
            fresh.retain(|id, at| {
                at.elapsed() < window && index.get(*id).is_some_and(|j| j.is_pending())
            });
            !fresh.is_empty()
        };
        if fast {
            self.config.fast_interval.min(self.config.interval)
        } else {
            self.config.interval
        }
    }

    /// The jobs recorded within `fast_window` that the index still holds as pending: what the
    /// fast poll asks Slurm about.
    fn fresh_pending(&self) -> Vec<u32> {
        let fresh = self.fresh.locked();
        let index = self.index();
        let window = self.config.fast_window;
        let mut ids: Vec<u32> = fresh
            .iter()
            .filter(|(id, at)| {
                at.elapsed() < window && index.get(**id).is_some_and(|j| j.is_pending())
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Fetches one job now (after an update race, say), updates the index and emits its event.
    pub async fn refresh(&self, job_id: u32) -> Result<Option<Arc<WatchedJob>>, slurm_rest::Error> {
        self.stats.fetches.fetch_add(1, Ordering::Relaxed);
        let info = self.source.job(job_id).await?;
        Ok(self.absorb(job_id, info, true))
    }

    /// Puts what GET /job/{id} answered into the index and emits the event: `Changed` for a
    /// bridge job (only when it differs, unless `always`), `Gone` for a bridge job that vanished
    /// or is no longer the bridge's. Returns the bridge job.
    fn absorb(&self, job_id: u32, info: Option<JobInfo>, always: bool) -> Option<Arc<WatchedJob>> {
        let mut index = self.index.write_locked();
        let cluster = self.config.cluster.as_deref();
        match info
            .as_ref()
            .and_then(|i| WatchedJob::from_info_of(i, cluster))
        {
            Some(job) => self.put(index, job, always),
            None => {
                let old = index.remove(job_id);
                if info.is_some() {
                    index.mark_foreign(job_id);
                }
                drop(index);
                if let Some(old) = old {
                    self.emit(JobEvent::Gone(old));
                }
                None
            }
        }
    }

    /// Stores `job` through the caller's write lock, released before the event: `Changed` when
    /// it differs from what the index held, or `always`. Returns the job as stored.
    fn put(
        &self,
        mut index: RwLockWriteGuard<'_, JobIndex>,
        job: WatchedJob,
        always: bool,
    ) -> Option<Arc<WatchedJob>> {
        let job_id = job.job_id;
        let old = index.upsert(job);
        let new = index.get(job_id);
        drop(index);
        if let Some(j) = &new
            && (always || old.as_deref() != Some(&**j))
        {
            tracing::trace!(job_id, state = ?j.state, nodes = ?j.nodes, "job changed");
            self.emit(JobEvent::Changed(j.clone()));
        }
        new
    }

    /// Reads where a bridge job the index holds as pending now runs: GET /resources/{id}
    /// (about 800 bytes, half the CPU of slurmrestd and slurmctld that GET /job/{id} takes with
    /// its 12 KB), as the job's other fields are the index's already: its comment is the
    /// bridge's own and a running job has no pending reason. Returns false, and changes nothing,
    /// when that read cannot say (an error, no layout: the job ended meanwhile, or a Slurm
    /// without the endpoint): the caller then reads the whole job.
    async fn read_allocation(&self, job_id: u32) -> bool {
        self.stats.fetches.fetch_add(1, Ordering::Relaxed);
        let layout = match self.source.job_resources(job_id).await {
            Ok(layout) if !layout.is_empty() && layout.iter().all(|n| !n.node.is_empty()) => layout,
            Ok(_) => return false,
            Err(e) => {
                tracing::debug!(job_id, error = %e, "reading an allocation failed; reading the job");
                return false;
            }
        };
        let nodes = joined_nodes(&layout);
        let index = self.index.write_locked();
        // Its comment as of now: an update may have been recorded since the listing.
        let Some(current) = index.get(job_id) else {
            return true;
        };
        if !current.is_pending() {
            return false;
        }
        let mut job = (*current).clone();
        job.state = vec![JobState::Running];
        job.state_reason = None;
        job.nodes = Some(nodes);
        self.fetched_at
            .locked()
            .insert(job_id, std::time::Instant::now());
        self.layouts.locked().insert(job_id, layout.into());
        self.put(index, job, false);
        true
    }

    /// The layout (GET /resources/{id}) the allocation read fetched for `job`, while it still
    /// describes the job's nodes; `None` when it was not read that way, was evicted, or the
    /// job's nodes changed since: the caller then reads it.
    pub fn recent_layout(&self, job: &WatchedJob) -> Option<Arc<[NodeResourceLayout]>> {
        let layout = self.layouts.locked().get(job.job_id)?;
        (job.allocated_nodes() == Some(joined_nodes(&layout).as_str())).then_some(layout)
    }

    fn emit(&self, event: JobEvent) {
        self.subscribers.send(event);
    }

    /// Runs forever: the first full listing (retried until it succeeds), then polls.
    pub async fn run(self: Arc<Self>) {
        let mut delay = Duration::from_millis(500);
        loop {
            match self.initial_sync().await {
                Ok(n) => {
                    tracing::info!(bridge_jobs = n, "slurm job watcher synced");
                    break;
                }
                Err(e) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, retry_in = ?delay, "listing Slurm jobs failed");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
        let mut last_listing: Option<tokio::time::Instant> = None;
        loop {
            let started = tokio::time::Instant::now();
            // A full listing every `interval`; in between (the fast poll), the fresh jobs only.
            let fresh = match last_listing {
                Some(t) if started.duration_since(t) < self.config.interval => self.fresh_pending(),
                _ => Vec::new(),
            };
            let polled = if fresh.is_empty() {
                last_listing = Some(started);
                self.poll_once().await
            } else {
                self.poll_fresh(&fresh).await
            };
            if let Err(e) = polled {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "polling Slurm job states failed");
            }
            // Sleep the rest of the interval; a record (submit) cuts the slow wait short.
            let wait = self.next_wait();
            let until = started + wait;
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = self.nudge.notified(), if wait > self.config.fast_interval => {
                    tokio::time::sleep_until(started + self.config.fast_interval.min(wait)).await;
                }
            }
        }
    }

    /// Lists every job and rebuilds the index; returns how many are the bridge's.
    ///
    /// The list is GET /jobs/state/ (ids and states: cheap however many jobs there are) and one
    /// GET /job/{id} per job, `fetch_concurrency` at a time, not one GET /jobs/: that answer
    /// costs slurmrestd seconds and gigabytes at 10,000 jobs, a client that gives up on it and
    /// asks again piles the work up (issue 22), and the bridge had to hold every job at once to
    /// read it. A fetch that fails is asked again after a delay (only that job: the others stay
    /// fetched) until it answers; the index is installed only once every job listed was read,
    /// so no decision ever relies on a partial index.
    pub async fn initial_sync(&self) -> Result<usize, slurm_rest::Error> {
        let started = tokio::time::Instant::now();
        self.generation.fetch_add(1, Ordering::SeqCst);
        let states = self.source.job_states().await?;
        let mut index = JobIndex::default();
        let mut to_fetch: Vec<u32> = states
            .iter()
            .filter(|e| e.is_plain_job())
            .map(|e| e.job_id)
            .collect();
        drop(states);
        let mut delay = Duration::from_millis(500);
        loop {
            let failed = self.fetch_into(&mut index, to_fetch).await;
            let Some((first_error, failed)) = failed else {
                break;
            };
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                error = %first_error,
                failed = failed.len(),
                retry_in = ?delay,
                "reading Slurm jobs for the first listing failed; asking again for those only"
            );
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
            to_fetch = failed;
        }
        let n = index.len();
        {
            let now = std::time::Instant::now();
            let mut fetched = self.fetched_at.locked();
            fetched.clear();
            fetched.extend(index.jobs().map(|j| (j.job_id, now)));
        }
        {
            let mut current = self.index.write_locked();
            // Keep jobs recorded while the listing was in flight.
            let recorded = self.recorded.locked();
            for id in recorded.keys() {
                if index.get(*id).is_none()
                    && let Some(j) = current.get(*id)
                {
                    index.upsert((*j).clone());
                }
            }
            *current = index;
        }
        self.synced.send_replace(true);
        self.listed_cleanly(started);
        Ok(n)
    }

    /// Reads `ids` (GET /job/{id}, `fetch_concurrency` at a time) into `index`: a bridge job
    /// indexed, any other marked foreign, a job gone meanwhile left out. Returns the first error
    /// and the ids whose read failed, if any did.
    async fn fetch_into(
        &self,
        index: &mut JobIndex,
        ids: Vec<u32>,
    ) -> Option<(slurm_rest::Error, Vec<u32>)> {
        let mut answers = futures::stream::iter(ids)
            .map(|id| async move { (id, self.source.job(id).await) })
            .buffer_unordered(self.config.fetch_concurrency.max(1));
        let mut failed = Vec::new();
        let mut first_error = None;
        while let Some((id, answer)) = answers.next().await {
            self.stats.fetches.fetch_add(1, Ordering::Relaxed);
            match answer {
                Ok(Some(info)) => {
                    match WatchedJob::from_info_of(&info, self.config.cluster.as_deref()) {
                        Some(job) => {
                            index.upsert(job);
                        }
                        None => index.mark_foreign(id),
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    failed.push(id);
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map(|e| (e, failed))
    }

    /// One poll: states of every job, then a fetch of each new or changed one.
    pub async fn poll_once(&self) -> Result<(), slurm_rest::Error> {
        let started = std::time::Instant::now();
        let listing_started = tokio::time::Instant::now();
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.stats.polls.fetch_add(1, Ordering::Relaxed);
        let states = self.source.job_states().await?;
        // Jobs Slurm lists as started are read first: their pods wait to be bound. A pending
        // bridge job that just started needs only its nodes (see `read_allocation`).
        let (mut started_jobs, mut to_fetch, mut later) = (Vec::new(), Vec::new(), Vec::new());
        let mut listed = HashSet::with_capacity(states.len());
        {
            let index = self.index();
            for entry in &states {
                if !entry.is_plain_job() {
                    continue;
                }
                let id = entry.job_id;
                listed.insert(id);
                if index.is_foreign(id) {
                    continue;
                }
                match index.get(id) {
                    Some(job) if job.state == entry.state => {}
                    Some(job)
                        if job.is_pending() && entry.state.as_slice() == [JobState::Running] =>
                    {
                        started_jobs.push(id)
                    }
                    _ if entry.state.contains(&JobState::Running) => to_fetch.push(id),
                    _ => later.push(id),
                }
            }
        }
        to_fetch.append(&mut later);
        // Pending jobs whose reason has not been looked at for a while, oldest first.
        let reason_due = {
            let mut last = self.last_reason_batch.locked();
            let due = last.is_none_or(|t| t.elapsed() >= self.config.reason_tick);
            if due {
                *last = Some(std::time::Instant::now());
            }
            due
        };
        if reason_due {
            let now = std::time::Instant::now();
            let index = self.index();
            let fetched = self.fetched_at.locked();
            let changed: HashSet<u32> = to_fetch.iter().chain(&started_jobs).copied().collect();
            let mut stale: Vec<(Option<std::time::Instant>, u32)> = index
                .jobs()
                .filter(|j| j.is_pending() && listed.contains(&j.job_id))
                .filter(|j| !changed.contains(&j.job_id))
                .map(|j| (fetched.get(&j.job_id).copied(), j.job_id))
                .filter(|(t, _)| {
                    t.is_none_or(|t| now.duration_since(t) >= self.config.reason_interval)
                })
                .collect();
            stale.sort();
            to_fetch.extend(
                stale
                    .into_iter()
                    .take(self.config.reason_batch)
                    .map(|(_, id)| id),
            );
        }
        // Jobs Slurm no longer lists are gone, unless recorded after this poll started.
        let gone: Vec<u32> = {
            let index = self.index();
            let recorded = self.recorded.locked();
            index
                .known_ids()
                .filter(|id| !listed.contains(id))
                .filter(|id| recorded.get(id).is_none_or(|g| *g < generation))
                .collect()
        };
        {
            let mut recorded = self.recorded.locked();
            recorded.retain(|id, g| *g >= generation || !listed.contains(id));
        }
        {
            let mut fetched = self.fetched_at.locked();
            for id in &gone {
                fetched.remove(id);
            }
        }
        for id in gone {
            let old = self.index.write_locked().remove(id);
            if let Some(old) = old {
                self.emit(JobEvent::Gone(old));
            }
        }
        let fetches = started_jobs.len() + to_fetch.len();
        let first_error = self.read_changed(started_jobs, to_fetch).await;
        tracing::trace!(
            jobs = states.len(),
            fetched = fetches,
            took_ms = started.elapsed().as_millis() as u64,
            "polled job states"
        );
        match first_error {
            Some(e) => Err(e),
            None => {
                self.listed_cleanly(listing_started);
                Ok(())
            }
        }
    }

    /// The fast poll between two full listings: the states of `ids` (jobs just submitted or
    /// updated, pending as far as the index knows) only, then the reads of those that changed,
    /// as [`JobWatcher::poll_once`] does. Jobs it does not list are left to the next full
    /// listing (which alone decides that a job is gone).
    pub async fn poll_fresh(&self, ids: &[u32]) -> Result<(), slurm_rest::Error> {
        let started = std::time::Instant::now();
        self.stats.polls.fetch_add(1, Ordering::Relaxed);
        let (mut started_jobs, mut to_fetch) = (Vec::new(), Vec::new());
        for chunk in ids.chunks(STATES_PER_REQUEST) {
            let states = self.source.job_states_of(chunk).await?;
            let index = self.index();
            for entry in states.iter().filter(|e| e.is_plain_job()) {
                match index.get(entry.job_id) {
                    Some(job) if job.state == entry.state => {}
                    Some(job)
                        if job.is_pending() && entry.state.as_slice() == [JobState::Running] =>
                    {
                        started_jobs.push(entry.job_id)
                    }
                    Some(_) => to_fetch.push(entry.job_id),
                    None => {}
                }
            }
        }
        let fetches = started_jobs.len() + to_fetch.len();
        let first_error = self.read_changed(started_jobs, to_fetch).await;
        tracing::trace!(
            asked = ids.len(),
            fetched = fetches,
            took_ms = started.elapsed().as_millis() as u64,
            "polled fresh job states"
        );
        first_error.map_or(Ok(()), Err)
    }

    /// Reads the jobs a poll found changed: the started ones' allocations first (their pods
    /// wait to be bound), then in full whatever could not be read that way and `to_fetch`.
    /// Returns the first error; the jobs read are in the index and their events sent.
    async fn read_changed(
        &self,
        started_jobs: Vec<u32>,
        mut to_fetch: Vec<u32>,
    ) -> Option<slurm_rest::Error> {
        let mut full_reads: Vec<u32> = futures::stream::iter(started_jobs)
            .map(|id| async move { (!self.read_allocation(id).await).then_some(id) })
            .buffer_unordered(self.config.fetch_concurrency.max(1))
            .filter_map(futures::future::ready)
            .collect()
            .await;
        full_reads.append(&mut to_fetch);
        let mut fetched = futures::stream::iter(full_reads)
            .map(|id| async move { (id, self.source.job(id).await) })
            .buffer_unordered(self.config.fetch_concurrency.max(1));
        let mut first_error = None;
        while let Some((id, result)) = fetched.next().await {
            self.stats.fetches.fetch_add(1, Ordering::Relaxed);
            if result.is_ok() {
                self.fetched_at
                    .locked()
                    .insert(id, std::time::Instant::now());
            }
            match result {
                Ok(info) => {
                    self.absorb(id, info, false);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error
    }
}

/// A layout's nodes as the index holds an allocation read's: their names, comma-separated.
fn joined_nodes(layout: &[NodeResourceLayout]) -> String {
    layout
        .iter()
        .map(|n| n.node.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests;
