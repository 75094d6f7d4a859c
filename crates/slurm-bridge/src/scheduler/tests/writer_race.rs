//! The writer's memo of its own writes against the order in which the pod cache applies them,
//! on the fake API server.

use super::*;
use crate::k8s::slim_pod::Pod;
use kube::ResourceExt;
use kube::runtime::watcher;

/// A pass labels the pod (version 11 on top of the 10 it read) and the cache applies 11 before
/// the pass posts the Binding; a second pass then reads 11 from the cache, which does not show
/// the binding yet. It must not post a second Binding (1.11 Bindings per pod in a 1,000-pod
/// burst, before the writer kept bindings apart from versions), nor may a pass that took its copy
/// just before the cache showed the pod bound (1.05 per pod, while the memo ended there).
#[tokio::test]
async fn a_pass_reading_the_label_version_does_not_bind_again() {
    let h = Harness::new(World::nodes(&["n1"]).with(pod("a"))).await;
    let writes = &h.ctx.metrics.kube_writes;
    let read = h.pod("a");
    h.ctx
        .writer
        .label(writes, &read, 7, false)
        .await
        .expect("label");
    let labelled: Pod = h.pod("a");
    assert_ne!(
        labelled.metadata.resource_version,
        read.metadata.resource_version
    );
    h.ctx.pod_event(&watcher::Event::Apply(labelled.clone()));
    assert!(h.ctx.writer.bind(writes, &read, "n1").await.expect("bind"));
    // The second pass, on the cache's copy: the label patch's version.
    let again = h
        .ctx
        .writer
        .bind(writes, &labelled, "n1")
        .await
        .expect("bind");
    assert!(!again, "reported as bound by the earlier pass");
    assert_eq!(
        h.kube.writes_of(&["bind "]),
        ["bind ns/a n1"],
        "one Binding"
    );
    // The cache shows the pod bound; a pass that took its copy just before still holds 11.
    h.ctx.pod_event(&watcher::Event::Apply(h.pod("a")));
    let late = h
        .ctx
        .writer
        .bind(writes, &labelled, "n1")
        .await
        .expect("bind");
    assert!(!late, "reported as bound by the earlier pass");
    assert_eq!(h.kube.writes_of(&["bind "]).len(), 1, "still one Binding");
}

/// The label's race (two label patches seen once in the 3-writes e2e test under load): a pass
/// takes its copy of the pod (10), another labels it (11) and the cache applies 11, then the
/// binding's version; the first pass, still holding 10, must not label again. Before, the
/// writer dropped its memo as soon as the cache applied a version newer than the patch.
#[tokio::test]
async fn a_pass_holding_a_copy_older_than_the_label_does_not_label_again() {
    let h = Harness::new(World::nodes(&["n1"]).with(pod("a"))).await;
    let writes = &h.ctx.metrics.kube_writes;
    let read = h.pod("a");
    h.ctx
        .writer
        .label(writes, &read, 7, false)
        .await
        .expect("label");
    h.ctx.pod_event(&watcher::Event::Apply(h.pod("a")));
    assert!(h.ctx.writer.bind(writes, &read, "n1").await.expect("bind"));
    h.ctx.pod_event(&watcher::Event::Apply(h.pod("a")));
    h.ctx
        .writer
        .label(writes, &read, 7, false)
        .await
        .expect("label");
    assert_eq!(
        h.kube.writes_of(&["label "]),
        ["label ns/a 7"],
        "one label patch"
    );
}

/// The submit's label patch goes out in the background; a pass that labels the pod meanwhile
/// (the bind's) waits for it instead of sending a second one.
#[tokio::test]
async fn a_label_in_flight_is_waited_for_not_sent_twice() {
    let h = Harness::new(World::nodes(&["n1"]).with(pod("a"))).await;
    let writes = &h.ctx.metrics.kube_writes;
    let read = h.pod("a");
    h.ctx.writer.label_in_background(writes, &read, 7, false);
    h.ctx
        .writer
        .label(writes, &read, 7, false)
        .await
        .expect("label");
    let labels = |h: &Harness| h.kube.writes_of(&["label "]).len();
    assert_eq!(labels(&h), 1, "the label landed before label() returned");
    h.ctx.writer.background_done().await;
    assert_eq!(labels(&h), 1, "one label patch");
    assert_eq!(writes.of(crate::k8s::writes::write_kind::LABEL), 1);
}

