//! Figures scraped from the scheduler's /metrics, kube-apiserver's /metrics and /proc.

use std::collections::BTreeMap;

pub(crate) fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The resident set now, by kind: anonymous (heap, stacks, allocator slack) and file-backed
/// (the binary's and libraries' touched pages), to tell what of the peak the heap can explain.
pub(crate) fn rss_parts(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mib = |key: &str| field(key) as f64 / 1024.0;
    format!(
        "RSS now {:.1} MiB: anonymous {:.1}, file {:.1}; threads {}",
        mib("VmRSS:"),
        mib("RssAnon:"),
        mib("RssFile:"),
        field("Threads:")
    )
}

/// Mean of a histogram from its `_sum` and `_count` lines.
pub(crate) fn histogram_mean(metrics: &str, name: &str) -> f64 {
    let value = |suffix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{suffix} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let count = value("_count");
    if count > 0.0 {
        value("_sum") / count
    } else {
        0.0
    }
}

/// Sum of `slurm_bridge_scheduler_slurm_requests_total` over all labels.
pub(crate) fn slurm_requests(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("slurm_bridge_scheduler_slurm_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of label `name` in one metrics sample line (`metric{a="x",b="y"} 3`).
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let labels = line.split_once('{')?.1.rsplit_once('}')?.0;
    labels.split(',').find_map(|kv| {
        kv.strip_prefix(name)?
            .strip_prefix("=\"")?
            .strip_suffix('"')
    })
}

/// The value of one metrics sample line.
fn sample_value(line: &str) -> Option<f64> {
    line.rsplit(' ').next()?.parse().ok()
}

/// The `endpoint` label and the value of one metrics sample line.
fn endpoint_sample(line: &str) -> Option<(&str, f64)> {
    Some((label(line, "endpoint")?, sample_value(line)?))
}

/// `slurm_bridge_scheduler_slurm_requests_total` by endpoint (every outcome), sorted by endpoint.
pub(crate) fn slurm_requests_by_endpoint(metrics: &str) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("slurm_bridge_scheduler_slurm_requests_total{"))
    {
        let Some((endpoint, v)) = endpoint_sample(l) else {
            continue;
        };
        match out.iter_mut().find(|(e, _)| e == endpoint) {
            Some(slot) => slot.1 += v,
            None => out.push((endpoint.to_string(), v)),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `slurm_bridge_scheduler_slurm_request_seconds` by endpoint: (endpoint, requests, seconds
/// waited in all), sorted by endpoint. The seconds are the bridge's wait, Slurm's queue included.
pub(crate) fn slurm_seconds_by_endpoint(metrics: &str) -> Vec<(String, f64, f64)> {
    let mut out: Vec<(String, f64, f64)> = Vec::new();
    for l in metrics.lines() {
        let Some(rest) = l.strip_prefix("slurm_bridge_scheduler_slurm_request_seconds_") else {
            continue;
        };
        let is_sum = rest.starts_with("sum{");
        if !is_sum && !rest.starts_with("count{") {
            continue;
        }
        let Some((endpoint, v)) = endpoint_sample(l) else {
            continue;
        };
        let slot = match out.iter().position(|(e, _, _)| e == endpoint) {
            Some(i) => &mut out[i],
            None => {
                out.push((endpoint.to_string(), 0.0, 0.0));
                out.last_mut().expect("just pushed")
            }
        };
        if is_sum {
            slot.2 += v;
        } else {
            slot.1 += v;
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `slurm_bridge_scheduler_kube_writes_total` by kind, sorted by kind.
pub(crate) fn kube_writes(metrics: &str) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("slurm_bridge_scheduler_kube_writes_total{kind=\""))
        .filter_map(|l| {
            let (kind, rest) = l.split_once('"')?;
            Some((kind.to_string(), rest.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Sum of kube-apiserver's `apiserver_request_total` (every client).
pub(crate) async fn apiserver_requests(kube: &kube_testenv::Instance) -> f64 {
    apiserver_requests_by_kind(kube).await.values().sum()
}

/// kube-apiserver's `apiserver_request_total` (every client) by `VERB resource[/subresource]`.
pub(crate) async fn apiserver_requests_by_kind(
    kube: &kube_testenv::Instance,
) -> BTreeMap<String, f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = kube.client().request_text(req).await.unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some(value) = sample_value(line) else {
            continue;
        };
        let field = |name| label(line, name).unwrap_or("");
        let mut kind = format!("{} {}", field("verb"), field("resource"));
        if !field("subresource").is_empty() {
            kind = format!("{kind}/{}", field("subresource"));
        }
        *out.entry(kind).or_insert(0.0) += value;
    }
    out
}

/// Prints the API server requests of every client between two readings, per pod, the kinds
/// with at least 0.01 a pod; `until` says when the second reading was taken.
pub(crate) fn print_apiserver_requests(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    n: u32,
    until: &str,
) {
    let n = f64::from(n);
    let per_pod: Vec<String> = after
        .iter()
        .map(|(k, v)| (k, (v - before.get(k).copied().unwrap_or(0.0)) / n))
        .filter(|(_, v)| *v >= 0.01)
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect();
    println!(
        "  kube-apiserver requests per pod until {until} (every client): {}",
        per_pod.join(", ")
    );
}

/// The daemons' CPU seconds before and after a phase ([`cpu_by_daemon`]).
pub(crate) type CpuSpan = (CpuSnapshot, CpuSnapshot);

/// CPU seconds used so far by each process of the daemons that matter here, by PID.
pub(crate) type CpuSnapshot = Vec<(i32, &'static str, f64)>;

/// The daemons whose CPU the bench tallies (by command name prefix).
const DAEMONS: [&str; 7] = [
    "kube-apiserver",
    "etcd",
    "slurmrestd",
    "slurmctld",
    "slurm-bridge",
    "kube-controller",
    "kube-scheduler",
];

/// CPU seconds used so far by the daemons this bench started (its descendants: other runs and
/// other users' instances on the machine do not count), per process.
pub(crate) fn cpu_by_daemon() -> CpuSnapshot {
    let ticks = 100.0; // USER_HZ on Linux
    slurm_testenv::process::descendants(std::process::id() as i32)
        .into_iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (open, close) = (stat.find('(')?, stat.rfind(')')?);
            let daemon = DAEMONS
                .iter()
                .find(|d| stat[open + 1..close].starts_with(*d))?;
            let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
            let (u, s) = (fields.get(11)?, fields.get(12)?);
            let secs = (u.parse::<f64>().unwrap_or(0.0) + s.parse::<f64>().unwrap_or(0.0)) / ticks;
            Some((pid, *daemon, secs))
        })
        .collect()
}

/// Each daemon's CPU seconds between two snapshots: a process started during the phase counts
/// whole, one that ended during it is lost (its last seconds are not in `after`).
fn cpu_deltas(before: &CpuSnapshot, after: &CpuSnapshot) -> Vec<(&'static str, f64)> {
    DAEMONS
        .iter()
        .map(|d| {
            let used: f64 = after
                .iter()
                .filter(|(_, name, _)| name == d)
                .map(|(pid, _, a)| {
                    let b = before
                        .iter()
                        .find(|(p, name, _)| p == pid && name == d)
                        .map_or(0.0, |x| x.2);
                    (a - b).max(0.0)
                })
                .sum();
            (*d, used)
        })
        .collect()
}

/// Each daemon's CPU seconds per second while nothing is asked of it (Leases, node status,
/// slurmctld's own timers), over `window`.
pub(crate) async fn idle_rates(window: std::time::Duration) -> Vec<(&'static str, f64)> {
    let before = cpu_by_daemon();
    tokio::time::sleep(window).await;
    cpu_deltas(&before, &cpu_by_daemon())
        .into_iter()
        .map(|(d, c)| (d, c / window.as_secs_f64()))
        .collect()
}

/// CPU seconds between two snapshots beyond what each daemon spends idle over `wall`
/// ([`idle_rates`]): the work done for the line, not the time it lasted.
pub(crate) fn cpu_beyond_idle(
    before: &CpuSnapshot,
    after: &CpuSnapshot,
    wall: std::time::Duration,
    idle: &[(&'static str, f64)],
) -> f64 {
    cpu_deltas(before, after)
        .into_iter()
        .map(|(d, c)| {
            let rate = idle.iter().find(|(n, _)| *n == d).map_or(0.0, |x| x.1);
            (c - rate * wall.as_secs_f64()).max(0.0)
        })
        .sum()
}

/// CPU seconds of the bench's daemons between `before` and `after`.
pub(crate) fn cpu_total(before: &CpuSnapshot, after: &CpuSnapshot) -> f64 {
    cpu_deltas(before, after).iter().map(|(_, c)| c).sum()
}

/// slurmctld's and slurmrestd's CPU seconds between the snapshots: Slurm's work.
pub(crate) fn slurm_cpu(before: &CpuSnapshot, after: &CpuSnapshot) -> f64 {
    cpu_of(before, after, &["slurmctld", "slurmrestd"])
}

/// CPU seconds of the daemons named `names` between two snapshots.
pub(crate) fn cpu_of(before: &CpuSnapshot, after: &CpuSnapshot, names: &[&str]) -> f64 {
    cpu_deltas(before, after)
        .iter()
        .filter(|(d, _)| names.contains(d))
        .map(|(_, c)| c)
        .sum()
}

pub(crate) fn print_cpu(before: &CpuSnapshot, after: &CpuSnapshot) {
    let parts: Vec<String> = cpu_deltas(before, after)
        .into_iter()
        .filter(|(_, c)| *c > 0.05)
        .map(|(d, c)| format!("{d} {c:.1}"))
        .collect();
    println!(
        "  CPU seconds during the phase (the bench's own daemons): {}",
        parts.join(", ")
    );
}

/// Per-pod writes (by kind) and Slurm calls of the bridge, from its metrics.
pub(crate) fn print_per_pod(metrics: &str, n: u32, apiserver: f64) {
    let n = f64::from(n);
    let writes = kube_writes(metrics);
    let by_kind: Vec<String> = writes
        .iter()
        .map(|(k, w)| format!("{k} {:.3}", w / n))
        .collect();
    report!(
        "  per pod: Kubernetes writes {:.3} ({}), Slurm REST calls {:.2}, kube-apiserver requests (all clients) {:.1}",
        writes.iter().map(|w| w.1).sum::<f64>() / n,
        by_kind.join(", "),
        slurm_requests(metrics) / n,
        apiserver / n
    );
    let slurm: Vec<String> = slurm_seconds_by_endpoint(metrics)
        .iter()
        .map(|(e, count, secs)| format!("{e} {count:.0} in {secs:.1} s"))
        .collect();
    println!(
        "  Slurm requests by endpoint, with the seconds the bridge waited on them: {}",
        slurm.join(", ")
    );
    println!(
        "  mean submit->allocation {:.3} s, allocation->bound {:.3} s (scheduler histograms)",
        histogram_mean(
            metrics,
            "slurm_bridge_scheduler_submit_to_allocation_seconds"
        ),
        histogram_mean(
            metrics,
            "slurm_bridge_scheduler_allocation_to_bound_seconds"
        ),
    );
}

/// The value of a counter without labels in a metrics text.
pub(crate) fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}
