//! The bench's command line.

/// Which measurement a run makes (docs/performance.md).
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Mode {
    Burst,
    Arrival,
    Backlog,
    Scale,
    /// The job watcher's first listing against Slurm alone (no Kubernetes).
    Listing,
    /// Every mode in turn with small sizes, each within a time limit: the CI smoke.
    All,
}

/// The command line, parsed.
#[derive(Clone)]
pub(crate) struct Args {
    pub(crate) mode: Mode,
    pub(crate) pods: u32,
    pub(crate) nodes: Option<u32>,
    /// Backlog mode: Slurm jobs that cannot start (default 2/5 of `--pods`).
    pub(crate) backlog: Option<u32>,
    /// Backlog mode: more `SchedulerParameters` for its Slurm (e.g. `bf_max_job_test=10000`).
    pub(crate) sched_params: Option<String>,
    pub(crate) rate: f64,
    pub(crate) seconds: f64,
    pub(crate) workers: u32,
    pub(crate) qps: f64,
    pub(crate) burst: u32,
    pub(crate) poll: String,
    /// The scheduler's `--slurm-node-poll-interval` (its default when unset).
    pub(crate) node_poll: Option<String>,
    /// The scheduler's `--slurm-requests-in-flight` (its default when unset).
    pub(crate) slurm_in_flight: Option<u32>,
    pub(crate) skip_raw: bool,
    /// Scale: the first run alone, no restarts (allocator trials).
    pub(crate) first_run_only: bool,
    /// The bridge's pods created bare, without what the admission webhook adds at creation
    /// (the finalizer and the toleration then come with the bind-time label patch).
    pub(crate) bare_pods: bool,
    /// Burst mode: runs in a row, each on fresh instances, then the medians.
    pub(crate) runs: u32,
    /// Burst mode: kube-scheduler keeps running (idle, watching) during the bridge's line, as
    /// on a site running both; by default each scheduler runs alone in its line.
    pub(crate) kube_scheduler_beside: bool,
}

/// What the command line accepts, for the error of a bad one.
pub(crate) const USAGE: &str = "use --mode burst|arrival|backlog|scale|listing|all, --pods N, --nodes N, --backlog J, --sched-params K=V[,K=V], --rate R, --seconds S, --workers W, --kube-api-qps Q, --kube-api-burst B, --poll DURATION, --node-poll DURATION, --slurm-in-flight N, --skip-raw, --first-run-only (scale), --bare-pods, --runs N (burst), --kube-scheduler-beside (burst)";

/// Parses the command line (`cargo bench` adds `--bench`); panics naming a bad flag.
pub(crate) fn args() -> Args {
    let mut a = Args {
        mode: Mode::Burst,
        pods: 100,
        nodes: None,
        backlog: None,
        sched_params: None,
        rate: 50.0,
        seconds: 4.0,
        workers: 64,
        qps: 1000.0,
        burst: 2000,
        poll: "1s".into(),
        node_poll: None,
        slurm_in_flight: None,
        skip_raw: false,
        first_run_only: false,
        bare_pods: false,
        runs: 1,
        kube_scheduler_beside: false,
    };
    let mut it = std::env::args().skip(1);
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> T {
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} needs a number; {USAGE}"))
    }
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--mode" => {
                a.mode = match it.next().as_deref() {
                    Some("burst") => Mode::Burst,
                    Some("arrival") => Mode::Arrival,
                    Some("backlog") => Mode::Backlog,
                    Some("scale") => Mode::Scale,
                    Some("listing") => Mode::Listing,
                    Some("all") => Mode::All,
                    other => panic!("--mode {other:?}: {USAGE}"),
                }
            }
            "--pods" => a.pods = num("--pods", it.next()),
            "--nodes" => a.nodes = Some(num("--nodes", it.next())),
            "--backlog" => a.backlog = Some(num("--backlog", it.next())),
            "--sched-params" => a.sched_params = Some(it.next().expect("--sched-params K=V[,K=V]")),
            "--rate" => a.rate = num("--rate", it.next()),
            "--seconds" => a.seconds = num("--seconds", it.next()),
            "--workers" => a.workers = num("--workers", it.next()),
            "--kube-api-qps" => a.qps = num("--kube-api-qps", it.next()),
            "--kube-api-burst" => a.burst = num("--kube-api-burst", it.next()),
            "--poll" => a.poll = it.next().expect("--poll DURATION"),
            "--node-poll" => a.node_poll = Some(it.next().expect("--node-poll DURATION")),
            "--slurm-in-flight" => a.slurm_in_flight = Some(num("--slurm-in-flight", it.next())),
            "--skip-raw" => a.skip_raw = true,
            "--first-run-only" => a.first_run_only = true,
            "--bare-pods" => a.bare_pods = true,
            "--runs" => a.runs = num::<u32>("--runs", it.next()).max(1),
            "--kube-scheduler-beside" => a.kube_scheduler_beside = true,
            "--bench" => {}
            other => panic!("unknown argument {other}: {USAGE}"),
        }
    }
    a
}
