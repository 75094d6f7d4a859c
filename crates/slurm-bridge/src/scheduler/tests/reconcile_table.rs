//! The table: one row per branch of `reconcile` (and of the functions it calls).
//!
//! A row names a world, the pod whose pass is tested, the Slurm writes in order, the Kubernetes
//! writes as a set, and the action. Writes are named as the fakes describe them:
//! `submit ns/a,ns/b [excluding n3]`, `update 7 ns/a`, `cancel 7`; `label ns/a 7`,
//! `unlabel ns/a`, `finalizer- ns/a`, `bind ns/a n1`, `condition ns/a Reason`,
//! `event ns/a Reason` (Normal), `warning ns/a Reason` (Warning), `podgroup ns/pg Type=Status`.
//! Jobs the fake Slurm creates are numbered from 100 ([`FIRST_SUBMITTED_ID`]).

use super::fake_slurm::SlurmFailure;
use super::*;
use crate::wellknown::ANNOTATION_SLURM_NODE;

const FIRST_RETRY: Duration = Duration::from_millis(500);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A world of two Ready nodes and the bare pod `ns/a`.
fn one_pod() -> World {
    World::nodes(&["n1", "n2"]).with(pod("a"))
}

/// A world of three nodes and the built-in PodGroup `pg` (gang of `min`) with these pods.
fn gang(min: i32, pods: &[&str]) -> World {
    let mut w = World::nodes(&["n1", "n2", "n3"]).with(podgroup("pg", Some(min)));
    for p in pods {
        w = w.with(pod(p).in_podgroup("pg"));
    }
    w
}

#[tokio::test]
async fn early_exits() {
    check_rows(&[
        Row {
            name: "a standby does nothing",
            world: || one_pod().not_leader(),
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Await,
        },
        Row {
            name: "a pass that starts once a shutdown has begun does nothing",
            world: || one_pod().stopping(),
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Await,
        },
        Row {
            name: "a bound pod is left alone",
            world: || World::nodes(&["n1"]).with(pod("a").bound_to("n1")),
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Await,
        },
        Row {
            name: "a finished pod is left alone",
            world: || World::nodes(&["n1"]).with(pod("a").phase("Succeeded")),
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Await,
        },
        Row {
            name: "a bound pod being deleted is the pod controller's",
            world: || {
                World::nodes(&["n1"])
                    .with(pod("a").bound_to("n1").deleting().job_label(7))
                    .job(job(7, "pod/ns/a", &["a"]).running("n1"))
            },
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Await,
        },
        Row {
            name: "a gated pod is not submitted",
            world: || one_pod().with(pod("a").gated()),
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Await,
        },
        Row {
            name: "a gated member holds back its whole group",
            world: || gang(2, &["a"]).with(pod("b").in_podgroup("pg").gated()),
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Await,
        },
    ])
    .await;
}

#[tokio::test]
async fn translation_failures() {
    check_rows(&[
        Row {
            name: "a missing owner is TranslationFailed, looked at again in 30 s",
            world: || one_pod().with(pod("a").of_job("gone")),
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a TranslationFailed",
                "warning ns/a TranslationFailed",
            ],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "an invalid annotation is InvalidAnnotation",
            world: || {
                one_pod().with(pod("a").annotation("slurmjob.slinky.slurm.net/timelimit", "x"))
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a InvalidAnnotation",
                "warning ns/a InvalidAnnotation",
            ],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "a failure already shown is not written again",
            world: || {
                one_pod()
                    .with(pod("a").of_job("gone"))
                    .then(Step::Pass("a"))
            },
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "a transient read error is shown and retried with backoff",
            world: || {
                one_pod()
                    .with(batch_job("j"))
                    .with(pod("a").of_job("j"))
                    .fault(Fault::Kube(Method::GET, "/jobs/j", 500))
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a TranslationFailed",
                "warning ns/a TranslationFailed",
            ],
            action: Expect::Failed {
                error: "Job ns/j",
                retry: FIRST_RETRY,
            },
        },
    ])
    .await;
}