/// Reports go to the report workers and the pass goes on. A report queued when the next pass
/// binds the pod is dropped, one in flight lands before the Binding, and one from a pass still
/// holding an unbound copy is not taken: a bound pod never shows PodScheduled=False.
#[tokio::test]
async fn a_queued_report_never_lands_after_the_binding() {
    for in_flight in [false, true] {
        let h = Harness::new(World::nodes(&["n1"]).with(pod("a"))).await;
        let writes = &h.ctx.metrics.kube_writes;
        let read = h.pod("a");
        let gate = h.kube.hold("/pods/a/status");
        let pending = "Slurm job 1 is pending: Priority";
        h.ctx
            .writer
            .report(writes, &read, "SlurmJobPending", pending, false);
        let bound = if in_flight {
            // The worker has sent the status patch; the API server has not answered yet.
            while writes.of(crate::k8s::writes::write_kind::CONDITION) == 0 {
                tokio::task::yield_now().await;
            }
            let bind = tokio::spawn({
                let (writer, writes, read) = (h.ctx.writer.clone(), writes.clone(), read.clone());
                async move { writer.bind(&writes, &read, "n1").await }
            });
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            gate.add_permits(1);
            bind.await.unwrap()
        } else {
            // No worker has run yet: the report is still queued.
            gate.add_permits(1);
            h.ctx.writer.bind(writes, &read, "n1").await
        };
        assert!(bound.expect("bind"));
        h.ctx.writer.report(
            writes,
            &read,
            "SlurmJobPending",
            "from an older copy",
            false,
        );
        h.ctx.writer.background_done().await;
        let w = h.kube.writes();
        let bind_at = w
            .iter()
            .position(|x| x.starts_with("bind "))
            .expect("bound");
        assert!(
            w[bind_at..].iter().all(|x| !x.starts_with("condition ")),
            "a condition after the Binding (in flight: {in_flight}): {w:?}"
        );
        let conditions = w.iter().filter(|x| x.starts_with("condition ")).count();
        assert_eq!(conditions, usize::from(in_flight), "{w:?}");
        let scheduled = h
            .pod("a")
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| c.status);
        assert_eq!(scheduled.as_deref(), Some("True"), "in flight: {in_flight}");
    }
}

/// The same report twice, the second from a pass whose copy of the pod does not show the first
/// yet: one status patch and one Event.
#[tokio::test]
async fn a_report_is_sent_once_while_the_cache_catches_up() {
    let h = Harness::new(World::nodes(&["n1"]).with(pod("a"))).await;
    let writes = &h.ctx.metrics.kube_writes;
    let read = h.pod("a");
    let pending = "Slurm job 1 is pending: Priority";
    h.ctx
        .writer
        .report(writes, &read, "SlurmJobPending", pending, false);
    h.ctx.writer.background_done().await;
    h.ctx
        .writer
        .report(writes, &read, "SlurmJobPending", pending, false);
    h.ctx.writer.background_done().await;
    use crate::k8s::writes::write_kind::{CONDITION, EVENT};
    assert_eq!((writes.of(CONDITION), writes.of(EVENT)), (1, 1));
    // A new reason is sent.
    h.ctx.writer.report(
        writes,
        &read,
        "SlurmJobPending",
        "Slurm job 1 is pending: Resources",
        false,
    );
    h.ctx.writer.background_done().await;
    assert_eq!((writes.of(CONDITION), writes.of(EVENT)), (2, 2));
}

/// Pods a and b on two nodes, with b's Binding posted and held by the API server until the
/// returned gate gives a permit; the handle is the bind's.
async fn binding_held() -> (
    Harness,
    std::sync::Arc<tokio::sync::Semaphore>,
    tokio::task::JoinHandle<Result<bool, kube::Error>>,
) {
    let h = Harness::new(World::nodes(&["n1", "n2"]).with(pod("a")).with(pod("b"))).await;
    let (gate, bind) = hold_binding(&h, &h.ctx.writer, "b", "n2").await;
    (h, gate, bind)
}

