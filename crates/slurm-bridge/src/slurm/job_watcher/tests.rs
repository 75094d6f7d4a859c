//! Unit tests of [`super`].

use super::*;
use crate::workload::admin_comment::AdminComment;
use slurm_rest::models::{JobState, JobStateEntry};

/// An in-memory job table standing in for slurmctld in these unit tests (the end-to-end
/// tests use real Slurm).
#[derive(Default)]
struct Table {
    jobs: Mutex<Vec<JobInfo>>,
    fetches: Mutex<Vec<u32>>,
    /// GET /jobs/ calls (the watcher makes none).
    lists: AtomicU64,
    /// Jobs whose next reads fail, with how many more fail.
    failing: Mutex<HashMap<u32, usize>>,
    /// GET /resources/{id} answers, by job (a job without one answers an empty layout, as the
    /// trait's default); every such read is logged in `resource_reads`.
    layouts: Mutex<HashMap<u32, Vec<&'static str>>>,
    resource_reads: Mutex<Vec<u32>>,
    /// GET /jobs/state/ calls (the full listing).
    listings: AtomicU64,
    /// The ids of each GET /jobs/state/?job_id=.. call (the fast poll).
    states_asked: Mutex<Vec<Vec<u32>>>,
}

impl Table {
    /// What GET /jobs/state/ lists: every job's id and state.
    fn states(&self) -> Vec<JobStateEntry> {
        let jobs = self.jobs.lock().unwrap();
        jobs.iter()
            .map(|j| {
                let mut e: JobStateEntry = serde_json::from_value(serde_json::json!({
                    "job_id": j.job_id.to_string(),
                    "state": j.job_state,
                }))
                .unwrap();
                e.job_id = j.job_id;
                e
            })
            .collect()
    }
}

impl SlurmJobs for Table {
    async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        Ok(self.jobs.lock().unwrap().clone())
    }
    async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        Ok(self.states())
    }
    async fn job_states_of(&self, ids: &[u32]) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        self.states_asked.lock().unwrap().push(ids.to_vec());
        let mut states = self.states();
        states.retain(|s| ids.contains(&s.job_id));
        Ok(states)
    }
    async fn job_resources(
        &self,
        id: u32,
    ) -> Result<Vec<slurm_rest::models::NodeResourceLayout>, slurm_rest::Error> {
        self.resource_reads.lock().unwrap().push(id);
        let layouts = self.layouts.lock().unwrap();
        Ok(layouts
            .get(&id)
            .into_iter()
            .flatten()
            .map(|node| slurm_rest::models::NodeResourceLayout {
                node: (*node).into(),
                ..Default::default()
            })
            .collect())
    }
    async fn job(&self, id: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
        self.fetches.lock().unwrap().push(id);
        if let Some(left) = self.failing.lock().unwrap().get_mut(&id)
            && *left > 0
        {
            *left -= 1;
            return Err(slurm_rest::Error::synthetic(
                slurm_rest::ErrorKind::Transient,
                format!("GET /job/{id}: timed out"),
            ));
        }
        Ok(self
            .jobs
            .lock()
            .unwrap()
            .iter()
            .find(|j| j.job_id == id)
            .cloned())
    }
}

fn info(id: u32, state: JobState, comment: &str, nodes: &str) -> JobInfo {
    JobInfo {
        job_id: id,
        job_state: vec![state],
        admin_comment: Some(comment.into()),
        nodes: Some(nodes.into()),
        ..Default::default()
    }
}

/// The first listing, after which the fetch log starts empty (the tests count the polls' fetches).
async fn sync(w: &JobWatcher<Table>, table: &Table) -> usize {
    let n = w.initial_sync().await.unwrap();
    table.fetches.lock().unwrap().clear();
    n
}

fn bridge_comment(group: &str, pod: &str) -> String {
    AdminComment {
        pods: vec![pod.into()],
        group: Some(group.into()),
        uids: vec![],
        desc: None,
        cluster: None,
    }
    .encode()
}

