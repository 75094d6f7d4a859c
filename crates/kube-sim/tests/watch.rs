//! Watches through the real kube-rs client: resume from a resourceVersion, bookmarks, 410 Gone,
//! streaming lists, selector transitions, many watchers in order, a kube-runtime reflector and
//! a Controller.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{pod, server};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube_sim::{KubeSim, Options};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

async fn next_event<K: serde::de::DeserializeOwned + Clone + std::fmt::Debug>(
    s: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("event within 10 s")
        .expect("stream open")
        .expect("event decodes")
}

fn name_of<K: kube::Resource>(e: &WatchEvent<K>) -> (&'static str, String) {
    match e {
        WatchEvent::Added(o) => ("ADDED", o.meta().name.clone().unwrap_or_default()),
        WatchEvent::Modified(o) => ("MODIFIED", o.meta().name.clone().unwrap_or_default()),
        WatchEvent::Deleted(o) => ("DELETED", o.meta().name.clone().unwrap_or_default()),
        WatchEvent::Bookmark(_) => ("BOOKMARK", String::new()),
        WatchEvent::Error(e) => panic!("watch error {e:?}"),
    }
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let a = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let rv = a.metadata.resource_version.unwrap();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(name_of(&next_event(&mut s).await));
    }
    assert_eq!(
        got,
        [
            ("ADDED", "b".to_string()),
            ("MODIFIED", "a".into()),
            ("DELETED", "b".into())
        ]
    );
    // Live events follow.
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    assert_eq!(name_of(&next_event(&mut s).await), ("ADDED", "c".into()));
}

#[tokio::test]
async fn bookmarks_and_timeouts() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let a = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let rv = a.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default().timeout(2), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut s).await {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, rv),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // The server ends the stream after timeoutSeconds.
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(e) = s.next().await {
            e.unwrap();
        }
    })
    .await;
    assert!(end.is_ok(), "stream ended after timeoutSeconds");
}

#[tokio::test]
async fn too_old_resource_version_is_gone() {
    let sim = KubeSim::start(Options {
        history_limit: 5,
        ..Default::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let first = cms.create(&PostParams::default(), &cm("x0")).await.unwrap();
    for i in 1..20 {
        cms.create(&PostParams::default(), &cm(&format!("x{i}")))
            .await
            .unwrap();
    }
    let rv = first.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .unwrap()
    {
        Some(Ok(WatchEvent::Error(e))) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        Some(Err(kube::Error::Api(e))) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn streaming_list_and_selector_transitions() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    for n in ["s1", "s2"] {
        let mut c = cm(n);
        c.metadata.labels = Some([("sel".to_string(), "yes".to_string())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let wp = WatchParams::streaming_lists().labels("sel=yes");
    let mut s = cms.watch(&wp, "").await.unwrap().boxed();
    let mut names = Vec::new();
    loop {
        match next_event(&mut s).await {
            WatchEvent::Added(o) => names.push(o.metadata.name.unwrap()),
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(|s| s.as_str()),
                    Some("true")
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, ["s1", "s2"]);
    // Leaving the selector is a DELETED event for this watcher, entering it an ADDED.
    cms.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "no"}}})),
    )
    .await
    .unwrap();
    let mut e = next_event(&mut s).await;
    while matches!(e, WatchEvent::Bookmark(_)) {
        e = next_event(&mut s).await;
    }
    assert_eq!(name_of(&e), ("DELETED", "s1".into()));
    cms.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}})),
    )
    .await
    .unwrap();
    let mut e = next_event(&mut s).await;
    while matches!(e, WatchEvent::Bookmark(_)) {
        e = next_event(&mut s).await;
    }
    assert_eq!(name_of(&e), ("ADDED", "s1".into()));
}

#[tokio::test]
async fn many_watchers_see_every_event_in_order() {
    let sim = server().await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watchers = Vec::new();
    for _ in 0..8 {
        let s = pods
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        watchers.push(tokio::spawn(async move {
            let mut s = s;
            let mut seen = Vec::new();
            while seen.len() < 200 {
                match next_event(&mut s).await {
                    WatchEvent::Added(p) => {
                        seen.push(p.metadata.resource_version.unwrap().parse::<u64>().unwrap())
                    }
                    WatchEvent::Bookmark(_) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            seen
        }));
    }
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let pods = pods.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    pods.create(&PostParams::default(), &pod(&format!("w{w}-{i}")))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let mut first: Option<Vec<u64>> = None;
    for w in watchers {
        let seen = w.await.unwrap();
        assert!(
            seen.windows(2).all(|p| p[0] < p[1]),
            "events in resourceVersion order"
        );
        match &first {
            None => first = Some(seen),
            Some(f) => assert_eq!(f, &seen, "every watcher sees the same events"),
        }
    }
}

#[tokio::test]
async fn reflector_and_controller_run() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let (reader, writer) = reflector::store::<ConfigMap>();
    let refl =
        reflector(writer, watcher(cms.clone(), watcher::Config::default())).applied_objects();
    let refl_task = tokio::spawn(async move {
        refl.try_for_each(|_| async { Ok(()) }).await.ok();
    });
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("r{i}")))
            .await
            .unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), async {
        while reader.state().len() < 5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("reflector sees 5 objects");

    // A controller that labels every ConfigMap it reconciles.
    let reconciled = Arc::new(AtomicUsize::new(0));
    let count = reconciled.clone();
    let ctrl_api = cms.clone();
    let ctrl = Controller::new(cms.clone(), watcher::Config::default().streaming_lists())
        .shutdown_on_signal()
        .run(
            move |obj: Arc<ConfigMap>, ctx: Arc<Api<ConfigMap>>| {
                let count = count.clone();
                async move {
                    let name = obj.metadata.name.clone().unwrap();
                    if obj
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("seen"))
                        .is_none()
                    {
                        ctx.patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"labels": {"seen": "yes"}}})),
                        )
                        .await?;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, kube::Error>(Action::await_change())
                }
            },
            |_obj, _err, _ctx| Action::requeue(Duration::from_secs(1)),
            Arc::new(ctrl_api),
        )
        .for_each(|_| async {});
    let ctrl_task = tokio::spawn(ctrl);
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let l = cms
                .list(&ListParams::default().labels("seen=yes"))
                .await
                .unwrap();
            if l.items.len() == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("controller labels all 5 ConfigMaps");
    assert!(reconciled.load(Ordering::SeqCst) >= 5);
    ctrl_task.abort();
    refl_task.abort();
}

#[tokio::test]
async fn event_recorder_creates_and_updates_a_series() {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::Resource;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let sim = server().await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let p = pods
        .create(&PostParams::default(), &pod("ev"))
        .await
        .unwrap();
    let reporter = Reporter {
        controller: "kube-sim-test".into(),
        instance: None,
    };
    let recorder = Recorder::new(sim.client(), reporter);
    let ev = Event {
        type_: EventType::Warning,
        reason: "SlurmError".into(),
        note: Some("something failed".into()),
        action: "Submit".into(),
        secondary: None,
    };
    let r = p.object_ref(&());
    recorder.publish(&ev, &r).await.unwrap();
    recorder.publish(&ev, &r).await.unwrap();
    let events: Api<K8sEvent> = Api::default_namespaced(sim.client());
    let list = events
        .list(&ListParams::default().fields("regarding.name=ev"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "one event with a series");
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("SlurmError"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
}
