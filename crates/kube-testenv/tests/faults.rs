//! kube-testenv's fault tools against the control plane it runs: daemons stopped and started
//! with their data kept, paused and resumed, and etcd compacted so an old watch gets 410 Gone.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube_testenv::{Daemon, Instance, InstanceOptions};
use serde_json::json;
use std::time::Duration;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test]
async fn daemons_restart_with_their_data_pause_and_etcd_compacts() {
    let mut k8s = Instance::start(InstanceOptions::with_nodes(1))
        .await
        .expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(k8s.client(), "default");
    let first = cms
        .create(&PostParams::default(), &config_map("before"))
        .await
        .unwrap();
    let old_rv = first.metadata.resource_version.clone().unwrap();

    // etcd, then kube-apiserver, crash and come back: what was written is still there.
    k8s.restart_daemon(Daemon::Etcd).await.unwrap();
    k8s.restart_daemon(Daemon::KubeApiserver).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(k8s.client(), "default");
    assert_eq!(cms.get("before").await.unwrap().data, first.data);
    cms.create(&PostParams::default(), &config_map("after"))
        .await
        .unwrap();

    // A paused kube-apiserver answers nothing; resumed, it answers again.
    k8s.pause_daemon(Daemon::KubeApiserver).unwrap();
    let stalled = tokio::time::timeout(Duration::from_secs(3), cms.get("after")).await;
    assert!(
        stalled.is_err(),
        "a paused kube-apiserver answered: {stalled:?}"
    );
    k8s.resume_daemon(Daemon::KubeApiserver).unwrap();
    tokio::time::timeout(Duration::from_secs(30), cms.get("after"))
        .await
        .expect("answers once resumed")
        .unwrap();

    // Compacted, and with a fresh watch cache: a watch from before the compaction gets 410.
    let revision = k8s.compact_etcd().unwrap();
    assert!(
        revision > old_rv.parse::<i64>().unwrap(),
        "{revision} vs {old_rv}"
    );
    k8s.restart_daemon(Daemon::KubeApiserver).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(k8s.client(), "default");
    let mut stream = cms
        .watch(&WatchParams::default(), &old_rv)
        .await
        .unwrap()
        .boxed();
    let first_event = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("a watch event")
        .expect("the stream yields");
    match first_event {
        Ok(WatchEvent::Error(e)) => assert_eq!(e.code, 410, "{e:?}"),
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }

    // A daemon that was never started, or is running already, is a clear error.
    let err = k8s
        .start_daemon(Daemon::Etcd)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("etcd is running already"), "{err}");
    let err = k8s
        .pause_daemon(Daemon::KubeScheduler)
        .unwrap_err()
        .to_string();
    assert!(err.contains("kube-scheduler"), "{err}");
    assert!("etcdd".parse::<Daemon>().is_err());
}
