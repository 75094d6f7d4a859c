//! Real slurmrestd 26.05 answers (tests/fixtures/, see its README) decoded through the client:
//! each test serves recorded bodies with their recorded HTTP status and calls the client.

mod common;

use common::{answer, fixture, mock};
use slurm_rest::models::*;
use slurm_rest::{Client, ErrorKind, RetryPolicy, errno};

async fn client_for(answers: Vec<common::Answer>) -> (Client, common::Mock) {
    let m = mock(answers).await;
    let c = Client::builder(&m.url)
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    (c, m)
}

#[tokio::test]
async fn running_external_job() {
    let (c, _m) = client_for(vec![answer(200, "job_running.json")]).await;
    let j = c.job(3).await.unwrap();
    assert_eq!(j.job_id, 3);
    assert_eq!(j.job_state, [JobState::Running]);
    assert!(j.is_running() && !j.is_pending());
    assert!(j.flags.contains(&JobFlag::ExternalJob));
    assert_eq!(j.nodes.as_deref(), Some("node-2"));
    assert_eq!(
        j.admin_comment.as_deref(),
        Some(r#"{"pods":["ns/p3","ns/p4"]}"#)
    );
    assert_eq!(j.resv_name.as_deref(), Some("fx-resv"));
    assert_eq!(j.partition.as_deref(), Some("slurm-bridge"));
    assert_eq!(j.cpus_per_task, NoVal::Set(2));
    assert_eq!(j.memory_per_node, NoVal::Set(1000));
    assert_eq!(j.time_limit, NoVal::Set(5));
    assert_eq!(j.required_nodes.as_deref(), Some("node-2"));
    assert_eq!(j.features.as_deref(), Some("slurm-bridge"));
    assert_eq!(j.user_id, Some(0));
    assert!(j.shared.is_empty());
    assert!(j.start_time.get().is_some());
}

#[tokio::test]
async fn held_pending_job_and_its_update() {
    let (c, _m) = client_for(vec![
        answer(200, "update_pending.json"),
        answer(200, "job_pending.json"),
    ])
    .await;
    let desc = JobDescMsg {
        name: Some("fx-held-renamed".into()),
        time_limit: Some(NoVal::Set(7)),
        ..Default::default()
    };
    let r = c.update_job(2, &desc).await.unwrap();
    assert!(r.results.is_empty(), "results: null decodes as empty");
    let j = c.job(2).await.unwrap();
    assert!(j.is_pending());
    assert_eq!(j.state_reason.as_deref(), Some("JobHeldUser"));
    assert_eq!(j.hold, Some(true));
    assert_eq!(j.name.as_deref(), Some("fx-held-renamed"));
    assert_eq!(j.time_limit, NoVal::Set(7));
    assert_eq!(j.nodes.as_deref(), Some(""));
}

#[tokio::test]
async fn update_of_running_job_is_job_not_pending() {
    let (c, _m) = client_for(vec![
        answer(422, "update_not_pending.json"),
        answer(422, "update_not_supported.json"),
    ])
    .await;
    let e = c.update_job(3, &JobDescMsg::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::JobNotPending);
    assert_eq!(e.http_status(), Some(422));
    assert!(e.has_error_number(errno::JOB_NOT_PENDING));
    assert_eq!(
        e.slurm_errors()[0].source.as_deref(),
        Some("slurm_update_job2()")
    );
    assert!(
        e.to_string().contains("Job is no longer pending execution"),
        "{e}"
    );
    let e = c.update_job(1, &JobDescMsg::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRequest);
    assert!(
        e.to_string()
            .contains("Requested operation not supported on this system"),
        "{e}"
    );
}

#[tokio::test]
async fn missing_job_is_not_found() {
    let (c, _m) = client_for(vec![answer(404, "job_missing.json")]).await;
    let e = c.job(999999).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!(e.slurm_errors()[0].error_number, Some(2017));
    assert!(e.to_string().contains("Invalid job id specified"), "{e}");
    assert!(
        e.to_string().contains("Unable to query JobId=999999"),
        "{e}"
    );
}

/// An answer listing only another job (job_running.json is job 3) is not the job asked for.
#[tokio::test]
async fn an_answer_without_the_job_asked_for_is_not_found_not_another_job() {
    let (c, _m) = client_for(vec![answer(200, "job_running.json")]).await;
    let e = c.job(4).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[tokio::test]
async fn cancelled_job_and_cancel_answers() {
    let (c, _m) = client_for(vec![
        answer(200, "cancel.json"),
        answer(200, "cancel_already_done.json"),
        answer(200, "cancel_missing.json"),
        answer(200, "job_cancelled.json"),
    ])
    .await;
    c.cancel_job(2, None, None).await.unwrap();
    let e = c.cancel_job(2, None, None).await.unwrap_err();
    assert!(e.has_error_number(errno::ALREADY_DONE), "{e}");
    assert!(
        e.to_string().contains("already completing or completed"),
        "{e}"
    );
    let e = c.cancel_job(999999, None, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let j = c.job(2).await.unwrap();
    assert_eq!(j.job_state, [JobState::Cancelled]);
}

#[tokio::test]
async fn jobs_list_update_time_and_states() {
    let (c, _m) = client_for(vec![
        answer(200, "jobs.json"),
        answer(200, "jobs_unchanged.json"),
        answer(200, "jobs_state.json"),
    ])
    .await;
    let all = c.jobs(None).await.unwrap();
    assert_eq!(all.jobs.len(), 3);
    assert!(all.last_update.get().is_some_and(|t| t > 1_700_000_000));
    let ids: Vec<u32> = all.jobs.iter().map(|j| j.job_id).collect();
    assert_eq!(ids, [1, 2, 3]);
    let unchanged = c
        .jobs(all.last_update.get().map(|t| t as i64))
        .await
        .unwrap();
    assert!(unchanged.jobs.is_empty());
    assert!(
        unchanged.warnings[0]
            .description
            .as_deref()
            .unwrap()
            .contains("No job changes")
    );
    let states = c.job_states().await.unwrap();
    assert_eq!(states.len(), 3);
    assert_eq!(states[0].job_id, 1);
    assert_eq!(states[0].id, "1");
    assert!(states[0].is_plain_job());
    assert_eq!(states[1].state, [JobState::Cancelled]);
    assert_eq!(states[2].state, [JobState::Running]);
}

#[tokio::test]
async fn submit_answer() {
    let (c, m) = client_for(vec![answer(200, "submit.json")]).await;
    let desc = JobDescMsg {
        flags: Some(vec![JobFlag::ExternalJob]),
        nodes: Some("1".into()),
        ..Default::default()
    };
    let r = c.submit_job(&desc).await.unwrap();
    assert_eq!(r.job_id, 3);
    assert_eq!(r.step_id.as_deref(), Some("batch"));
    assert_eq!(
        m.seen.lock().unwrap()[0].body,
        r#"{"job":{"flags":["EXTERNAL_JOB"],"nodes":"1"}}"#
    );
}

#[tokio::test]
async fn resource_layout() {
    let (c, _m) = client_for(vec![
        answer(200, "resources.json"),
        answer(422, "resources_not_running.json"),
    ])
    .await;
    let r = c.job_resources(3).await.unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].node, "node-2");
    assert_eq!(r[0].sockets_per_node, Some(8));
    assert_eq!(r[0].cores_per_socket, Some(1));
    assert_eq!(r[0].mem_alloc, Some(1000));
    assert_eq!(r[0].core_bitmap.as_deref(), Some("0x03"));
    assert_eq!(r[0].channel, NoVal::Unset);
    assert!(r[0].gres.is_empty());
    let e = c.job_resources(2).await.unwrap_err();
    assert!(e.has_error_number(errno::JOB_NOT_RUNNING));
    assert!(e.to_string().contains("Job is not running"), "{e}");
}

#[tokio::test]
async fn nodes_and_node_states() {
    let (c, _m) = client_for(vec![
        answer(200, "nodes.json"),
        answer(200, "node_drained.json"),
        answer(200, "node_updated.json"),
        answer(200, "node_missing.json"),
    ])
    .await;
    let nodes = c.nodes().await.unwrap();
    assert_eq!(nodes.len(), 2);
    let n1 = &nodes[0];
    assert_eq!(n1.name, "node-1");
    assert!(n1.has_state(&NodeState::External));
    assert_eq!(n1.features, ["slurm-bridge"]);
    assert_eq!(n1.partitions, ["slurm-bridge"]);
    assert_eq!(n1.address.as_deref(), Some("127.0.0.1"));
    assert_eq!(n1.cpus, Some(8));
    assert_eq!(n1.real_memory, Some(16000));
    let d = c.node("fx-9").await.unwrap();
    assert!(d.has_state(&NodeState::Drain));
    assert_eq!(d.reason.as_deref(), Some("fixture drain"));
    let u = c.node("fx-9").await.unwrap();
    assert!(!u.has_state(&NodeState::Drain));
    assert_eq!(u.features, ["slurm-bridge", "gpu"]);
    assert_eq!(u.active_features, ["slurm-bridge", "gpu"]);
    assert_eq!(u.topology.as_deref(), Some("default:s1"));
    // 200 with `nodes: null` and an "error 0" entry: not found.
    let e = c.node("nope").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn node_write_errors() {
    let (c, _m) = client_for(vec![
        answer(422, "node_create_duplicate.json"),
        answer(422, "node_delete_missing.json"),
    ])
    .await;
    let e = c
        .create_node("NodeName=fx-9 NodeAddr=127.0.0.1 State=EXTERNAL")
        .await
        .unwrap_err();
    assert!(e.has_error_number(errno::NODE_ALREADY_EXISTS), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidRequest);
    assert!(e.to_string().contains("Node already exists"), "{e}");
    let e = c.delete_node("fx-9").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("Invalid node name specified"), "{e}");
}

#[tokio::test]
async fn partitions_and_reservations() {
    let (c, _m) = client_for(vec![
        answer(200, "partitions.json"),
        answer(200, "partition_missing.json"),
        answer(200, "reservations.json"),
        answer(200, "ping.json"),
    ])
    .await;
    let p = c.partitions().await.unwrap();
    assert_eq!(p[0].name, "slurm-bridge");
    assert_eq!(p[0].nodes.configured.as_deref(), Some("node-[1-2]"));
    assert_eq!(p[0].nodes.total, Some(2));
    assert_eq!(p[0].partition.state, [PartitionState::Up]);
    assert_eq!(p[0].maximums.time, NoVal::Infinite);
    assert_eq!(
        slurm_rest::hostlist::expand(p[0].nodes.configured.as_deref().unwrap()).unwrap(),
        ["node-1", "node-2"]
    );
    assert_eq!(
        c.partition("nope").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let r = c.reservations().await.unwrap();
    assert_eq!(r[0].name, "fx-resv");
    assert_eq!(r[0].node_list.as_deref(), Some("node-2"));
    assert!(r[0].flags.contains(&ReservationFlag::IgnoreJobs));
    assert!(r[0].end_time.get() > r[0].start_time.get());
    let pings = c.ping().await.unwrap();
    assert!(pings[0].responding);
}

#[tokio::test]
async fn authentication_failures() {
    let (c, _m) = client_for(vec![
        answer(511, "bad_token.json"),
        answer(401, "no_token.txt"),
    ])
    .await;
    let e = c.jobs(None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication);
    assert_eq!(e.http_status(), Some(511));
    assert!(e.has_error_number(errno::PROTOCOL_AUTHENTICATION_ERROR));
    assert!(
        e.to_string().contains("Protocol authentication error"),
        "{e}"
    );
    let e = c.jobs(None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication);
    assert!(e.to_string().contains("Authentication failure"), "{e}");
}

#[test]
fn every_fixture_is_listed_and_decodes_as_json() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let readme = fixture("README.md");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name == "README.md" {
            continue;
        }
        assert!(readme.contains(&name), "{name} missing from the README");
        if name.ends_with(".json") {
            let v: serde_json::Value = serde_json::from_str(&fixture(&name)).unwrap();
            assert!(v.get("meta").is_some(), "{name}");
        }
    }
}
