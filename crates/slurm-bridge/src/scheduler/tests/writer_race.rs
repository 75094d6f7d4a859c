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