#[tokio::test]
async fn gangs() {
    check_rows(&[
        Row {
            name: "an incomplete gang waits, without a job",
            world: || gang(3, &["a", "b"]),
            pod: "a",
            slurm: &[],
            kube: &["condition ns/a WaitingForGang", "event ns/a WaitingForGang"],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "a complete gang is submitted as one job and every member labelled",
            world: || gang(2, &["a", "b"]),
            pod: "b",
            slurm: &["submit ns/a,ns/b"],
            kube: &["label ns/a 100", "label ns/b 100"],
            action: Expect::Requeue(secs(60)),
        },
        // fault 2: a gang that lost members while pending gets a new job; its pending job is
        // cancelled (and its members' labels cleared) until the gang is complete again.
        Row {
            name: "a pending gang below its minimum loses its job",
            world: || {
                gang(3, &["a", "b"])
                    .with(pod("a").in_podgroup("pg").job_label(7))
                    .with(pod("b").in_podgroup("pg").job_label(7))
                    .job(job(7, "podgroup/ns/pg", &["a", "b", "c"]))
            },
            pod: "a",
            slurm: &["cancel 7"],
            kube: &[
                "unlabel ns/a",
                "unlabel ns/b",
                "condition ns/a WaitingForGang",
                "event ns/a WaitingForGang",
            ],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "a closed coscheduling PodGroup admits no new job",
            world: || {
                World::nodes(&["n1", "n2"])
                    .with(coscheduling_podgroup("pg", 2, "Finished"))
                    .with(pod("a").in_coscheduling("pg"))
                    .with(pod("b").in_coscheduling("pg"))
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a PodGroupClosed",
                "warning ns/a PodGroupClosed",
            ],
            action: Expect::Requeue(secs(30)),
        },
        // fault 1: a closed PodGroup refuses new pods; its running gang is left alone.
        Row {
            name: "a closed coscheduling PodGroup leaves its running gang alone",
            world: || {
                World::nodes(&["n1", "n2", "n3"])
                    .with(coscheduling_podgroup("pg", 2, "Running"))
                    .with(pod("a").in_coscheduling("pg").labelled(7).bound_to("n1"))
                    .with(pod("b").in_coscheduling("pg").labelled(7).bound_to("n2"))
                    .with(pod("c").in_coscheduling("pg"))
                    .job(job(7, "coscheduling/ns/pg", &["a", "b"]).running("n[1-2]"))
            },
            pod: "c",
            slurm: &[],
            kube: &[
                "condition ns/c PodGroupClosed",
                "warning ns/c PodGroupClosed",
            ],
            action: Expect::Requeue(secs(30)),
        },
        // fault 2: a running gang is the controllers' business: not cancelled, its pods bound.
        Row {
            name: "a running gang below its minimum is not cancelled",
            world: || {
                gang(3, &[])
                    .with(pod("a").in_podgroup("pg").labelled(7).bound_to("n1"))
                    .with(pod("b").in_podgroup("pg").labelled(7))
                    .job(job(7, "podgroup/ns/pg", &["a", "b", "c"]).running("n[1-3]"))
            },
            pod: "b",
            slurm: &[],
            kube: &[
                "bind ns/b n2",
                "event ns/b Scheduled",
                "podgroup ns/pg PodGroupScheduled=True",
            ],
            action: Expect::Await,
        },
        // fault 2: only a pass of one of the job's own pods cancels a shrunk gang's job.
        Row {
            name: "a new pod of a gang that shrank while pending does not cancel its job",
            world: || {
                gang(3, &["d"])
                    .with(pod("a").in_podgroup("pg").labelled(7))
                    .job(job(7, "podgroup/ns/pg", &["a", "b", "c"]))
            },
            pod: "d",
            slurm: &[],
            kube: &["condition ns/d WaitingForGang", "event ns/d WaitingForGang"],
            action: Expect::Requeue(secs(30)),
        },
        // fault 13: a cancel that fails is shown on the pod.
        Row {
            name: "a failed cancel of a shrunk gang's job is SlurmCancelFailed",
            world: || {
                gang(3, &[])
                    .with(pod("a").in_podgroup("pg").labelled(7))
                    .with(pod("b").in_podgroup("pg").labelled(7))
                    .job(job(7, "podgroup/ns/pg", &["a", "b", "c"]))
                    .fault(Fault::Cancel(SlurmFailure::Unreachable))
            },
            pod: "a",
            slurm: &["cancel 7"],
            kube: &[
                "condition ns/a SlurmCancelFailed",
                "warning ns/a SlurmCancelFailed",
            ],
            action: Expect::Failed {
                error: "connection refused",
                retry: FIRST_RETRY,
            },
        },
        // fault 3: minMember below the group size: the job needs minMember nodes.
        Row {
            name: "a coscheduling group larger than the nodes is submitted for its minMember",
            world: || {
                World::nodes(&["n1", "n2"])
                    .with(coscheduling_podgroup("pg", 2, "Pending"))
                    .with(pod("a").in_coscheduling("pg"))
                    .with(pod("b").in_coscheduling("pg"))
                    .with(pod("c").in_coscheduling("pg"))
            },
            pod: "a",
            slurm: &["submit ns/a,ns/b,ns/c"],
            kube: &["label ns/a 100", "label ns/b 100", "label ns/c 100"],
            action: Expect::Requeue(secs(60)),
        },
        Row {
            name: "a coscheduling gang at minMember is submitted",
            world: || {
                World::nodes(&["n1", "n2"])
                    .with(coscheduling_podgroup("pg", 2, "Pending"))
                    .with(pod("a").in_coscheduling("pg"))
                    .with(pod("b").in_coscheduling("pg"))
            },
            pod: "a",
            slurm: &["submit ns/a,ns/b"],
            kube: &["label ns/a 100", "label ns/b 100"],
            action: Expect::Requeue(secs(60)),
        },
    ])
    .await;
}

