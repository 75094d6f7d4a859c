//! Slurm losing its state, end to end on real Slurm and the real control plane: slurmctld
//! stopped, its StateSaveLocation emptied and started again under 10 running pods. The pods are
//! not removed: each is marked `SlurmJobLost` with a Warning Event, the controllers' gauge says
//! hold, and the Slurm nodes under them are drained with the bridge's reason (the external
//! nodes, gone with the state, are registered again drained). A pod submitted meanwhile lands
//! on no drained node. The documented recovery (delete the held pods) releases them, lifts the
//! drains and leaves the lifecycle invariants holding.

mod e2e;

use e2e::controllers::Controllers;
use e2e::{Env, node_of, sleeper};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use slurm_bridge::controllers::node::drain::REASON_MARK;
use slurm_bridge::controllers::state_loss::{CONDITION, REASON_FOUND, REASON_HELD};
use slurm_rest::models::NodeState;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const PODS: usize = 10;
const WAIT: Duration = Duration::from_secs(90);

/// The pod's `SlurmJobLost` condition, as (status, reason, message).
fn lost_condition(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// A pod sleeping for ever on 1 CPU, sharing nodes (bridge jobs are exclusive by default).
fn sharing_sleeper(name: &str) -> serde_json::Value {
    let mut v = sleeper(name, "infinity", 1);
    v["metadata"]["annotations"]["slurmjob.slinky.slurm.net/exclusive"] = "false".into();
    v
}

fn held(p: &Pod) -> bool {
    lost_condition(p).is_some_and(|c| c.0 == "True")
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Slurm node name -> (drained, reason), for the nodes Slurm lists.
async fn slurm_nodes(env: &Env) -> BTreeMap<String, (bool, Option<String>)> {
    env.rest
        .nodes()
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|n| {
            let drained = n.has_state(&NodeState::Drain) && !n.has_state(&NodeState::Undrain);
            (n.name.clone(), (drained, n.reason.clone()))
        })
        .collect()
}

/// Waits until `check` holds for the pods named `names` (as listed now).
async fn wait_pods(
    env: &Env,
    names: &BTreeSet<String>,
    what: &str,
    check: impl Fn(&[Pod]) -> bool,
) -> Vec<Pod> {
    let deadline = Instant::now() + WAIT;
    loop {
        let pods: Vec<Pod> = env
            .pods()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| names.contains(&p.name_any()))
            .collect();
        if check(&pods) {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {WAIT:?}; pods: {:?}",
            pods.iter()
                .map(|p| (p.name_any(), lost_condition(p), e2e::describe(p)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What every test starts from.
struct Running {
    env: Env,
    controllers: Controllers,
    names: BTreeSet<String>,
    uids: BTreeMap<String, String>,
    /// The Slurm nodes the pods run on.
    slurm_nodes_in_use: BTreeSet<String>,
}

/// Waits until none of `nodes` carries a drain and the controllers' state-loss gauges read 0
/// (the hold is over); panics with Slurm's node listing and the gauges after [`WAIT`].
async fn wait_hold_over(env: &Env, controllers: &Controllers, nodes: &BTreeSet<String>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let listing = slurm_nodes(env).await;
        let undrained = nodes
            .iter()
            .all(|n| listing.get(n).is_some_and(|(d, _)| !d));
        if undrained && controllers.handle.state_loss.gauges() == (0, 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nodes {nodes:?} undrained and gauges 0 within {WAIT:?}: {listing:?} {:?}",
            controllers.handle.state_loss.gauges()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Real Slurm with 3 external nodes (hybrid: 2 nodes run by slurmd), the control plane, the
/// scheduler and the controllers, and `PODS` pods running (sharing nodes).
async fn start_running(hybrid: bool) -> Running {
    // The nodes name their partition, so the external nodes the node controller registers
    // again after the loss are in it (slurm-testenv made them with the feature).
    let mut env = if hybrid {
        Env::start_hybrid(2, Default::default(), |_| {}).await
    } else {
        Env::start_configured(3, |o| {
            for n in &mut o.nodes {
                n.annotations.insert(
                    slurm_bridge::wellknown::ANNOTATION_EXTERNAL_NODE_PARTITIONS.into(),
                    "slurm-bridge".into(),
                );
            }
        })
        .await
    };
    env.start_scheduler().await;
    let controllers = Controllers::start(&env, |_| {}).await;

    let names: Vec<String> = (0..PODS).map(|i| format!("train-{i}")).collect();
    for n in &names {
        env.create_pod(sharing_sleeper(n)).await;
    }
    let name_set: BTreeSet<String> = names.iter().cloned().collect();
    env.wait_bound(&names, Duration::from_secs(60)).await;
    let before = wait_pods(&env, &name_set, "every pod Running", |ps| {
        ps.len() == PODS && ps.iter().all(running)
    })
    .await;
    let uids: BTreeMap<String, String> = before
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap()))
        .collect();
    let nodes_in_use: BTreeSet<String> = before.iter().map(node_of).collect();
    assert_eq!(controllers.handle.state_loss.gauges(), (0, 0));
    // The census counts a pod once the job watcher has listed Slurm's jobs since it was bound
    // (a pod bound just now may have a job the index does not hold yet): wait until it counts
    // them all.
    let deadline = Instant::now() + WAIT;
    while controllers.handle.state_loss.census().counted < PODS {
        assert!(Instant::now() < deadline, "the census counts every pod");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let jobs_before = env.active_job_ids();
    assert_eq!(jobs_before.len(), PODS, "one job per pod: {jobs_before:?}");
    let slurm_names = env.slurm_names().await;
    let slurm_nodes_in_use = nodes_in_use
        .iter()
        .map(|n| slurm_names.get(n).cloned().unwrap_or_else(|| n.clone()))
        .collect();
    Running {
        env,
        controllers,
        names: name_set,
        uids,
        slurm_nodes_in_use,
    }
}

/// Loses slurmctld's state (stopped, StateSaveLocation emptied, started again) and waits until
/// every pod is held and the Slurm nodes under them are drained by the bridge; checks the
/// conditions, the Events, the gauges and that no pod was removed. Returns the held pods and
/// the Slurm listing.
async fn lose_state(r: &Running) -> (Vec<Pod>, BTreeMap<String, (bool, Option<String>)>) {
    let (env, controllers, name_set, uids) = (&r.env, &r.controllers, &r.names, &r.uids);
    let slurm = env.slurm.clone();
    tokio::task::spawn_blocking(move || slurm.restart_slurmctld_with_state_lost())
        .await
        .unwrap()
        .expect("slurmctld restarted without its state");
    let lost_at = Instant::now();
    assert!(
        env.active_job_ids().is_empty(),
        "Slurm knows no job after losing its state"
    );

    // Every pod is held: condition, Event, gauge; none removed.
    let held_pods = wait_pods(env, name_set, "every pod marked SlurmJobLost", |ps| {
        ps.len() == PODS && ps.iter().all(held)
    })
    .await;
    eprintln!(
        "all {PODS} pods marked {CONDITION} {:?} after slurmctld came back",
        lost_at.elapsed()
    );
    for p in &held_pods {
        assert_eq!(
            uids.get(&p.name_any()),
            p.uid().as_ref(),
            "{} recreated",
            p.name_any()
        );
        assert!(
            p.metadata.deletion_timestamp.is_none(),
            "{} deleted",
            p.name_any()
        );
        assert!(
            e2e::controllers::disruption(p).is_none(),
            "{} marked for removal",
            p.name_any()
        );
        let (_, reason, message) = lost_condition(p).unwrap();
        assert_eq!(reason, REASON_HELD);
        let job = p.labels()[slurm_bridge::wellknown::LABEL_SLURM_JOBID].clone();
        assert!(
            message.contains(&format!("job {job}"))
                && message.contains(&format!("{PODS} of {PODS} bound pods' jobs are unknown")),
            "{message}"
        );
        // The Event follows the condition (a background write): waited for, then counted.
        let events = env.wait_event(&p.name_any(), REASON_HELD).await;
        assert_eq!(
            events.iter().filter(|(r, _)| r == REASON_HELD).count(),
            1,
            "one {REASON_HELD} Event on {}: {events:?}",
            p.name_any()
        );
    }
    let deadline = Instant::now() + WAIT;
    while controllers.handle.state_loss.gauges() != (1, PODS as i64) {
        assert!(
            Instant::now() < deadline,
            "gauges {:?}",
            controllers.handle.state_loss.gauges()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The Slurm nodes under them (gone with the state, registered again) are drained with the
    // bridge's reason; the others are not.
    let slurm_names = env.slurm_names().await;
    let drained_nodes = &r.slurm_nodes_in_use;
    let deadline = Instant::now() + WAIT;
    let listing = loop {
        let listing = slurm_nodes(env).await;
        let all_drained = drained_nodes.iter().all(|n| {
            listing.get(n).is_some_and(|(d, r)| {
                *d && r.as_deref().is_some_and(|r| {
                    r.starts_with(REASON_MARK) && r.contains("Slurm lost the jobs")
                })
            })
        });
        if all_drained && listing.len() == slurm_names.len() {
            break listing;
        }
        assert!(
            Instant::now() < deadline,
            "nodes {drained_nodes:?} drained by the bridge within {WAIT:?}: {listing:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "Slurm nodes {drained_nodes:?} drained {:?} after slurmctld came back: {listing:?}",
        lost_at.elapsed()
    );
    for (name, (drained, _)) in &listing {
        if !drained_nodes.contains(name) {
            assert!(!drained, "node {name} hosts no held pod but is drained");
        }
    }
    (held_pods, listing)
}

#[tokio::test]
async fn slurm_losing_its_state_keeps_the_pods_and_drains_their_nodes() {
    keeps_the_pods_and_drains_their_nodes(false).await;
}

/// The same on hybrid nodes (Slurm nodes run by slurmd, which slurm.conf keeps across the loss).
#[tokio::test]
async fn on_hybrid_nodes_too() {
    keeps_the_pods_and_drains_their_nodes(true).await;
}

async fn keeps_the_pods_and_drains_their_nodes(hybrid: bool) {
    let r = start_running(hybrid).await;
    let (held_pods, _) = lose_state(&r).await;
    let (env, controllers, name_set) = (&r.env, &r.controllers, &r.names);
    let drained_nodes = &r.slurm_nodes_in_use;
    let slurm_names = env.slurm_names().await;

    // A pod submitted now lands on no drained node; with every node drained it waits.
    env.create_pod(sharing_sleeper("newcomer")).await;
    let free: Vec<&String> = slurm_names
        .iter()
        .filter(|(_, s)| !drained_nodes.contains(*s))
        .map(|(k, _)| k)
        .collect();
    if free.is_empty() {
        // Its job waits in Slurm, and the pod is not bound.
        let deadline = Instant::now() + WAIT;
        let job = loop {
            let active = env.active_job_ids();
            if let [id] = active.as_slice()
                && e2e::job_field(env, id, "JobState") == "PENDING"
            {
                break *id;
            }
            assert!(
                Instant::now() < deadline,
                "the newcomer's job pending: {active:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let p = env.pods().get("newcomer").await.unwrap();
        assert!(node_of(&p).is_empty(), "newcomer bound to a drained node");
        eprintln!("every node drained: the new pod's job {job} waits in Slurm");
    } else {
        let p = env
            .wait_bound(&["newcomer".to_string()], Duration::from_secs(60))
            .await
            .remove(0);
        assert!(
            free.contains(&&node_of(&p)),
            "newcomer bound to {} (drained: {drained_nodes:?})",
            node_of(&p)
        );
        eprintln!(
            "the new pod went to {} (job {}), not to a drained node",
            node_of(&p),
            e2e::job_id_of(&p)
        );
    }
    // Still held, none removed, while Slurm knows none of their jobs (the newcomer's job may
    // carry an old pod's id: it does not name the old pod, so it is not that pod's).
    let still = wait_pods(env, name_set, "the pods still held", |ps| {
        ps.len() == PODS && ps.iter().all(|p| held(p) && running(p))
    })
    .await;
    assert_eq!(still.len(), PODS);

    // The recovery: the admin accepts the loss and deletes the held pods
    // (`slurm-bridge release-lost`; `--dry-run` first lists them).
    let listed = slurm_bridge::cli::release_lost::release_lost(&env.kube, &[], true)
        .await
        .unwrap();
    let listed: BTreeSet<String> = listed.into_iter().map(|h| h.key).collect();
    let want: BTreeSet<String> = held_pods
        .iter()
        .map(|p| format!("{}/{}", e2e::NS, p.name_any()))
        .collect();
    assert_eq!(listed, want, "release-lost --dry-run lists the held pods");
    assert_eq!(
        env.pods()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        PODS + 1,
        "--dry-run deletes nothing"
    );
    let deleted = slurm_bridge::cli::release_lost::release_lost(&env.kube, &[], false)
        .await
        .unwrap();
    assert_eq!(deleted.len(), PODS);
    wait_pods(env, name_set, "the held pods gone", |ps| ps.is_empty()).await;
    wait_hold_over(env, controllers, drained_nodes).await;
    eprintln!("after the recovery: drains lifted, hold over");
    env.wait_bound(&["newcomer".to_string()], Duration::from_secs(60))
        .await;
    env.assert_invariants().await;
    r.controllers.stop().await;
}

/// Slurm's state restored from a backup: the jobs are known again, each pod's mark is lifted
/// (`SlurmJobFound`), no pod was removed, and the hold ends by itself.
#[tokio::test]
async fn slurms_state_restored_ends_the_hold_by_itself() {
    let r = start_running(false).await;
    let (env, controllers, name_set, uids) = (&r.env, &r.controllers, &r.names, &r.uids);
    // A backup of the state: slurmctld restarted cleanly (it saves its state on the way out),
    // then its StateSaveLocation copied.
    let backup = e2e::temp_dir("slurm-state-backup");
    {
        let slurm = env.slurm.clone();
        let backup = backup.clone();
        tokio::task::spawn_blocking(move || {
            slurm.restart_slurmctld().expect("slurmctld restarted");
            let status = std::process::Command::new("cp")
                .arg("-a")
                .arg(slurm.state_dir().join("."))
                .arg(&backup)
                .status()
                .unwrap();
            assert!(status.success(), "cp -a of the state: {status}");
        })
        .await
        .unwrap();
    }
    assert_eq!(
        env.active_job_ids().len(),
        PODS,
        "a clean restart keeps the jobs"
    );

    lose_state(&r).await;

    // The backup restored.
    let slurm = env.slurm.clone();
    let saved = backup.clone();
    tokio::task::spawn_blocking(move || slurm.restart_slurmctld_with_state_from(&saved))
        .await
        .unwrap()
        .expect("slurmctld restarted on the restored state");
    let restored_at = Instant::now();
    let pods = wait_pods(env, name_set, "every pod's mark lifted", |ps| {
        ps.len() == PODS
            && ps
                .iter()
                .all(|p| lost_condition(p).is_some_and(|c| c.0 == "False" && c.1 == REASON_FOUND))
    })
    .await;
    eprintln!(
        "every mark lifted {:?} after slurmctld came back on the restored state",
        restored_at.elapsed()
    );
    for p in &pods {
        assert_eq!(
            uids.get(&p.name_any()),
            p.uid().as_ref(),
            "{} recreated",
            p.name_any()
        );
        assert!(running(p) && p.metadata.deletion_timestamp.is_none());
        assert!(e2e::controllers::disruption(p).is_none());
    }
    wait_hold_over(env, controllers, &r.slurm_nodes_in_use).await;
    assert_eq!(env.active_job_ids().len(), PODS, "the jobs are back");
    env.assert_invariants().await;
    let _ = std::fs::remove_dir_all(&backup);
    r.controllers.stop().await;
}