/// The Binding of pod `name` to `node`, posted by `writer` and held by the fake API server
/// until the returned gate gives a permit; returns once it is in flight, with the bind's
/// handle.
async fn hold_binding(
    h: &Harness,
    writer: &crate::k8s::PodWriter,
    name: &str,
    node: &str,
) -> (
    std::sync::Arc<tokio::sync::Semaphore>,
    tokio::task::JoinHandle<Result<bool, kube::Error>>,
) {
    let writes = &h.ctx.metrics.kube_writes;
    let gate = h.kube.hold(&format!("/pods/{name}/binding"));
    let bind = tokio::spawn({
        let (writer, writes, p, node) = (
            writer.clone(),
            writes.clone(),
            h.pod(name),
            node.to_string(),
        );
        async move { writer.bind(&writes, &p, &node).await }
    });
    while writes.of(crate::k8s::writes::write_kind::BINDING) == 0 {
        tokio::task::yield_now().await;
    }
    (gate, bind)
}

/// A Scheduled Event gives way to a Binding in flight (in a burst the API server serves the
/// writes pods wait for first) and goes out as soon as none is in flight. The fake API server
/// answers in process, so an Event that did not wait would be posted within a few polls.
#[tokio::test]
async fn an_event_waits_for_the_binding_in_flight() {
    let (h, gate, bind) = binding_held().await;
    let writes = &h.ctx.metrics.kube_writes;
    h.ctx
        .writer
        .event_in_background(writes, &h.pod("a"), "Scheduled", "bound to n1".into());
    let events = |h: &Harness| h.kube.writes_of(&["event "]).len();
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        events(&h),
        0,
        "the Event waits while the Binding is in flight"
    );
    gate.add_permits(1);
    assert!(bind.await.unwrap().expect("bind"));
    h.ctx.writer.background_done().await;
    assert_eq!(events(&h), 1, "the Event follows the Binding");
}

/// An Event gives way to the writes in flight for its longest wait at most: under a steady
/// stream of Bindings it is late, never lost.
#[tokio::test]
async fn an_event_goes_out_after_its_longest_wait_whatever_is_in_flight() {
    let (h, _gate, _bind) = binding_held().await;
    let lag = std::time::Duration::from_millis(50);
    // A copy of the writer: what it counts in flight is shared, its longest wait is its own.
    let writer = h.ctx.writer.clone().with_event_max_lag(lag);
    let writes = &h.ctx.metrics.kube_writes;
    let queued = std::time::Instant::now();
    writer.event_in_background(writes, &h.pod("a"), "Scheduled", "bound to n1".into());
    writer.background_done().await;
    let sent = h.kube.writes_of(&["event ", "bind "]);
    assert_eq!(
        sent,
        ["event ns/a Scheduled"],
        "the Event, the Binding still held"
    );
    assert!(queued.elapsed() >= lag, "it waited its longest wait first");
}

/// A background label patch keeps only the pod's identity and the patch's text while it waits
/// for its turn: what it sends, and what the memo records of it, are those of the pod's copy.
#[tokio::test]
async fn a_background_label_sends_the_patch_and_records_it_as_the_pass_would() {
    let h = Harness::new(World::nodes(&["n1"]).with(pod("a"))).await;
    let writes = &h.ctx.metrics.kube_writes;
    let read = h.pod("a");
    h.ctx.writer.label_in_background(writes, &read, 7, false);
    h.ctx.writer.background_done().await;
    let sent = h.kube.raw_writes();
    assert_eq!(sent.len(), 1, "one write: {:?}", h.kube.writes());
    assert_eq!(
        sent[0].body["metadata"]["labels"][crate::wellknown::LABEL_SLURM_JOBID],
        "7"
    );
    assert_eq!(
        kube::ResourceExt::labels(&h.pod("a"))[crate::wellknown::LABEL_SLURM_JOBID],
        "7"
    );
    // A pass still holding the copy read before the patch does not label again.
    h.ctx
        .writer
        .label(writes, &read, 7, false)
        .await
        .expect("label");
    assert_eq!(h.kube.raw_writes().len(), 1, "{:?}", h.kube.writes());
}