#[tokio::test]
async fn submits() {
    check_rows(&[
        Row {
            name: "asks the tenant refuses are never submitted (a pod that skipped the webhook)",
            world: || {
                one_pod().with(
                    pod("a")
                        .annotation("slurmjob.slinky.slurm.net/user-id", "4242")
                        .annotation("slurmjob.slinky.slurm.net/priority", "4294967293"),
                )
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a NotAllowedByTenant",
                "warning ns/a NotAllowedByTenant",
            ],
            action: Expect::Requeue(crate::scheduler::rejection::RETRY_AFTER),
        },
        Row {
            name: "a pending job whose pod now asks what the tenant refuses keeps its description",
            world: || {
                one_pod()
                    .with(
                        pod("a")
                            .labelled(7)
                            .annotation("slurmjob.slinky.slurm.net/qos", "urgent"),
                    )
                    .job(job(7, "pod/ns/a", &["a"]).reason("Priority"))
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a NotAllowedByTenant",
                "warning ns/a NotAllowedByTenant",
            ],
            action: Expect::Requeue(crate::scheduler::rejection::RETRY_AFTER),
        },
        Row {
            name: "no job: submit, then label the pod",
            world: one_pod,
            pod: "a",
            slurm: &["submit ns/a"],
            kube: &["label ns/a 100"],
            action: Expect::Requeue(secs(60)),
        },
        Row {
            name: "a pod of a batch Job is submitted on its own",
            world: || one_pod().with(batch_job("j")).with(pod("a").of_job("j")),
            pod: "a",
            slurm: &["submit ns/a"],
            kube: &["label ns/a 100"],
            action: Expect::Requeue(secs(60)),
        },
        Row {
            name: "nodes the pod cannot use are excluded",
            world: || {
                World::nodes(&["n2", "n3"])
                    .with(node("n1").label("zone", "a"))
                    .with(pod("a").node_selector("zone", "a"))
            },
            pod: "a",
            slurm: &["submit ns/a excluding n[2-3]"],
            kube: &["label ns/a 100"],
            action: Expect::Requeue(secs(60)),
        },
        Row {
            name: "no feasible node: NoFeasibleNodes, no job",
            world: || World::default().with(node("n1").not_ready()).with(pod("a")),
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a NoFeasibleNodes",
                "warning ns/a NoFeasibleNodes",
            ],
            action: Expect::Requeue(secs(10)),
        },
        Row {
            name: "a pod larger than every node is not submitted",
            world: || one_pod().with(pod("a").cpu("16")),
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a NoFeasibleNodes",
                "warning ns/a NoFeasibleNodes",
            ],
            action: Expect::Requeue(secs(10)),
        },
        Row {
            name: "a stale job label is replaced by the new job's",
            world: || {
                one_pod().with(
                    pod("a")
                        .job_label(5)
                        .annotation(ANNOTATION_SLURM_NODE, "n2"),
                )
            },
            pod: "a",
            slurm: &["submit ns/a"],
            kube: &["label ns/a 100"],
            action: Expect::Requeue(secs(60)),
        },
        Row {
            name: "Slurm unreachable: SlurmUnavailable and backoff",
            world: || one_pod().fault(Fault::Submit(SlurmFailure::Unreachable)),
            pod: "a",
            slurm: &["submit ns/a"],
            kube: &[
                "condition ns/a SlurmUnavailable",
                "warning ns/a SlurmUnavailable",
            ],
            action: Expect::Failed {
                error: "connection refused",
                retry: FIRST_RETRY,
            },
        },
        // fault 4: a permanent rejection waits with Slurm's text, not retried every few seconds.
        Row {
            name: "a job Slurm rejects for good waits with Slurm's text",
            world: || one_pod().fault(Fault::Submit(SlurmFailure::NodeConfigUnavailable)),
            pod: "a",
            slurm: &["submit ns/a"],
            kube: &[
                "condition ns/a SlurmSubmitFailed",
                "warning ns/a SlurmSubmitFailed",
            ],
            action: Expect::Requeue(secs(300)),
        },
        // fault 4
        Row {
            name: "a rejected job is not sent again while nothing changes",
            world: || {
                one_pod()
                    .then(Step::Fault(Fault::Submit(
                        SlurmFailure::NodeConfigUnavailable,
                    )))
                    .then(Step::Pass("a"))
                    .then(Step::Heal)
            },
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::RequeueWithin(secs(300)),
        },
        // fault 4
        Row {
            name: "a rejected job is sent again when its group changes",
            world: || {
                World::nodes(&["n1", "n2"])
                    .with(podgroup("pg", None))
                    .with(pod("a").in_podgroup("pg"))
                    .then(Step::Fault(Fault::Submit(
                        SlurmFailure::NodeConfigUnavailable,
                    )))
                    .then(Step::Pass("a"))
                    .then(Step::Heal)
                    .then(Step::Put(pod("b").in_podgroup("pg")))
            },
            pod: "a",
            slurm: &["submit ns/a,ns/b"],
            kube: &["label ns/a 100", "label ns/b 100"],
            action: Expect::Requeue(secs(60)),
        },
        Row {
            name: "a job found by its group is not submitted again",
            world: || one_pod().then(Step::Pass("a")),
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "a job of the Go original is found by its pods",
            world: || one_pod().job(job(7, "", &["a"]).without_group().running("n2")),
            pod: "a",
            slurm: &[],
            kube: &["label ns/a 7", "bind ns/a n2", "event ns/a Scheduled"],
            action: Expect::Await,
        },
        Row {
            name: "of duplicate jobs the allocated one is kept, the other cancelled",
            world: || {
                one_pod()
                    .job(job(7, "pod/ns/a", &["a"]))
                    .job(job(8, "pod/ns/a", &["a"]).running("n1"))
            },
            pod: "a",
            slurm: &["cancel 7"],
            kube: &["label ns/a 8", "bind ns/a n1", "event ns/a Scheduled"],
            action: Expect::Await,
        },
    ])
    .await;
}

