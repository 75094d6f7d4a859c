//! The writer's memo of its own writes against the order in which the pod cache applies them,
//! on the fake API server.

use super::*;
use crate::k8s::slim_pod::Pod;
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
    let binds: Vec<String> = h
        .kube
        .writes()
        .into_iter()
        .filter(|w| w.starts_with("bind "))
        .collect();
    assert_eq!(binds, ["bind ns/a n1"], "one Binding");
    // The cache shows the pod bound; a pass that took its copy just before still holds 11.
    h.ctx.pod_event(&watcher::Event::Apply(h.pod("a")));
    let late = h
        .ctx
        .writer
        .bind(writes, &labelled, "n1")
        .await
        .expect("bind");
    assert!(!late, "reported as bound by the earlier pass");
    let binds = h
        .kube
        .writes()
        .into_iter()
        .filter(|w| w.starts_with("bind "))
        .count();
    assert_eq!(binds, 1, "still one Binding");
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
    let labels: Vec<String> = h
        .kube
        .writes()
        .into_iter()
        .filter(|w| w.starts_with("label "))
        .collect();
    assert_eq!(labels, ["label ns/a 7"], "one label patch");
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
    let labels = |h: &Harness| {
        h.kube
            .writes()
            .into_iter()
            .filter(|w| w.starts_with("label "))
            .count()
    };
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
