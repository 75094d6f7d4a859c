//! The writer's memo of its own writes against the order in which the pod cache applies them,
//! on the fake API server.

use super::*;
use k8s_openapi::api::core::v1::Pod;
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