#[tokio::test]
async fn pending_jobs() {
    check_rows(&[
        Row {
            name: "a job this replica did not submit is updated once, and its reason shown",
            world: || {
                one_pod()
                    .with(pod("a").labelled(7))
                    .job(job(7, "pod/ns/a", &["a"]).reason("Priority"))
            },
            pod: "a",
            slurm: &["update 7 ns/a"],
            kube: &[
                "condition ns/a SlurmJobPending",
                "event ns/a SlurmJobPending",
            ],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "an unchanged pending job is not updated nor reported again",
            world: || {
                one_pod()
                    .job(job(7, "pod/ns/a", &["a"]).reason("Priority"))
                    .then(Step::Pass("a"))
            },
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "a just-submitted job is not reported pending yet",
            world: || {
                one_pod().then(Step::Pass("a")).then(Step::Job(
                    job(FIRST_SUBMITTED_ID, "pod/ns/a", &["a"]).reason("Resources"),
                ))
            },
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::RequeueWithin(secs(5)),
        },
        Row {
            name: "a new member is added to the pending job",
            world: || {
                World::nodes(&["n1", "n2"])
                    .with(podgroup("pg", None))
                    .with(pod("a").in_podgroup("pg"))
                    .then(Step::Pass("a"))
                    .then(Step::Put(pod("b").in_podgroup("pg")))
            },
            pod: "a",
            slurm: &["update 100 ns/a,ns/b"],
            kube: &["label ns/b 100"],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "a job that started under the update is bound from Slurm's answer",
            world: || {
                one_pod()
                    .job(job(7, "pod/ns/a", &["a"]))
                    .slurm_has(job(7, "pod/ns/a", &["a"]).running("n1"))
            },
            pod: "a",
            slurm: &["update 7 ns/a"],
            kube: &["label ns/a 7", "bind ns/a n1", "event ns/a Scheduled"],
            action: Expect::Await,
        },
        // fault 4: a permanent rejection waits with Slurm's text, not retried every few seconds.
        Row {
            name: "an update Slurm rejects for good is SlurmSubmitFailed, retried in 5 minutes",
            world: || {
                one_pod()
                    .job(job(7, "pod/ns/a", &["a"]))
                    .fault(Fault::Update(SlurmFailure::NodeConfigUnavailable))
            },
            pod: "a",
            slurm: &["update 7 ns/a"],
            kube: &[
                "condition ns/a SlurmSubmitFailed",
                "warning ns/a SlurmSubmitFailed",
            ],
            action: Expect::Requeue(secs(300)),
        },
        // fault 13: an infeasible placement in pending() is shown, not dropped.
        Row {
            name: "a pending job whose nodes became unusable says so and stays",
            world: || {
                World::default()
                    .with(node("n1").not_ready())
                    .with(pod("a").labelled(7))
                    .job(job(7, "pod/ns/a", &["a"]))
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a NoFeasibleNodes",
                "warning ns/a NoFeasibleNodes",
            ],
            action: Expect::Requeue(secs(10)),
        },
        Row {
            name: "a suspended job keeps its group: no second job, SlurmJobSuspended",
            world: || {
                one_pod()
                    .with(pod("a").labelled(7))
                    .job(job(7, "pod/ns/a", &["a"]).suspended("n1"))
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a SlurmJobSuspended",
                "event ns/a SlurmJobSuspended",
            ],
            action: Expect::Requeue(secs(30)),
        },
        Row {
            name: "a running job without nodes yet is looked at again in 2 s",
            world: || one_pod().job(job(7, "pod/ns/a", &["a"]).state(JobState::Running)),
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Requeue(secs(2)),
        },
    ])
    .await;
}

