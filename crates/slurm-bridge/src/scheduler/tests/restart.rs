//! A restarted scheduler, which remembers nothing it sent, on the jobs the one before submitted.

use super::*;

/// The first pass of `a` after a restart, on job `FIRST_SUBMITTED_ID` as Slurm holds it (pending
/// with a reason) once `edit` changed it: the Slurm calls it made.
async fn pass_after_restart(edit: impl FnOnce(&mut slurm_rest::models::JobInfo)) -> Vec<String> {
    let h = Harness::new(World::nodes(&["n1"]).with(pod("a")).then(Step::Pass("a"))).await;
    let mut info = h.slurm.job_info(FIRST_SUBMITTED_ID).expect("submitted");
    info.state_reason = Some("Resources".into());
    edit(&mut info);
    h.slurm.set_job(info);
    // The restart: no description sent is remembered; the index is read back from Slurm.
    h.ctx.sent.lock().unwrap().clear();
    h.ctx
        .watcher
        .refresh(FIRST_SUBMITTED_ID)
        .await
        .expect("job read back");
    h.pass("a").await.slurm
}

/// The job's admin_comment carries the hash of its description, so a restart costs no update
/// per pending job (1,777 of 1,800 pending jobs were updated after a restart before).
#[tokio::test]
async fn a_restarted_scheduler_sends_no_update_for_an_unchanged_pending_job() {
    assert_eq!(pass_after_restart(|_| {}).await, Vec::<String>::new());
}

/// A hash that is not the description's (the description changed while no scheduler ran): the
/// update is sent, as for a job whose comment carries none.
#[tokio::test]
async fn a_restarted_scheduler_updates_a_job_whose_description_hash_differs() {
    let calls = pass_after_restart(|info| {
        let comment = info.admin_comment.as_deref().expect("admin_comment");
        let mut comment =
            crate::workload::admin_comment::AdminComment::decode(comment).expect("bridge comment");
        assert!(comment.desc_hash().is_some(), "the submit stamped its hash");
        comment = comment.with_desc_hash(1);
        info.admin_comment = Some(comment.encode());
    })
    .await;
    assert_eq!(calls, [format!("update {FIRST_SUBMITTED_ID} ns/a")]);
}
