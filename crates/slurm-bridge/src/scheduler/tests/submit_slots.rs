//! Job submits in flight at once ([`crate::scheduler::context::SUBMITS_IN_FLIGHT`]).

use super::*;
use crate::scheduler::context::SUBMITS_IN_FLIGHT;

/// More pods than submit slots, every submit held by Slurm: no more than the slots reach
/// Slurm at once, and once Slurm answers, the pods that waited for a slot are submitted too.
/// The clock is paused, so the second's sleep ends only when every pass is blocked (on Slurm's
/// answer or on a slot): it cannot end before a pass that would submit has done so.
#[tokio::test(start_paused = true)]
async fn no_more_submits_than_the_slots_reach_slurm_at_once() {
    let n = SUBMITS_IN_FLIGHT + 4;
    let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
    let world = names
        .iter()
        .fold(World::nodes(&["n1"]), |w, name| w.with(pod(name)));
    let h = Harness::new(world).await;
    let gate = h.slurm.hold_submits();
    let passes = futures::future::join_all(names.iter().map(|name| h.pass(name)));
    let slurm = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let held = h.slurm.submits_in_flight();
        gate.add_permits(n);
        held
    };
    let (outcomes, held) = tokio::join!(passes, slurm);
    assert_eq!(
        held,
        (SUBMITS_IN_FLIGHT, SUBMITS_IN_FLIGHT),
        "(in flight, most so far)"
    );
    for (name, outcome) in names.iter().zip(&outcomes) {
        assert_eq!(outcome.error, None, "{name}");
    }
    let submits = h
        .slurm
        .calls()
        .iter()
        .filter(|c| c.starts_with("submit "))
        .count();
    assert_eq!(submits, n, "every pod's job submitted once");
    assert_eq!(h.slurm.submits_in_flight(), (0, SUBMITS_IN_FLIGHT));
}