#[tokio::test]
async fn allocations() {
    check_rows(&[
        Row {
            name: "an allocated pod is labelled, bound and told",
            world: || one_pod().job(job(7, "pod/ns/a", &["a"]).running("n2")),
            pod: "a",
            slurm: &[],
            kube: &["label ns/a 7", "bind ns/a n2", "event ns/a Scheduled"],
            action: Expect::Await,
        },
        Row {
            name: "a labelled pod costs the binding and the Event only",
            world: || {
                one_pod()
                    .with(pod("a").labelled(7))
                    .job(job(7, "pod/ns/a", &["a"]).running("n2"))
            },
            pod: "a",
            slurm: &[],
            kube: &["bind ns/a n2", "event ns/a Scheduled"],
            action: Expect::Await,
        },
        // fault 6: PodGroupScheduled is written once every member is bound.
        Row {
            name: "an allocated gang is bound as a whole and its PodGroup marked",
            world: || {
                gang(2, &["a", "b"]).job(job(7, "podgroup/ns/pg", &["a", "b"]).running("n[1-2]"))
            },
            pod: "b",
            slurm: &[],
            kube: &[
                "label ns/a 7",
                "label ns/b 7",
                "bind ns/a n1",
                "bind ns/b n2",
                "event ns/a Scheduled",
                "event ns/b Scheduled",
                "podgroup ns/pg PodGroupScheduled=True",
            ],
            action: Expect::Await,
        },
        Row {
            name: "a pod keeps the node it is annotated with",
            world: || {
                World::nodes(&["n1", "n2", "n3"])
                    .with(podgroup("pg", None))
                    .with(pod("a").in_podgroup("pg").labelled(7))
                    .with(
                        pod("b")
                            .in_podgroup("pg")
                            .labelled(7)
                            .annotation(ANNOTATION_SLURM_NODE, "n1"),
                    )
                    .job(job(7, "podgroup/ns/pg", &["a", "b"]).running("n[1,3]"))
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "bind ns/a n3",
                "bind ns/b n1",
                "event ns/a Scheduled",
                "event ns/b Scheduled",
                "podgroup ns/pg PodGroupScheduled=True",
            ],
            action: Expect::Await,
        },
        Row {
            name: "a pod the cache shows unbound but bound to that node is not bound twice",
            world: || {
                one_pod()
                    .with(pod("a").labelled(7).bound_to("n2"))
                    .given(pod("a").labelled(7))
                    .job(job(7, "pod/ns/a", &["a"]).running("n2"))
            },
            pod: "a",
            slurm: &[],
            kube: &["bind ns/a n2"],
            action: Expect::Await,
        },
        // fault 3 and 6: what fits is bound; the PodGroup is not marked before every pod is.
        Row {
            name: "an allocation of fewer nodes than pods binds what fits",
            world: || {
                World::nodes(&["n1", "n2"])
                    .with(podgroup("pg", None))
                    .with(pod("a").in_podgroup("pg").labelled(7))
                    .with(pod("b").in_podgroup("pg").labelled(7))
                    .job(job(7, "podgroup/ns/pg", &["a", "b"]).running("n1"))
            },
            pod: "a",
            slurm: &[],
            kube: &["bind ns/a n1", "event ns/a Scheduled"],
            action: Expect::Await,
        },
        // fault 5: a member that arrives after the allocation is told, and gets a job of its own
        // (as the coscheduling plugin schedules pods beyond minMember).
        Row {
            name: "a member that arrives after the allocation gets a job of its own",
            world: || {
                World::nodes(&["n1", "n2"])
                    .with(podgroup("pg", None))
                    .with(pod("a").in_podgroup("pg").labelled(7).bound_to("n1"))
                    .with(pod("b").in_podgroup("pg"))
                    .job(job(7, "podgroup/ns/pg", &["a"]).running("n1"))
            },
            pod: "b",
            slurm: &["submit ns/b"],
            kube: &[
                "condition ns/b OutsideGroupAllocation",
                "warning ns/b OutsideGroupAllocation",
                "label ns/b 100",
            ],
            action: Expect::Requeue(secs(60)),
        },
        // fault 6
        Row {
            name: "a PodGroup already marked scheduled is not written again",
            world: || {
                gang(2, &[])
                    .with(podgroup("pg", Some(2)).set(
                        "/status/conditions",
                        json!([{"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
                    ))
                    .with(pod("a").in_podgroup("pg").labelled(7).bound_to("n1"))
                    .with(pod("b").in_podgroup("pg").labelled(7))
                    .job(job(7, "podgroup/ns/pg", &["a", "b"]).running("n[1-2]"))
            },
            pod: "b",
            slurm: &[],
            kube: &["bind ns/b n2", "event ns/b Scheduled"],
            action: Expect::Await,
        },
        Row {
            name: "a Slurm node without a Kubernetes node is SlurmAllocationUnmapped",
            world: || one_pod().job(job(7, "pod/ns/a", &["a"]).running("x9")),
            pod: "a",
            slurm: &[],
            kube: &[
                "condition ns/a SlurmAllocationUnmapped",
                "warning ns/a SlurmAllocationUnmapped",
            ],
            action: Expect::Failed {
                error: "x9",
                retry: FIRST_RETRY,
            },
        },
    ])
    .await;
}

#[tokio::test]
async fn deleted_before_bound() {
    check_rows(&[
        Row {
            name: "the last pod of a job deleted before it ran cancels the job",
            world: || {
                World::nodes(&["n1"])
                    .with(pod("a").deleting().job_label(7))
                    .job(job(7, "pod/ns/a", &["a"]))
            },
            pod: "a",
            slurm: &["cancel 7"],
            kube: &["finalizer- ns/a"],
            action: Expect::Await,
        },
        Row {
            name: "a job another live member still needs is kept",
            world: || {
                gang(2, &["b"])
                    .with(pod("a").in_podgroup("pg").deleting().job_label(7))
                    .job(job(7, "podgroup/ns/pg", &["a", "b"]))
            },
            pod: "a",
            slurm: &[],
            kube: &["finalizer- ns/a"],
            action: Expect::Await,
        },
        Row {
            name: "a job whose other members are finished is cancelled",
            world: || {
                gang(2, &[])
                    .with(pod("a").in_podgroup("pg").deleting().job_label(7))
                    .with(pod("b").in_podgroup("pg").phase("Failed"))
                    .job(job(7, "podgroup/ns/pg", &["a", "b"]))
            },
            pod: "a",
            slurm: &["cancel 7"],
            kube: &["finalizer- ns/a"],
            action: Expect::Await,
        },
        Row {
            name: "a deleted pod without a job only loses the finalizer",
            world: || World::nodes(&["n1"]).with(pod("a").deleting()),
            pod: "a",
            slurm: &[],
            kube: &["finalizer- ns/a"],
            action: Expect::Await,
        },
        Row {
            name: "a deleted pod without the finalizer needs no write",
            world: || {
                World::nodes(&["n1"]).with(
                    pod("a")
                        .deleting()
                        .set("/metadata/finalizers", json!(["other.example.com/keep"])),
                )
            },
            pod: "a",
            slurm: &[],
            kube: &[],
            action: Expect::Await,
        },
        Row {
            name: "a cancel that fails keeps the finalizer and is retried",
            world: || {
                World::nodes(&["n1"])
                    .with(pod("a").deleting().job_label(7))
                    .job(job(7, "pod/ns/a", &["a"]))
                    .fault(Fault::Cancel(SlurmFailure::Unreachable))
            },
            pod: "a",
            slurm: &["cancel 7"],
            kube: &[],
            action: Expect::Failed {
                error: "connection refused",
                retry: FIRST_RETRY,
            },
        },
    ])
    .await;
}

#[tokio::test]
async fn errors_and_backoff() {
    check_rows(&[
        // fault 13: a failed binding is shown on the pod.
        Row {
            name: "a failed binding is BindingFailed and fails the pass",
            world: || {
                one_pod()
                    .job(job(7, "pod/ns/a", &["a"]).running("n1"))
                    .fault(Fault::Kube(Method::POST, "/binding", 500))
            },
            pod: "a",
            slurm: &[],
            kube: &[
                "label ns/a 7",
                "bind ns/a n1",
                "condition ns/a BindingFailed",
                "warning ns/a BindingFailed",
            ],
            action: Expect::Failed {
                error: "injected failure",
                retry: FIRST_RETRY,
            },
        },
        Row {
            name: "a pod deleted under the label patch is not an error",
            world: || one_pod().fault(Fault::Kube(Method::PATCH, "/pods/a", 404)),
            pod: "a",
            slurm: &["submit ns/a"],
            kube: &["label ns/a 100"],
            action: Expect::Requeue(secs(60)),
        },
    ])
    .await;
}

/// error_policy: 0.5 s, doubling per consecutive failure, up to 15 s; a successful pass starts
/// over.
#[tokio::test]
async fn backoff_doubles_per_failure_and_a_success_resets_it() {
    let h = Harness::new(one_pod().fault(Fault::Submit(SlurmFailure::Unreachable))).await;
    let mut delays = Vec::new();
    for _ in 0..7 {
        let out = h.pass("a").await;
        assert!(out.error.is_some());
        delays.push(requeue_after(&out.action).expect("requeued"));
    }
    let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
    assert_eq!(ms, [500, 1000, 2000, 4000, 8000, 15000, 15000]);
    h.slurm.fail_submit(None);
    let ok = h.pass("a").await;
    assert_eq!(ok.error, None);
    assert_eq!(ok.slurm, ["submit ns/a"]);
    h.slurm.fail_submit(Some(SlurmFailure::Unreachable));
    h.slurm.set_job(
        job(FIRST_SUBMITTED_ID, "pod/ns/a", &["a"])
            .state(JobState::Cancelled)
            .info(),
    );
    h.ctx.watcher.record(
        job(FIRST_SUBMITTED_ID, "pod/ns/a", &["a"])
            .state(JobState::Cancelled)
            .watched(),
    );
    let again = h.pass("a").await;
    assert_eq!(requeue_after(&again.action), Some(FIRST_RETRY));
}

/// The harness itself: a submit goes through the fakes as production sends it.
#[tokio::test]
async fn the_fakes_see_what_the_scheduler_sends() {
    let h = Harness::new(one_pod()).await;
    let out = h.pass("a").await;
    assert_eq!(out.slurm, ["submit ns/a"]);
    let writes = h.kube.raw_writes();
    assert_eq!(writes.len(), 1);
    let label = &writes[0];
    assert_eq!(label.method, "PATCH");
    assert!(label.content_type.contains("strategic-merge-patch"));
    let a = h.pod("a");
    assert_eq!(
        a.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SLURM_JOBID)),
        Some(&FIRST_SUBMITTED_ID.to_string())
    );
    assert_eq!(
        a.metadata.finalizers.as_deref(),
        Some(&[FINALIZER.to_string()][..])
    );
    let info = h.slurm.job_info(FIRST_SUBMITTED_ID).expect("job");
    assert_eq!(info.job_state, [JobState::Pending]);
    let fake_slurm::SlurmCall::Submit(desc) = &h.slurm.raw_calls()[0] else {
        panic!("a submit");
    };
    assert_eq!(desc.admin_comment, info.admin_comment);
}

/// A submit whose answer is lost (Slurm made the job): the group is not submitted again before
/// the job watcher has listed Slurm's jobs since; then the pass finds the job and submits
/// nothing. Without the wait, the pass right after would submit a second job.
#[tokio::test]
async fn a_submit_whose_answer_is_lost_is_not_doubled() {
    let h = Harness::new(one_pod().fault(Fault::Submit(SlurmFailure::AnswerLost))).await;
    let first = h.pass("a").await;
    assert_eq!(first.slurm, ["submit ns/a"]);
    assert!(first.error.is_some());
    h.slurm.fail_submit(None);

    // Before any listing: the pass waits (asks the watcher to poll) and submits nothing.
    let waits = h.pass("a").await;
    assert_eq!(waits.error, None);
    assert!(waits.slurm.is_empty(), "{:?}", waits.slurm);
    assert_eq!(
        requeue_after(&waits.action),
        Some(Duration::from_millis(200))
    );
    assert_eq!(h.ctx.metrics.submit_waits_for_listing.get(), 1);
    // A listing that started before the doubt's margin does not count.
    h.ctx.watcher.poll_once().await.unwrap();
    assert!(h.pass("a").await.slurm.is_empty());

    // A listing started after it: the job the lost submit made is found, nothing is sent.
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(2)).await;
    tokio::time::resume();
    h.ctx.watcher.poll_once().await.unwrap();
    let found = h.pass("a").await;
    assert_eq!(found.error, None);
    assert!(
        !found.slurm.iter().any(|c| c.starts_with("submit")),
        "{:?}",
        found.slurm
    );
    assert_eq!(
        h.slurm
            .calls()
            .iter()
            .filter(|c| c.starts_with("submit"))
            .count(),
        1
    );
    assert_eq!(h.ctx.metrics.submits_in_doubt.get(), 1);
}

/// A refused connection never reached Slurm: no doubt, the retry submits at once.
#[tokio::test]
async fn a_submit_that_never_left_is_retried_without_waiting() {
    let h = Harness::new(one_pod().fault(Fault::Submit(SlurmFailure::Unreachable))).await;
    assert!(h.pass("a").await.error.is_some());
    h.slurm.fail_submit(None);
    let again = h.pass("a").await;
    assert_eq!(again.slurm, ["submit ns/a"]);
    assert_eq!(h.ctx.metrics.submits_in_doubt.get(), 0);
}
