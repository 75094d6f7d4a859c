//! How often the heartbeats write, and in what order: kubelet's cadence for a few nodes, a
//! slower one for thousands so that their writes stay within a budget the API server can carry
//! on 2 cores, and a round-robin that spreads each period's writes evenly over it (no burst of
//! every node's write at once).

use std::collections::VecDeque;
use std::time::Duration;

use super::AgentOptions;

/// How often the paced heartbeats are handed out.
pub const TICK: Duration = Duration::from_millis(100);

/// The period of each node's Lease renewal with `nodes` served: kubelet's
/// [`AgentOptions::lease_renew_interval`], stretched so that all renewals together stay within
/// [`AgentOptions::lease_writes_per_second`], but never beyond a quarter of
/// [`AgentOptions::node_monitor_grace_period`] (so a node stays Ready); never below the
/// kubelet's interval.
pub fn lease_period(nodes: usize, opts: &AgentOptions) -> Duration {
    let min = opts.lease_renew_interval.max(Duration::from_millis(10));
    let budget = budget_period(nodes, opts.lease_writes_per_second);
    let cap = opts.node_monitor_grace_period / 4;
    min.max(budget.min(cap))
}

/// The period of each node's status refresh with `nodes` served: at least
/// [`AgentOptions::status_update_interval`], stretched to stay within
/// [`AgentOptions::status_writes_per_second`] (the Lease alone keeps a node Ready; kubelet
/// itself reports an unchanged status every 5 minutes).
pub fn status_period(nodes: usize, opts: &AgentOptions) -> Duration {
    let min = opts.status_update_interval.max(Duration::from_millis(10));
    min.max(budget_period(nodes, opts.status_writes_per_second))
}

/// The period at which `nodes` writes a period stay within `per_second`.
fn budget_period(nodes: usize, per_second: f64) -> Duration {
    if per_second <= 0.0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(nodes as f64 / per_second)
}

/// kube-controller-manager's `--node-monitor-grace-period` for an instance of `nodes` nodes:
/// Kubernetes' default (50 s), or four periods of the agent's stretched Lease renewal when that
/// is longer (5,000 nodes at the default budget: 400 s).
pub fn grace_period_for(nodes: usize, opts: &AgentOptions) -> Duration {
    let default = Duration::from_secs(50);
    let budget = budget_period(nodes, opts.lease_writes_per_second)
        .max(opts.lease_renew_interval)
        .mul_f64(4.0);
    // Whole seconds, as the flag is written.
    Duration::from_secs(default.max(budget).as_secs_f64().ceil() as u64)
}

/// A round-robin over the served nodes that hands out, tick by tick, the nodes whose write is
/// due so that each is written once per period. Entries carry the generation of the node's
/// service; an entry whose node is gone, or served again under a newer generation, is dropped
/// when it comes up.
#[derive(Debug, Default)]
pub struct Pacer {
    ring: VecDeque<(String, u64)>,
    /// Writes owed but not handed out yet (fractions of one carried between ticks).
    credit: f64,
}

impl Pacer {
    /// Add a node at the back of the round (its first write is made elsewhere, at once).
    pub fn push(&mut self, name: String, generation: u64) {
        self.ring.push_back((name, generation));
    }

    /// The nodes due in one `tick` when each of `served` nodes is to be written once per
    /// `period`; `live(name, generation)` tells whether an entry still stands for a served node.
    pub fn due(
        &mut self,
        served: usize,
        tick: Duration,
        period: Duration,
        live: impl Fn(&str, u64) -> bool,
    ) -> Vec<String> {
        if served == 0 || period.is_zero() {
            self.credit = 0.0;
            return Vec::new();
        }
        self.credit += served as f64 * tick.as_secs_f64() / period.as_secs_f64();
        self.credit = self.credit.min(served as f64);
        let mut out = Vec::new();
        // Each entry comes up at most once a tick.
        for _ in 0..self.ring.len() {
            if self.credit < 1.0 {
                break;
            }
            let Some((name, generation)) = self.ring.pop_front() else {
                break;
            };
            if !live(&name, generation) {
                continue;
            }
            self.credit -= 1.0;
            out.push(name.clone());
            self.ring.push_back((name, generation));
        }
        out
    }

