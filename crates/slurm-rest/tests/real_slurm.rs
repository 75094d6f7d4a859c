//! Every client call against a real slurmctld + slurmrestd 26.05 (slurm-testenv). These tests
//! need root (CI runs them as root); each starts its own instance, so they run in parallel.

use slurm_rest::models::*;
use slurm_rest::{Client, ErrorKind, RetryPolicy, TokenProvider, errno};
use slurm_testenv::{Instance, InstanceOptions};
use std::time::{Duration, Instant};

fn start(nodes: u32) -> Instance {
    Instance::start(InstanceOptions {
        nodes,
        ..Default::default()
    })
    .expect("start a slurm-testenv instance (needs root)")
}

fn client(inst: &Instance) -> Client {
    Client::builder(inst.rest_url())
        .token(TokenProvider::file(inst.token_file()))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// The job description the bridge sends for one pod (reference-behavior §5.9.3).
fn external_job(name: &str, pods: &[&str]) -> JobDescMsg {
    let admin_comment = serde_json::json!({ "pods": pods }).to_string();
    JobDescMsg {
        flags: Some(vec![JobFlag::ExternalJob]),
        admin_comment: Some(admin_comment),
        name: Some(name.into()),
        partition: Some("slurm-bridge".into()),
        nodes: Some(pods.len().to_string()),
        minimum_nodes: Some(pods.len() as u32),
        maximum_nodes: Some(pods.len() as u32),
        tasks_per_node: Some(1),
        cpus_per_task: Some(1),
        memory_per_node: Some(NoVal::Set(100)),
        time_limit: Some(NoVal::Set(10)),
        priority: Some(NoVal::Unset),
        shared: Some(vec![Shared::None]),
        mcs_label: Some(String::new()),
        user_id: Some("0".into()),
        group_id: Some("0".into()),
        current_working_directory: Some("/tmp".into()),
        ..Default::default()
    }
}

async fn wait_for<F: Fn(&JobInfo) -> bool>(c: &Client, id: u32, what: &str, ok: F) -> JobInfo {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let j = c.job(id).await.unwrap();
        if ok(&j) {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never became {what}: {:?} {:?}",
            j.job_state,
            j.state_reason
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_job_lifecycle() {
    let inst = start(2);
    let c = client(&inst);

    let pings = c.ping().await.unwrap();
    assert!(pings.iter().any(|p| p.responding), "{pings:?}");

    let mut desc = external_job("rt-ext", &["ns/pod-a"]);
    desc.required_nodes = Some(vec!["node-2".into()]);
    desc.constraints = Some("slurm-bridge".into());
    let submitted = c.submit_job(&desc).await.unwrap();
    assert!(submitted.job_id > 0);
    let id = submitted.job_id;

    let job = wait_for(&c, id, "RUNNING", |j| j.is_running()).await;
    assert!(job.flags.contains(&JobFlag::ExternalJob), "{:?}", job.flags);
    assert_eq!(job.nodes.as_deref(), Some("node-2"));
    assert_eq!(
        job.admin_comment.as_deref(),
        Some(r#"{"pods":["ns/pod-a"]}"#)
    );
    assert_eq!(job.name.as_deref(), Some("rt-ext"));
    assert_eq!(job.partition.as_deref(), Some("slurm-bridge"));
    assert_eq!(job.time_limit, NoVal::Set(10));
    assert_eq!(job.shared, [Shared::None]);

    // The external node is allocated, and the cheap state list agrees.
    let node = c.node("node-2").await.unwrap();
    assert!(node.has_state(&NodeState::External), "{:?}", node.state);
    assert!(node.has_state(&NodeState::Allocated), "{:?}", node.state);
    let states = c.job_states().await.unwrap();
    let s = states
        .iter()
        .find(|s| s.job_id == id)
        .expect("job in /jobs/state/");
    assert_eq!(s.state, [JobState::Running]);
    assert_eq!(c.job_state(id).await.unwrap().state, [JobState::Running]);
    assert_eq!(
        c.job_state(999_999).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Several ids in one request: only the ones asked, unknown ones left out.
    let some = c.job_states_of(&[id, 999_999]).await.unwrap();
    assert_eq!(some.len(), 1, "{some:?}");
    assert_eq!(
        (some[0].job_id, &some[0].state[..]),
        (id, &[JobState::Running][..])
    );
    assert!(c.job_states_of(&[999_999]).await.unwrap().is_empty());
    assert!(c.job_states_of(&[]).await.unwrap().is_empty());

    // Listing with update_time: everything, then nothing once up to date.
    let all = c.jobs(None).await.unwrap();
    assert!(all.jobs.iter().any(|j| j.job_id == id));
    // Slurm may still touch the job (backfill), so follow last_update until it settles.
    let mut since = all.last_update.get().unwrap() as i64;
    let mut settled = false;
    for _ in 0..50 {
        let r = c.jobs(Some(since)).await.unwrap();
        if r.jobs.is_empty() {
            let w = r.warnings.first().and_then(|w| w.description.as_deref());
            assert!(w.is_some_and(|w| w.contains("No job changes")), "{w:?}");
            settled = true;
            break;
        }
        since = r.last_update.get().unwrap() as i64;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        settled,
        "GET /jobs/?update_time never answered 'no changes'"
    );

    // Exclusive external job: all 8 cores of the node.
    let layout = c.job_resources(id).await.unwrap();
    assert_eq!(layout.len(), 1);
    assert_eq!(layout[0].node, "node-2");
    assert_eq!(layout[0].core_bitmap.as_deref(), Some("0xFF"));
    assert_eq!(layout[0].mem_alloc, Some(100));

    // A running job refuses pending-only changes with the typed error.
    let e = c
        .update_job(
            id,
            &JobDescMsg {
                account: Some("root".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::JobNotPending, "{e}");
    assert!(e.to_string().contains("no longer pending"), "{e}");

    c.cancel_job(id, None, None).await.unwrap();
    wait_for(&c, id, "CANCELLED", |j| j.has_state(&JobState::Cancelled)).await;
    let e = c.cancel_job(id, None, None).await.unwrap_err();
    assert!(e.has_error_number(errno::ALREADY_DONE), "{e}");

    let e = c.job(999_999).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert_eq!(e.http_status(), Some(404));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_job_update_signal_and_cancel() {
    let inst = std::sync::Arc::new(start(2));
    let c = client(&inst);
    let mut desc = external_job("rt-held", &["ns/held"]);
    desc.hold = Some(true);
    // `"priority": {"set": false}` would undo the hold (slurmctld applies it after `hold`).
    desc.priority = None;
    let id = c.submit_job(&desc).await.unwrap().job_id;
    let job = wait_for(&c, id, "held", |j| j.is_pending()).await;
    assert_eq!(job.hold, Some(true));

    let update = JobDescMsg {
        name: Some("rt-held-renamed".into()),
        time_limit: Some(NoVal::Set(7)),
        admin_comment: Some(r#"{"pods":["ns/held","ns/held-2"]}"#.into()),
        excluded_nodes: Some(vec!["node-1".into()]),
        ..Default::default()
    };
    c.update_job(id, &update).await.unwrap();
    let job = c.job(id).await.unwrap();
    assert!(job.is_pending());
    assert_eq!(job.state_reason.as_deref(), Some("JobHeldUser"));
    assert_eq!(job.name.as_deref(), Some("rt-held-renamed"));
    assert_eq!(job.time_limit, NoVal::Set(7));
    assert_eq!(job.excluded_nodes.as_deref(), Some("node-1"));
    assert_eq!(
        job.admin_comment.as_deref(),
        Some(r#"{"pods":["ns/held","ns/held-2"]}"#)
    );

    // A pending job has no resource layout yet.
    let e = c.job_resources(id).await.unwrap_err();
    assert!(e.has_error_number(errno::JOB_NOT_RUNNING), "{e}");

    // Reservations: one made with scontrol shows up.
    let inst2 = inst.clone();
    tokio::task::spawn_blocking(move || {
        inst2.run(&[
            "scontrol",
            "create",
            "reservation",
            "reservationname=rt-resv",
            "starttime=now",
            "duration=60",
            "nodes=node-2",
            "users=root",
            "flags=ignore_jobs",
        ])
    })
    .await
    .unwrap()
    .unwrap();
    let resv = c.reservations().await.unwrap();
    assert_eq!(resv.len(), 1, "{resv:?}");
    assert_eq!(resv[0].name, "rt-resv");
    assert_eq!(resv[0].node_list.as_deref(), Some("node-2"));
    assert!(resv[0].flags.contains(&ReservationFlag::IgnoreJobs));

    c.cancel_job(id, Some("SIGKILL"), Some(&[SignalFlag::FullJob]))
        .await
        .unwrap();
    wait_for(&c, id, "CANCELLED", |j| j.has_state(&JobState::Cancelled)).await;
}

/// GET /nodes/?update_time=T answers 304 (`Unchanged`) while no node changed since T, and the
/// whole listing again once one did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_node_listing_is_unchanged_until_a_node_changes() {
    let inst = start(2);
    let c = client(&inst);
    let listed = |l: NodeListing| match l {
        NodeListing::Nodes { nodes, last_update } => (nodes, last_update),
        NodeListing::Unchanged => panic!("an unconditional listing answered Unchanged"),
    };
    let (nodes, mut since) = listed(c.nodes_since(None).await.unwrap());
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    // slurmctld answers in whole seconds: a change within the second of `since` (the start's
    // own node updates) still lists; it settles once a second passes without one.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = since.expect("a listing carries its last_update");
        match c.nodes_since(Some(t)).await.unwrap() {
            NodeListing::Unchanged => break,
            NodeListing::Nodes { last_update, .. } => since = last_update,
        }
        assert!(
            Instant::now() < deadline,
            "the listing never settled at {since:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let name = &nodes[0].name;
    c.update_node(
        name,
        &UpdateNodeMsg::state(NodeState::Drain, Some("rt conditional".into())),
    )
    .await
    .unwrap();
    let (nodes, _) = listed(c.nodes_since(since).await.unwrap());
    let n = nodes
        .iter()
        .find(|n| &n.name == name)
        .expect("the drained node is listed");
    assert!(n.has_state(&NodeState::Drain), "{:?}", n.state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_lifecycle_partitions_and_reservations() {
    let inst = start(0);
    let c = client(&inst);
    let name = "ext-node-1";
    c.create_node(&format!(
        "NodeName={name} NodeAddr=127.0.0.1 State=EXTERNAL CPUs=4 RealMemory=8000 Features=slurm-bridge"
    ))
    .await
    .unwrap();
    let n = c.node(name).await.unwrap();
    assert!(n.has_state(&NodeState::External), "{:?}", n.state);
    assert_eq!(n.cpus, Some(4));
    assert_eq!(n.real_memory, Some(8000));
    assert_eq!(n.partitions, ["slurm-bridge"]);
    assert!(c.nodes().await.unwrap().iter().any(|x| x.name == name));

    let e = c
        .create_node(&format!(
            "NodeName={name} NodeAddr=127.0.0.1 State=EXTERNAL"
        ))
        .await
        .unwrap_err();
    assert!(e.has_error_number(errno::NODE_ALREADY_EXISTS), "{e}");

    c.update_node(
        name,
        &UpdateNodeMsg::state(NodeState::Drain, Some("rt drain".into())),
    )
    .await
    .unwrap();
    let n = c.node(name).await.unwrap();
    assert!(n.has_state(&NodeState::Drain), "{:?}", n.state);
    assert_eq!(n.reason.as_deref(), Some("rt drain"));

    c.update_node(name, &UpdateNodeMsg::state(NodeState::Resume, None))
        .await
        .unwrap();
    assert!(!c.node(name).await.unwrap().has_state(&NodeState::Drain));

    c.update_node(
        name,
        &UpdateNodeMsg::state(NodeState::Drain, Some("again".into())),
    )
    .await
    .unwrap();
    c.update_node(
        name,
        &UpdateNodeMsg::state(NodeState::Undrain, Some("back".into())),
    )
    .await
    .unwrap();
    assert!(!c.node(name).await.unwrap().has_state(&NodeState::Drain));

    let features = vec!["slurm-bridge".to_string(), "gpu".to_string()];
    c.update_node(
        name,
        &UpdateNodeMsg {
            features: Some(features.clone()),
            features_act: Some(features.clone()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    c.update_node(
        name,
        &UpdateNodeMsg {
            topology_str: Some("default:s1".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let n = c.node(name).await.unwrap();
    assert_eq!(n.features, features);
    assert_eq!(n.topology.as_deref(), Some("default:s1"));

    let p = c.partition("slurm-bridge").await.unwrap();
    assert_eq!(p.partition.state, [PartitionState::Up]);
    assert!(
        c.partitions()
            .await
            .unwrap()
            .iter()
            .any(|p| p.name == "slurm-bridge")
    );
    assert_eq!(
        c.partition("no-such-partition").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(c.reservations().await.unwrap().is_empty());

    c.delete_node(name).await.unwrap();
    assert_eq!(c.node(name).await.unwrap_err().kind(), ErrorKind::NotFound);
    let e = c.delete_node(name).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_file_rotation_and_bad_tokens() {
    let inst = start(0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    let write = |content: &str| {
        let tmp = dir.path().join("token.tmp");
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    };
    write(&format!("SLURM_JWT={}\n", inst.token()));
    let c = Client::builder(inst.rest_url())
        .token(TokenProvider::file(&path))
        .user_name(Some("root".into()))
        .build()
        .unwrap();
    c.jobs(None).await.unwrap();

    // Replaced with a fresh token while the client is in use: requests keep working.
    let fresh = inst.mint_token("root", 600).unwrap();
    assert_ne!(fresh, inst.token());
    write(&fresh);
    c.jobs(None).await.unwrap();
    c.nodes().await.unwrap();

    // Replaced with garbage: the authentication error, without the token in the text.
    write("not-a-jwt");
    let e = c.jobs(None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert!(!e.to_string().contains("not-a-jwt"));

    write(&fresh);
    c.jobs(None).await.unwrap();

    // A static bad token: HTTP 511 with Slurm's 1007.
    let bad = Client::builder(inst.rest_url())
        .token(TokenProvider::Static("eyJhbGciOiJIUzI1NiJ9.e30.bad".into()))
        .build()
        .unwrap();
    let e = bad.jobs(None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert_eq!(e.http_status(), Some(511));
    assert!(
        e.has_error_number(errno::PROTOCOL_AUTHENTICATION_ERROR),
        "{e}"
    );
    assert!(!e.to_string().contains("eyJhbGciOiJIUzI1NiJ9"), "{e}");

    // No token at all.
    let none = Client::builder(inst.rest_url()).build().unwrap();
    let e = none.jobs(None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert_eq!(e.http_status(), Some(401));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmrestd_outage_is_transient_and_the_client_recovers() {
    let inst = std::sync::Arc::new(start(0));
    let c = client(&inst);
    c.ping().await.unwrap();

    let inst2 = inst.clone();
    tokio::task::spawn_blocking(move || inst2.stop_slurmrestd())
        .await
        .unwrap()
        .unwrap();
    let no_retry = Client::builder(inst.rest_url())
        .token(TokenProvider::file(inst.token_file()))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let e = no_retry.jobs(None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(e.is_transient());
    assert_eq!(e.http_status(), None);

    // A call made while slurmrestd is down succeeds once it is back, through retries.
    let patient = Client::builder(inst.rest_url())
        .token(TokenProvider::file(inst.token_file()))
        .retry(RetryPolicy {
            max_retries: 60,
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
        })
        .build()
        .unwrap();
    let pending = tokio::spawn(async move { patient.nodes().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let inst2 = inst.clone();
    tokio::task::spawn_blocking(move || inst2.start_slurmrestd())
        .await
        .unwrap()
        .unwrap();
    pending.await.unwrap().unwrap();
    // The same client that failed works again.
    no_retry.jobs(None).await.unwrap();
    c.ping().await.unwrap();
}
