//! The figures of a run: each fault's recovery time (fault end to the next pod bound) and the
//! counts, printed and written to `$CARGO_TARGET_TMPDIR/chaos-<plan>.txt`.

use super::observe::Observed;
use super::plan::{Fault, Plan};
use fault_proxy::Stats;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// One injected fault.
pub struct Injected {
    pub fault: Fault,
    pub start: Instant,
    pub end: Instant,
}

/// Everything the report shows.
pub struct Figures<'a> {
    pub plan: &'a Plan,
    pub seed: u64,
    pub faults: &'a [Injected],
    pub observed: &'a Observed,
    pub slurm_proxy: Stats,
    pub kube_proxy: Stats,
    pub kills: usize,
    pub crashes: usize,
    pub panics: usize,
    pub pods_created: usize,
    pub workloads: usize,
    pub deleted: usize,
    pub churn_api_errors: usize,
    pub churn_took: Duration,
    pub settle_took: Duration,
    pub lost: usize,
    /// Jobs the bridge cancelled as duplicates of a group's job (its log's warnings).
    pub duplicates_cancelled: usize,
    pub violations: &'a [String],
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

impl Figures<'_> {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(w, "chaos run `{}` (seed {})", self.plan.name, self.seed);
        let _ = writeln!(
            w,
            "{:<4} {:<32} {:>9} {:>10}",
            "#", "fault", "lasted", "recovery"
        );
        let mut by_kind: Vec<(Fault, Vec<Duration>)> = Vec::new();
        for (i, f) in self.faults.iter().enumerate() {
            let rec = self.observed.recovery(f.end);
            let _ = writeln!(
                w,
                "{:<4} {:<32} {:>9} {:>10}",
                i + 1,
                f.fault.name(),
                secs(f.end - f.start),
                rec.map_or("none".into(), secs)
            );
            match by_kind.iter_mut().find(|(k, _)| *k == f.fault) {
                Some((_, v)) => v.extend(rec),
                None => by_kind.push((f.fault, rec.into_iter().collect())),
            }
        }
        let _ = writeln!(w, "recovery by fault kind (n, median, max):");
        for (k, mut v) in by_kind {
            v.sort();
            let n = self.faults.iter().filter(|f| f.fault == k).count();
            let med = v.get(v.len() / 2).copied().map_or("-".into(), secs);
            let max = v.last().copied().map_or("-".into(), secs);
            let _ = writeln!(w, "  {:<32} {n:>3} {med:>9} {max:>9}", k.name());
        }
        let count = |f: Fault| self.faults.iter().filter(|x| x.fault == f).count();
        let apiserver = count(Fault::RestartApiserver) + count(Fault::CompactWhilePaused);
        let _ = writeln!(
            w,
            "bridge SIGKILLs {} (unasked exits {}, panics in its log {}); kube-apiserver restarts {apiserver}, etcd restarts {}, etcd compactions {}, slurmctld restarts {}, slurmrestd outages {} x {}, kube-apiserver pauses {} x {}",
            self.kills,
            self.crashes,
            self.panics,
            count(Fault::RestartEtcd),
            count(Fault::CompactWhilePaused),
            count(Fault::RestartSlurmctld),
            count(Fault::SlurmrestdOutage),
            secs(self.plan.outage),
            count(Fault::PauseApiserver),
            secs(self.plan.apiserver_pause),
        );
        for (name, s) in [
            ("slurmrestd", &self.slurm_proxy),
            ("kube-apiserver", &self.kube_proxy),
        ] {
            let _ = writeln!(
                w,
                "proxy to {name}: {} requests, {} faulted ({:.1} %): latency {}, reset {}, 5xx {}, 429 {}, stall {}, answer lost after forwarding {}; {} answered 502 (server down)",
                s.requests,
                s.injected(),
                100.0 * s.injected() as f64 / s.requests.max(1) as f64,
                s.latency,
                s.reset,
                s.error_5xx,
                s.throttle_429,
                s.stall,
                s.lost_answer,
                s.upstream_errors
            );
        }
        let _ = writeln!(
            w,
            "pods churned {} in {} workloads over {} ({} workloads deleted, {} API errors retried); {} pods seen bound; settled {} after the churn",
            self.pods_created,
            self.workloads,
            secs(self.churn_took),
            self.deleted,
            self.churn_api_errors,
            self.observed.bound_pods(),
            secs(self.settle_took)
        );
        let _ = writeln!(
            w,
            "lost {} (workloads neither deleted nor completed), duplicated {} (pods in two live jobs at once), {} jobs cancelled as duplicates",
            self.lost,
            self.observed.duplicated.len(),
            self.duplicates_cancelled
        );
        let _ = writeln!(w, "invariant violations: {}", self.violations.len());
        for v in self.violations.iter().take(20) {
            let _ = writeln!(w, "  {v}");
        }
        for d in self.observed.duplicated.iter().take(10) {
            let _ = writeln!(w, "  duplicated {d}");
        }
        out
    }
}