    /// Entries in the round, stale ones included.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.ring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn kubelet_cadence_up_to_the_budget_then_stretched() {
        // (nodes, lease period s, status period s), under the grace period an instance of
        // that many nodes gets.
        let table = [
            (1, 10.0, 60.0),
            (500, 10.0, 60.0),
            (1_000, 20.0, 100.0),
            (5_000, 100.0, 500.0),
        ];
        for (n, lease, status) in table {
            let d = AgentOptions::default();
            let o = AgentOptions {
                node_monitor_grace_period: grace_period_for(n, &d),
                ..d
            };
            assert_eq!(lease_period(n, &o), secs(lease), "lease, {n} nodes");
            assert_eq!(status_period(n, &o), secs(status), "status, {n} nodes");
        }
    }

    #[test]
    fn the_lease_period_stays_within_a_quarter_of_the_grace_period() {
        let o = AgentOptions {
            node_monitor_grace_period: secs(100.0),
            ..Default::default()
        };
        assert_eq!(lease_period(5_000, &o), secs(25.0));
        assert_eq!(lease_period(1_000, &o), secs(20.0));
        // Never below kubelet's interval, even under a short grace period (tests use 16 s).
        let short = AgentOptions {
            node_monitor_grace_period: secs(16.0),
            ..Default::default()
        };
        assert_eq!(lease_period(5_000, &short), secs(10.0));
        assert_eq!(lease_period(3, &short), secs(10.0));
        // Kubernetes' default grace period (an agent run alone): 12.5 s at 5,000 nodes.
        assert_eq!(lease_period(5_000, &AgentOptions::default()), secs(12.5));
    }

    #[test]
    fn grace_period_is_the_default_or_four_stretched_periods() {
        let o = AgentOptions::default();
        for (n, grace) in [(0, 50), (500, 50), (625, 50), (1_000, 80), (5_000, 400)] {
            assert_eq!(
                grace_period_for(n, &o),
                Duration::from_secs(grace),
                "{n} nodes"
            );
            let o = AgentOptions {
                node_monitor_grace_period: grace_period_for(n, &o),
                ..o.clone()
            };
            assert!(lease_period(n, &o) * 4 <= o.node_monitor_grace_period);
        }
    }

    #[test]
    fn each_node_is_handed_out_once_per_period_evenly() {
        let mut p = Pacer::default();
        let n = 1_000;
        for i in 0..n {
            p.push(format!("n{i}"), 0);
        }
        let period = secs(10.0);
        let mut counts: HashMap<String, usize> = HashMap::new();
        let mut per_tick = Vec::new();
        for _ in 0..200 {
            // 200 ticks of 100 ms: two periods.
            let due = p.due(n, TICK, period, |_, _| true);
            per_tick.push(due.len());
            for name in due {
                *counts.entry(name).or_default() += 1;
            }
        }
        assert_eq!(counts.len(), n);
        assert!(counts.values().all(|&c| c == 2), "every node twice");
        // 1,000 nodes over 100 ticks: 10 a tick, never a burst.
        assert!(
            per_tick.iter().all(|&k| (9..=11).contains(&k)),
            "{per_tick:?}"
        );
    }

    #[test]
    fn stale_entries_are_dropped_and_cost_no_write() {
        let mut p = Pacer::default();
        p.push("a".into(), 0);
        p.push("b".into(), 0);
        p.push("a".into(), 1); // `a` served again, under generation 1
        let live = |name: &str, g: u64| match name {
            "a" => g == 1,
            _ => false, // `b` is gone
        };
        // Two nodes served, both due in one tick: only `a` (generation 1) is handed out.
        let due = p.due(2, TICK, TICK / 2, live);
        assert_eq!(due, vec!["a".to_string()]);
        assert_eq!(p.len(), 1);
        // Fractional credit carries over: 1 node, a period of 4 ticks.
        let mut p = Pacer::default();
        p.push("x".into(), 0);
        let handed: Vec<usize> = (0..8)
            .map(|_| p.due(1, TICK, TICK * 4, |_, _| true).len())
            .collect();
        assert_eq!(handed, vec![0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn nothing_served_owes_nothing() {
        let mut p = Pacer::default();
        assert!(p.due(0, TICK, secs(10.0), |_, _| true).is_empty());
        p.push("a".into(), 0);
        assert_eq!(
            p.due(1, TICK, Duration::ZERO, |_, _| true),
            Vec::<String>::new()
        );
    }
}