/// Labels and binds `pod` to `node` as `bind::bind_one` does.
async fn bind_as_the_pass_does(
    writer: &crate::k8s::PodWriter,
    writes: &crate::k8s::writes::KubeWrites,
    pod: &Pod,
    job_id: u32,
    node: &str,
) -> bool {
    let label = writer
        .label_for_binding(writes, pod, job_id)
        .await
        .expect("label");
    writer
        .bind_carrying(writes, pod, node, label)
        .await
        .expect("bind")
}

/// Pods `a` and `b` as the webhook admits them, on a Kubernetes 1.36 API server that copies a
/// Binding's labels onto the pod, or (`copies` false, its feature gate off) does not.
async fn two_admitted_pods_on_1_36(copies: bool) -> Harness {
    let h = Harness::new(
        World::nodes(&["n1", "n2"])
            .with(pod("a").admitted())
            .with(pod("b").admitted()),
    )
    .await;
    h.kube.serve_version(36, copies);
    h
}

/// Where the API server copies a Binding's labels onto the pod (Kubernetes 1.35 and later), a
/// pod whose background label patch has not gone out yet when it is bound gets the label on the
/// Binding: one write instead of two, and the queued patch is never sent.
#[tokio::test]
async fn the_binding_carries_the_label_of_a_patch_not_sent_yet() {
    let h = two_admitted_pods_on_1_36(true).await;
    let writes = &h.ctx.metrics.kube_writes;
    // Pod b, with no patch queued: the bind claims the label and carries it.
    let b = h.pod("b");
    assert!(bind_as_the_pass_does(&h.ctx.writer, writes, &b, 8, "n2").await);
    // Pod a: the submit's patch is queued (its task has not run: this runtime has one thread
    // and the test has not yielded since), then the bind takes it over.
    let a = h.pod("a");
    h.ctx.writer.label_in_background(writes, &a, 7, false);
    assert!(bind_as_the_pass_does(&h.ctx.writer, writes, &a, 7, "n1").await);
    h.ctx.writer.background_done().await;
    assert_eq!(
        h.kube.writes_of(&["label ", "bind "]),
        ["bind ns/b n2 label=8", "bind ns/a n1 label=7"],
        "no label patch"
    );
    for (name, job) in [("a", "7"), ("b", "8")] {
        let p = h.pod(name);
        assert_eq!(
            p.labels()
                .get(crate::wellknown::LABEL_SLURM_JOBID)
                .map(String::as_str),
            Some(job),
            "{name}"
        );
    }
    // The cache shows them bound and labelled: nothing more is written.
    h.ctx.pod_event(&watcher::Event::Apply(h.pod("a")));
    h.ctx.pod_event(&watcher::Event::Apply(h.pod("b")));
    h.ctx.writer.background_done().await;
    assert_eq!(h.kube.writes_of(&["label "]), Vec::<String>::new());
    // A pass still holding the unbound copy finds the label written.
    h.ctx
        .writer
        .label(writes, &a, 7, false)
        .await
        .expect("label");
    assert_eq!(h.kube.writes_of(&["label "]), Vec::<String>::new());
}