#[tokio::test]
async fn fetches_only_changed_jobs_and_emits_events() {
    let table = Arc::new(Table::default());
    table.jobs.lock().unwrap().extend([
        info(1, JobState::Pending, &bridge_comment("g1", "ns/a"), ""),
        info(2, JobState::Running, "not json", "node-9"),
    ]);
    let w = JobWatcher::new(table.clone(), JobWatcherConfig::default());
    let mut events = w.subscribe();
    assert_eq!(sync(&w, &table).await, 1);
    assert!(w.is_synced());

    // Nothing changed: no fetch at all (the foreign job is not fetched either).
    w.poll_once().await.unwrap();
    assert!(table.fetches.lock().unwrap().is_empty());

    // Job 1 is allocated: one fetch, one Changed event with the nodes.
    table.jobs.lock().unwrap()[0] = info(
        1,
        JobState::Running,
        &bridge_comment("g1", "ns/a"),
        "node-1",
    );
    w.poll_once().await.unwrap();
    assert_eq!(*table.fetches.lock().unwrap(), [1]);
    match events.try_recv().unwrap() {
        JobEvent::Changed(j) => assert_eq!(j.allocated_nodes(), Some("node-1")),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(w.index().active_for_group("g1")[0].job_id, 1);

    // Job 1 purged from Slurm: Gone.
    table.jobs.lock().unwrap().remove(0);
    w.poll_once().await.unwrap();
    assert!(matches!(events.try_recv().unwrap(), JobEvent::Gone(j) if j.job_id == 1));
    assert!(w.index().active_for_group("g1").is_empty());
}

#[tokio::test]
async fn a_recorded_job_survives_a_poll_that_does_not_list_it_yet() {
    let table = Arc::new(Table::default());
    let w = JobWatcher::new(table.clone(), JobWatcherConfig::default());
    sync(&w, &table).await;
    // Simulate: a poll's listing was taken before the submit, then the submit recorded job 5.
    let gen_before = w.generation.load(Ordering::SeqCst);
    w.record(
        WatchedJob::from_info(&info(
            5,
            JobState::Pending,
            &bridge_comment("g", "ns/p"),
            "",
        ))
        .unwrap(),
    );
    assert_eq!(w.recorded.lock().unwrap()[&5], gen_before);
    // The next poll started after the record: it may treat job 5 as gone only when a poll
    // started after the record does not list it. Job 5 is not listed by the table here, so
    // a poll started after recording removes it...
    w.poll_once().await.unwrap();
    assert!(w.index().get(5).is_none());
    // ...but one recorded during a poll that has not listed it would be kept:
    w.record(
        WatchedJob::from_info(&info(
            6,
            JobState::Pending,
            &bridge_comment("g", "ns/q"),
            "",
        ))
        .unwrap(),
    );
    w.recorded.lock().unwrap().insert(6, u64::MAX);
    w.poll_once().await.unwrap();
    assert!(w.index().get(6).is_some());
}

#[tokio::test]
async fn pending_reasons_are_refreshed_in_bounded_batches() {
    let table = Arc::new(Table::default());
    for id in 1..=3 {
        let mut j = info(
            id,
            JobState::Pending,
            &bridge_comment(&format!("g{id}"), "ns/x"),
            "",
        );
        j.state_reason = Some("None".into());
        table.jobs.lock().unwrap().push(j);
    }
    let cfg = JobWatcherConfig {
        reason_interval: Duration::ZERO,
        reason_batch: 2,
        reason_tick: Duration::ZERO,
        ..Default::default()
    };
    let w = JobWatcher::new(table.clone(), cfg);
    let mut events = w.subscribe();
    sync(&w, &table).await;
    table.jobs.lock().unwrap()[2].state_reason = Some("Resources".into());
    w.poll_once().await.unwrap();
    assert_eq!(
        table.fetches.lock().unwrap().len(),
        2,
        "at most reason_batch fetches"
    );
    w.poll_once().await.unwrap();
    // Every job was looked at within two polls; only job 3's reason changed.
    let fetched: HashSet<u32> = table.fetches.lock().unwrap().iter().copied().collect();
    assert_eq!(fetched, HashSet::from([1, 2, 3]));
    match events.try_recv().unwrap() {
        JobEvent::Changed(j) => {
            assert_eq!(j.job_id, 3);
            assert_eq!(j.state_reason.as_deref(), Some("Resources"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(events.try_recv().is_err(), "unchanged jobs emit nothing");
}

/// A job just submitted (recorded) is not fetched for its pending reason before
/// `reason_interval` has passed: in a burst of submits that would cost a GET /job/{id} per job
/// on top of the one its allocation takes. A job pending that long is looked at.
#[tokio::test]
async fn a_recorded_job_is_not_fetched_for_its_reason_at_once() {
    let table = Arc::new(Table::default());
    let interval = Duration::from_secs(60);
    let cfg = JobWatcherConfig {
        reason_interval: interval,
        reason_tick: Duration::ZERO,
        ..Default::default()
    };
    let w = JobWatcher::new(table.clone(), cfg);
    sync(&w, &table).await;
    let job = info(7, JobState::Pending, &bridge_comment("g", "ns/p"), "");
    table.jobs.lock().unwrap().push(job.clone());
    w.record(WatchedJob::from_info(&job).unwrap());
    w.poll_once().await.unwrap();
    assert!(
        table.fetches.lock().unwrap().is_empty(),
        "a fresh pending job fetched for its reason: {:?}",
        table.fetches.lock().unwrap()
    );
    // `reason_interval` passes for job 7 (its last fetch, which the record counts as, is that
    // long ago) without the test waiting for it.
    backdate(w.fetched_at.lock().unwrap().get_mut(&7).unwrap(), interval);
    w.poll_once().await.unwrap();
    assert_eq!(*table.fetches.lock().unwrap(), [7], "looked at once due");
}

/// Moves a time the watcher took back by `by`, as if `by` had passed since.
fn backdate(at: &mut std::time::Instant, by: Duration) {
    *at = at.checked_sub(by).expect("an instant that far back");
}

#[tokio::test]
async fn a_job_that_stops_being_the_bridges_is_gone_not_kept() {
    let table = Arc::new(Table::default());
    table.jobs.lock().unwrap().push(info(
        8,
        JobState::Pending,
        &bridge_comment("g8", "ns/h"),
        "",
    ));
    let w = JobWatcher::new(table.clone(), JobWatcherConfig::default());
    let mut events = w.subscribe();
    sync(&w, &table).await;
    // Someone rewrites the admin_comment and the state changes: the poll fetches it.
    table.jobs.lock().unwrap()[0] = info(8, JobState::Running, "by hand", "node-1");
    w.poll_once().await.unwrap();
    assert!(matches!(events.try_recv().unwrap(), JobEvent::Gone(j) if j.job_id == 8));
    assert!(w.index().get(8).is_none());
    assert!(w.index().is_foreign(8));
}

#[tokio::test]
async fn new_bridge_jobs_found_by_polling_are_indexed() {
    let table = Arc::new(Table::default());
    let w = JobWatcher::new(table.clone(), JobWatcherConfig::default());
    sync(&w, &table).await;
    table.jobs.lock().unwrap().push(info(
        3,
        JobState::Pending,
        &bridge_comment("g3", "ns/c"),
        "",
    ));
    w.poll_once().await.unwrap();
    assert_eq!(w.index().active_for_pod("ns/c")[0].job_id, 3);
}

/// Issue 21: a pass that updated a pending job wrote the job it had read at its start back into
/// the index, undoing an allocation a poll had recorded meanwhile.
#[tokio::test]
async fn an_update_recorded_after_an_allocation_keeps_the_allocation() {
    let table = Arc::new(Table::default());
    table
        .jobs
        .lock()
        .unwrap()
        .push(info(1, JobState::Pending, &bridge_comment("g", "ns/a"), ""));
    let w = JobWatcher::new(table.clone(), JobWatcherConfig::default());
    sync(&w, &table).await;
    // The pass reads the pending job...
    let read = w.index().get(1).unwrap();
    assert!(read.is_pending());
    // ...Slurm allocates, and a poll records it...
    table.jobs.lock().unwrap()[0] =
        info(1, JobState::Running, &bridge_comment("g", "ns/a"), "node-1");
    w.poll_once().await.unwrap();
    assert_eq!(w.index().get(1).unwrap().allocated_nodes(), Some("node-1"));
    // ...then the pass records its update (a new pod list).
    let comment = AdminComment {
        pods: vec!["ns/a".into(), "ns/b".into()],
        group: Some("g".into()),
        uids: vec![],
        desc: None,
        cluster: None,
    };
    w.record_update(&read, comment.clone());
    let now = w.index().get(1).unwrap();
    assert_eq!(
        now.allocated_nodes(),
        Some("node-1"),
        "the allocation stays: {now:?}"
    );
    assert_eq!(now.comment, comment, "the update is recorded");
    // A job gone meanwhile is not brought back.
    table.jobs.lock().unwrap().clear();
    w.poll_once().await.unwrap();
    w.record_update(&read, AdminComment::default());
    assert!(w.index().get(1).is_none());
}

#[tokio::test]
async fn the_first_listing_reads_states_then_each_job_never_the_whole_list() {
    let table = Arc::new(Table::default());
    table.jobs.lock().unwrap().extend([
        info(1, JobState::Pending, &bridge_comment("g1", "ns/a"), ""),
        info(2, JobState::Running, "not json", "node-9"),
        info(
            3,
            JobState::Running,
            &bridge_comment("g3", "ns/c"),
            "node-3",
        ),
    ]);
    let w = JobWatcher::new(table.clone(), JobWatcherConfig::default());
    assert_eq!(w.initial_sync().await.unwrap(), 2);
    assert_eq!(table.lists.load(Ordering::SeqCst), 0, "no GET /jobs/");
    let mut fetched = table.fetches.lock().unwrap().clone();
    fetched.sort();
    assert_eq!(fetched, [1, 2, 3], "one GET /job/{{id}} per listed job");
    assert!(w.index().is_foreign(2));
    assert_eq!(
        w.index().active_for_pod("ns/c")[0].allocated_nodes(),
        Some("node-3")
    );
}

#[tokio::test]
async fn a_failed_read_in_the_first_listing_is_asked_again_alone_before_the_index_is_used() {
    let table = Arc::new(Table::default());
    table.jobs.lock().unwrap().extend([
        info(1, JobState::Pending, &bridge_comment("g1", "ns/a"), ""),
        info(2, JobState::Pending, &bridge_comment("g2", "ns/b"), ""),
    ]);
    table.failing.lock().unwrap().insert(2, 2);
    let w = JobWatcher::new(table.clone(), JobWatcherConfig::default());
    let sync = tokio::spawn({
        let w = w.clone();
        async move { w.initial_sync().await }
    });
    // Until job 2 answers, the index is not the listing's: nothing may decide on it.
    let reads_of_2 = || {
        table
            .fetches
            .lock()
            .unwrap()
            .iter()
            .filter(|id| **id == 2)
            .count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while reads_of_2() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "job 2 not asked again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!w.is_synced(), "synced with job 2 unread");
    assert_eq!(sync.await.unwrap().unwrap(), 2);
    assert!(w.is_synced());
    assert_eq!(w.index().active_for_group("g2")[0].job_id, 2);
    let fetches = table.fetches.lock().unwrap().clone();
    assert_eq!(
        fetches.iter().filter(|id| **id == 1).count(),
        1,
        "job 1 read once: {fetches:?}"
    );
    assert_eq!(fetches.iter().filter(|id| **id == 2).count(), 3);
    assert!(w.stats.errors.load(Ordering::Relaxed) >= 2);
}

/// The poll is fast only while a job submitted (or updated) within the fast window is still
/// pending: a backlog of older pending jobs does not keep it fast once the fresh job started.
/// (Before, any pending job kept the fast poll for the whole window after any submit.)
#[tokio::test]
async fn only_fresh_pending_jobs_keep_the_poll_fast() {
    let table = Arc::new(Table::default());
    table.jobs.lock().unwrap().push(info(
        1,
        JobState::Pending,
        &bridge_comment("old", "ns/old"),
        "",
    ));
    let config = JobWatcherConfig::default();
    let (slow, fast) = (config.interval, config.fast_interval);
    let w = JobWatcher::new(table.clone(), config);
    w.initial_sync().await.unwrap();
    assert_eq!(w.next_wait(), slow, "an old pending job alone: slow");

    // A submit: fast while it pends.
    let fresh = info(2, JobState::Pending, &bridge_comment("new", "ns/new"), "");
    table.jobs.lock().unwrap().push(fresh.clone());
    w.record(WatchedJob::from_info(&fresh).unwrap());
    assert_eq!(w.next_wait(), fast, "a fresh pending job: fast");
    w.poll_once().await.unwrap();
    assert_eq!(w.next_wait(), fast, "still pending: still fast");

    // Slurm starts it: slow again at once, though the old job still pends.
    table.jobs.lock().unwrap()[1] = info(
        2,
        JobState::Running,
        &bridge_comment("new", "ns/new"),
        "node-1",
    );
    w.poll_once().await.unwrap();
    assert!(w.index().get(2).unwrap().is_running());
    assert_eq!(w.next_wait(), slow, "the fresh job started: slow");

    // Updating the old job makes it fresh (the update may let it start).
    let read = w.index().get(1).unwrap();
    w.record_update(&read, read.comment.clone());
    assert_eq!(w.next_wait(), fast, "an updated pending job: fast");
}

/// A fresh job that pends longer than the fast window stops keeping the poll fast.
#[tokio::test]
async fn a_fresh_job_keeps_the_poll_fast_only_for_the_window() {
    let table = Arc::new(Table::default());
    let config = JobWatcherConfig {
        fast_window: Duration::from_secs(60),
        ..Default::default()
    };
    let (slow, window) = (config.interval, config.fast_window);
    let w = JobWatcher::new(table.clone(), config);
    w.initial_sync().await.unwrap();
    let job = info(3, JobState::Pending, &bridge_comment("g", "ns/a"), "");
    table.jobs.lock().unwrap().push(job.clone());
    w.record(WatchedJob::from_info(&job).unwrap());
    assert_ne!(w.next_wait(), slow);
    // The window passes for job 3 (its record is that long ago) without the test waiting.
    backdate(w.fresh.lock().unwrap().get_mut(&3).unwrap(), window);
    assert_eq!(w.next_wait(), slow, "past the window: slow");
}

#[tokio::test]
async fn jobs_listed_as_started_are_read_before_the_other_changes() {
    let table = Arc::new(Table::default());
    let w = JobWatcher::new(
        table.clone(),
        JobWatcherConfig {
            fetch_concurrency: 1,
            ..Default::default()
        },
    );
    sync(&w, &table).await;
    // Found by the poll, in Slurm's order: two pending (new to the index), one started between.
    table.jobs.lock().unwrap().extend([
        info(1, JobState::Pending, &bridge_comment("g1", "ns/a"), ""),
        info(
            2,
            JobState::Running,
            &bridge_comment("g2", "ns/b"),
            "node-2",
        ),
        info(3, JobState::Pending, &bridge_comment("g3", "ns/c"), ""),
    ]);
    w.poll_once().await.unwrap();
    assert_eq!(*table.fetches.lock().unwrap(), [2, 1, 3]);
}

#[tokio::test]
async fn a_started_bridge_job_is_read_by_its_allocation_alone() {
    let table = Arc::new(Table::default());
    let comment = bridge_comment("g1", "ns/a");
    table.jobs.lock().unwrap().extend([
        info(1, JobState::Pending, &comment, ""),
        info(2, JobState::Pending, &bridge_comment("g2", "ns/b"), ""),
    ]);
    let w = JobWatcher::new(table.clone(), JobWatcherConfig::default());
    let mut events = w.subscribe();
    sync(&w, &table).await;

    // Both start; Slurm answers job 1's layout, and none for job 2 (it ended meanwhile, say).
    for j in table.jobs.lock().unwrap().iter_mut() {
        j.job_state = vec![JobState::Running];
        j.nodes = Some(format!("node-{}", j.job_id));
    }
    table
        .layouts
        .lock()
        .unwrap()
        .insert(1, vec!["node-3", "node-4"]);
    w.poll_once().await.unwrap();

    let mut reads = table.resource_reads.lock().unwrap().clone();
    reads.sort();
    assert_eq!(reads, [1, 2]);
    // Job 1 needed no full read; job 2's empty layout fell back to one.
    assert_eq!(*table.fetches.lock().unwrap(), [2]);
    let job = w.index().get(1).unwrap();
    assert!(job.is_running());
    assert_eq!(job.allocated_nodes(), Some("node-3,node-4"));
    assert_eq!(job.comment.pods, ["ns/a"]);
    assert_eq!(w.index().get(2).unwrap().allocated_nodes(), Some("node-2"));
    // Job 1's layout is kept for a DRA bind; job 2's was never read.
    let layout = w.recent_layout(&job).expect("job 1's layout kept");
    let nodes: Vec<&str> = layout.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(nodes, ["node-3", "node-4"]);
    assert!(w.recent_layout(&w.index().get(2).unwrap()).is_none());
    // A job whose nodes changed since (a resize) no longer matches it.
    let mut resized = (*job).clone();
    resized.nodes = Some("node-3".into());
    assert!(w.recent_layout(&resized).is_none());
    let mut changed: Vec<u32> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| match e {
            JobEvent::Changed(j) => j.job_id,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    changed.sort();
    assert_eq!(changed, [1, 2]);

    // The next poll sees both as the index holds them: nothing is read.
    w.poll_once().await.unwrap();
    assert_eq!(table.resource_reads.lock().unwrap().len(), 2);
    assert_eq!(*table.fetches.lock().unwrap(), [2]);
}

/// Between two full listings the fast poll asks Slurm for the fresh pending jobs only, not for
/// every job it holds (a full GET /jobs/state/ costs Slurm in proportion to all its jobs): with
/// 500 other jobs listed, a submitted job pending for 3 s is asked about alone ten times a
/// second, the full listing runs once a second, and the job's start is still seen within the
/// fast interval and read by its allocation alone.
#[tokio::test(start_paused = true)]
async fn the_fast_poll_asks_for_the_fresh_jobs_only() {
    let table = Arc::new(Table::default());
    table
        .jobs
        .lock()
        .unwrap()
        .extend((1000..1500).map(|id| info(id, JobState::Running, "not json", "node-9")));
    let config = JobWatcherConfig::default();
    let fast = config.fast_interval;
    let w = JobWatcher::new(table.clone(), config);
    let mut events = w.subscribe();
    tokio::spawn(w.clone().run());
    w.wait_synced().await;
    table.fetches.lock().unwrap().clear(); // the first listing's reads

    let job = info(1, JobState::Pending, &bridge_comment("g", "ns/a"), "");
    table.jobs.lock().unwrap().push(job.clone());
    w.record(WatchedJob::from_info(&job).unwrap());
    let listings_before = table.listings.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let asked = table.states_asked.lock().unwrap().clone();
    let listings = table.listings.load(Ordering::SeqCst) - listings_before;
    assert!(asked.len() >= 20, "fast polls in 3 s: {}", asked.len());
    assert!(asked.iter().all(|ids| ids == &[1]), "{asked:?}");
    assert!(
        (2..=4).contains(&listings),
        "full listings in 3 s: {listings}"
    );

    // Slurm starts it: a fast poll sees it and reads its allocation.
    table.layouts.lock().unwrap().insert(1, vec!["node-1"]);
    *table.jobs.lock().unwrap().last_mut().unwrap() =
        info(1, JobState::Running, &bridge_comment("g", "ns/a"), "node-1");
    let started = tokio::time::Instant::now();
    loop {
        match events.recv().await.expect("events") {
            JobEvent::Changed(j) if j.job_id == 1 && j.is_running() => {
                assert_eq!(j.nodes.as_deref(), Some("node-1"));
                break;
            }
            _ => {}
        }
    }
    assert!(
        started.elapsed() <= fast,
        "seen after {:?}",
        started.elapsed()
    );
    assert_eq!(*table.resource_reads.lock().unwrap(), [1]);
    assert!(
        table.fetches.lock().unwrap().is_empty(),
        "no whole-job read"
    );
}
