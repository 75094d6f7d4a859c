//! How much chaos: the short run (CI, `cargo test`) or the full one (`CHAOS_FULL=1`), and the
//! order of the faults.

use std::time::Duration;

/// One fault the driver injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of `slurm-bridge run`, restarted at once.
    KillBridge,
    /// kube-apiserver killed and started again on its data.
    RestartApiserver,
    /// etcd killed and started again on its data.
    RestartEtcd,
    /// The bridge paused (SIGSTOP), etcd compacted and kube-apiserver restarted (so every watch
    /// of the bridge gets 410 Gone on resume), the bridge resumed.
    CompactWhilePaused,
    /// slurmctld stopped (SIGTERM, state saved) and started on its state.
    RestartSlurmctld,
    /// slurmrestd stopped for the plan's outage, then started.
    SlurmrestdOutage,
    /// kube-apiserver paused (SIGSTOP) for the plan's pause, then resumed.
    PauseApiserver,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillBridge => "SIGKILL of the bridge",
            Fault::RestartApiserver => "kube-apiserver restart",
            Fault::RestartEtcd => "etcd restart",
            Fault::CompactWhilePaused => "etcd compaction, bridge paused",
            Fault::RestartSlurmctld => "slurmctld restart",
            Fault::SlurmrestdOutage => "slurmrestd outage",
            Fault::PauseApiserver => "kube-apiserver pause",
        }
    }
}

/// What one run does.
#[derive(Clone, Debug)]
pub struct Plan {
    pub name: &'static str,
    /// Slurm external nodes and Kubernetes nodes (8 CPUs each).
    pub nodes: u32,
    /// Pods the churn creates (bare pods, Jobs' pods, gang members).
    pub pods: usize,
    /// How long the churn and the faults last.
    pub churn: Duration,
    pub kills: usize,
    /// kube-apiserver restarts besides the one of the compaction.
    pub apiserver_restarts: usize,
    pub etcd_restarts: usize,
    pub slurmctld_restarts: usize,
    pub outage: Duration,
    pub apiserver_pause: Duration,
    /// Share of the bridge's requests the proxies fault.
    pub proxy_rate: f64,
    /// How long the cluster may take to settle after the churn.
    pub settle: Duration,
}

impl Plan {
    /// The issue's numbers: 500 pods over 5 minutes, 20 kills, 3 + 1 kube-apiserver restarts, 2
    /// etcd restarts, a compaction, 3 slurmctld restarts, 30 s outage and pause, 5 % faulted.
    pub fn full() -> Plan {
        Plan {
            name: "full",
            nodes: 4,
            pods: 500,
            churn: Duration::from_secs(300),
            kills: 20,
            apiserver_restarts: 2,
            etcd_restarts: 2,
            slurmctld_restarts: 3,
            outage: Duration::from_secs(30),
            apiserver_pause: Duration::from_secs(30),
            proxy_rate: 0.05,
            settle: Duration::from_secs(300),
        }
    }

    /// Each fault kind at least once, in 100 s of churn.
    pub fn short() -> Plan {
        Plan {
            name: "short",
            nodes: 3,
            pods: 100,
            churn: Duration::from_secs(100),
            kills: 4,
            apiserver_restarts: 1,
            etcd_restarts: 1,
            slurmctld_restarts: 1,
            outage: Duration::from_secs(10),
            apiserver_pause: Duration::from_secs(10),
            proxy_rate: 0.05,
            settle: Duration::from_secs(240),
        }
    }

    /// `CHAOS_FULL=1` (or `true`) selects the full run; unset, empty or `0` the short one.
    pub fn from_env() -> Plan {
        match std::env::var("CHAOS_FULL").unwrap_or_default().as_str() {
            "" | "0" | "false" => Plan::short(),
            "1" | "true" => Plan::full(),
            other => panic!(
                "CHAOS_FULL={other:?}: expected 1 or true (full run), 0, false or unset (short run)"
            ),
        }
    }

    /// The faults in order: the kills spread evenly between the others.
    pub fn schedule(&self) -> Vec<Fault> {
        let mut others = Vec::new();
        // Alternate the kinds so no two outages of one component follow each other.
        let mut counts = [
            (Fault::RestartApiserver, self.apiserver_restarts),
            (Fault::RestartSlurmctld, self.slurmctld_restarts),
            (Fault::RestartEtcd, self.etcd_restarts),
            (Fault::SlurmrestdOutage, 1),
            (Fault::CompactWhilePaused, 1),
            (Fault::PauseApiserver, 1),
        ];
        while counts.iter().any(|(_, n)| *n > 0) {
            for (f, n) in counts.iter_mut().filter(|(_, n)| *n > 0) {
                others.push(*f);
                *n -= 1;
            }
        }
        let total = others.len() + self.kills;
        let mut out = Vec::with_capacity(total);
        let mut kills = 0;
        for (i, f) in others.into_iter().enumerate() {
            // Kills owed before the i-th other fault, spread proportionally.
            let due = (i + 1) * self.kills / (total - self.kills + 1);
            while kills < due {
                out.push(Fault::KillBridge);
                kills += 1;
            }
            out.push(f);
        }
        out.extend(std::iter::repeat_n(Fault::KillBridge, self.kills - kills));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(s: &[Fault], f: Fault) -> usize {
        s.iter().filter(|x| **x == f).count()
    }

    #[test]
    fn the_full_schedule_has_the_issues_numbers_and_the_short_one_every_kind() {
        let s = Plan::full().schedule();
        assert_eq!(count(&s, Fault::KillBridge), 20);
        assert_eq!(
            count(&s, Fault::RestartApiserver) + count(&s, Fault::CompactWhilePaused),
            3
        );
        assert_eq!(count(&s, Fault::RestartEtcd), 2);
        assert_eq!(count(&s, Fault::RestartSlurmctld), 3);
        assert_eq!(count(&s, Fault::SlurmrestdOutage), 1);
        assert_eq!(count(&s, Fault::PauseApiserver), 1);
        // Kills are spread: never more than three in a row.
        assert!(
            s.windows(4)
                .all(|w| w.iter().any(|f| *f != Fault::KillBridge)),
            "{s:?}"
        );
        let short = Plan::short().schedule();
        for f in [
            Fault::KillBridge,
            Fault::RestartApiserver,
            Fault::RestartEtcd,
            Fault::CompactWhilePaused,
            Fault::RestartSlurmctld,
            Fault::SlurmrestdOutage,
            Fault::PauseApiserver,
        ] {
            assert!(count(&short, f) >= 1, "{f:?} in {short:?}");
        }
    }
}