/// An API server that drops a Binding's labels (before 1.35, or the gate off): the first pod
/// bound so is labelled by a patch as soon as the cache shows it, and every later pod is labelled
/// before its Binding. Before 1.35 no Binding carries the label at all; a pod created without
/// the webhook (finalizer and toleration missing) never has its patch folded into the Binding.
#[tokio::test]
async fn a_dropped_binding_label_is_patched_and_labels_go_first_from_then_on() {
    let h = two_admitted_pods_on_1_36(false).await;
    let writes = &h.ctx.metrics.kube_writes;
    let a = h.pod("a");
    assert!(bind_as_the_pass_does(&h.ctx.writer, writes, &a, 7, "n1").await);
    let bound = h.pod("a");
    assert_eq!(
        bound.labels().get(crate::wellknown::LABEL_SLURM_JOBID),
        None
    );
    h.ctx.pod_event(&watcher::Event::Apply(bound));
    h.ctx.writer.background_done().await;
    let b = h.pod("b");
    assert!(bind_as_the_pass_does(&h.ctx.writer, writes, &b, 8, "n2").await);
    assert_eq!(
        h.kube.writes_of(&["label ", "bind "]),
        [
            "bind ns/a n1 label=7",
            "label ns/a 7",
            "label ns/b 8",
            "bind ns/b n2"
        ]
    );
    assert_eq!(
        h.pod("a")
            .labels()
            .get(crate::wellknown::LABEL_SLURM_JOBID)
            .map(String::as_str),
        Some("7")
    );

    for (minor, pod_) in [(34, pod("c").admitted()), (36, pod("c"))] {
        let h = Harness::new(World::nodes(&["n1"]).with(pod_)).await;
        h.kube.serve_version(minor, true);
        let writes = &h.ctx.metrics.kube_writes;
        let c = h.pod("c");
        assert!(bind_as_the_pass_does(&h.ctx.writer, writes, &c, 9, "n1").await);
        assert_eq!(
            h.kube.writes_of(&["label ", "bind "]),
            ["label ns/c 9", "bind ns/c n1"],
            "1.{minor}"
        );
    }
}

/// In a burst, a background label patch gives way to the Bindings in flight, and the bind of its
/// pod takes it over: carried on the Binding where the API server copies its labels (1.36), else
/// sent by the bind at once, never waited for behind the queue (its longest wait is an hour
/// here: a bind that waited would not end).
#[tokio::test]
async fn a_queued_label_gives_way_to_bindings_and_its_bind_takes_it_over() {
    for (minor, want) in [
        (36, vec!["bind ns/a n1 label=7"]),
        (34, vec!["label ns/a 7", "bind ns/a n1"]),
    ] {
        let h = Harness::new(
            World::nodes(&["n1", "n2"])
                .with(pod("a").admitted())
                .with(pod("held").admitted()),
        )
        .await;
        h.kube.serve_version(minor, true);
        let writes = &h.ctx.metrics.kube_writes;
        let writer = h
            .ctx
            .writer
            .clone()
            .with_label_max_lag(Duration::from_secs(3600));
        let (gate, held) = hold_binding(&h, &writer, "held", "n2").await;
        let a = h.pod("a");
        writer.label_in_background(writes, &a, 7, false);
        let bound = tokio::time::timeout(Duration::from_secs(60), async {
            bind_as_the_pass_does(&writer, writes, &a, 7, "n1").await
        })
        .await
        .expect("the bind waited for the queued label patch");
        assert!(bound);
        assert_eq!(
            h.kube.writes_of(&["label ", "bind ns/a"]),
            want,
            "1.{minor}"
        );
        gate.add_permits(1);
        assert!(held.await.unwrap().expect("bind"));
        writer.background_done().await;
        assert_eq!(
            h.kube.writes_of(&["label "]).len(),
            want.iter().filter(|w| w.starts_with("label ")).count(),
            "1.{minor}: the queued patch is not sent after all"
        );
    }
}

/// A label patch already in flight when its pod is bound is not waited for where the label can
/// ride: the Binding carries the same label (the patch sets it again, whichever lands last).
#[tokio::test]
async fn a_bind_does_not_wait_for_a_label_patch_in_flight_when_the_label_rides() {
    let h = Harness::new(World::nodes(&["n1"]).with(pod("a").admitted())).await;
    h.kube.serve_version(36, true);
    let writes = &h.ctx.metrics.kube_writes;
    let gate = h.kube.hold("/pods/a");
    let a = h.pod("a");
    h.ctx.writer.label_in_background(writes, &a, 7, false);
    while writes.of(crate::k8s::writes::write_kind::LABEL) == 0 {
        tokio::task::yield_now().await;
    }
    let bound = tokio::time::timeout(
        Duration::from_secs(60),
        bind_as_the_pass_does(&h.ctx.writer, writes, &a, 7, "n1"),
    )
    .await
    .expect("the bind waited for the label patch in flight");
    assert!(bound);
    assert_eq!(
        h.kube.writes_of(&["label ", "bind "]),
        ["bind ns/a n1 label=7"]
    );
    gate.add_permits(1);
    h.ctx.writer.background_done().await;
    assert_eq!(
        h.kube.writes_of(&["label ", "bind "]),
        ["bind ns/a n1 label=7", "label ns/a 7"]
    );
    assert_eq!(
        h.pod("a")
            .labels()
            .get(crate::wellknown::LABEL_SLURM_JOBID)
            .map(String::as_str),
        Some("7")
    );
}

/// A background label patch waits [`crate::k8s::pod_writer::LABEL_MIN_AGE`] even with no submit
/// or Binding in flight (a steady arrival has such moments all the time): a pod bound within it
/// costs one write, the Binding carrying the label, and one still waiting for Slurm then gets
/// its patch. The clock is paused: the sleep ends only when nothing else can run.
#[tokio::test(start_paused = true)]
async fn a_background_label_waits_its_minimum_age_and_a_bind_meanwhile_carries_it() {
    use crate::k8s::pod_writer::LABEL_MIN_AGE;
    let h = Harness::new(
        World::nodes(&["n1"])
            .with(pod("a").admitted())
            .with(pod("b").admitted()),
    )
    .await;
    h.kube.serve_version(36, true);
    let writes = &h.ctx.metrics.kube_writes;
    let (a, b) = (h.pod("a"), h.pod("b"));
    let queued = tokio::time::Instant::now();
    h.ctx.writer.label_in_background(writes, &a, 7, false);
    h.ctx.writer.label_in_background(writes, &b, 8, false);
    tokio::time::sleep(LABEL_MIN_AGE - Duration::from_millis(100)).await;
    assert_eq!(
        h.kube.writes_of(&["label "]),
        Vec::<String>::new(),
        "no patch before its minimum age, though nothing is in flight"
    );
    assert!(bind_as_the_pass_does(&h.ctx.writer, writes, &a, 7, "n1").await);
    h.ctx.writer.background_done().await;
    assert!(
        queued.elapsed() >= LABEL_MIN_AGE,
        "b's patch went out at its age"
    );
    assert_eq!(
        h.kube.writes_of(&["label ", "bind "]),
        ["bind ns/a n1 label=7", "label ns/b 8"]
    );
    assert_eq!(writes.of(crate::k8s::writes::write_kind::LABEL), 1);
}

/// On shutdown the queued label patches go out at once ([`crate::k8s::PodWriter::flush_labels`]):
/// a young one neither waits for its age nor gives way to a Binding in flight. The clock is
/// paused, and the writes are checked before any of it could pass.
#[tokio::test(start_paused = true)]
async fn flushed_labels_go_out_at_once() {
    let h = Harness::new(
        World::nodes(&["n1"])
            .with(pod("a").admitted())
            .with(pod("held").admitted()),
    )
    .await;
    let writes = &h.ctx.metrics.kube_writes;
    let (gate, held) = hold_binding(&h, &h.ctx.writer, "held", "n1").await;
    let queued = tokio::time::Instant::now();
    h.ctx
        .writer
        .label_in_background(writes, &h.pod("a"), 7, false);
    h.ctx.writer.flush_labels();
    // Bounded: without the flush the patch waits for time to pass, which a busy task stops.
    for _ in 0..10_000 {
        if writes.of(crate::k8s::writes::write_kind::LABEL) > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        writes.of(crate::k8s::writes::write_kind::LABEL),
        1,
        "sent at once"
    );
    assert_eq!(queued.elapsed(), Duration::ZERO, "sent without waiting");
    assert_eq!(h.kube.writes_of(&["label "]), ["label ns/a 7"]);
    gate.add_permits(1);
    assert!(held.await.unwrap().expect("bind"));
}
