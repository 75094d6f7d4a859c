//! The bridge's Kubernetes client (`slurm_bridge::k8s::client`) against a real kube-apiserver
//! (kube-testenv): it speaks HTTP/2, and many requests in flight beside a watch share one
//! connection instead of opening one each.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashSet;

/// Established TCP connections of this process to `port` (from /proc: its sockets' inodes, and
/// the kernel's table of TCP sockets).
fn connections_to(port: u16) -> usize {
    let inodes: HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let port = format!(":{port:04X}");
    ["/proc/self/net/tcp", "/proc/self/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // remote address, state (01: established), inode
            f.len() > 9 && f[2].ends_with(&port) && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_and_a_watch_share_one_http2_connection() {
    let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions::default())
        .await
        .unwrap();
    let port: u16 = env
        .server()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("the server's URL ends with its port");
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = slurm_bridge::k8s::client::builder(config).unwrap().build();

    let version = client
        .send(
            hyper::Request::get("/version")
                .body(kube::client::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(version.status(), 200);
    assert_eq!(
        version.version(),
        hyper::Version::HTTP_2,
        "the API server offers HTTP/2 and the client takes it"
    );

    let before = connections_to(port);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let watch = tokio::spawn(
        watcher(maps.clone(), watcher::Config::default())
            .applied_objects()
            .try_filter(|m| futures::future::ready(m.data.is_some()))
            .take(64)
            .try_collect::<Vec<_>>(),
    );
    futures::stream::iter(0..64)
        .map(|i| {
            let maps = maps.clone();
            async move {
                let m: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("m{i}")}, "data": {"i": i.to_string()},
                }))
                .unwrap();
                maps.create(&PostParams::default(), &m).await.unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
    let seen = tokio::time::timeout(std::time::Duration::from_secs(60), watch)
        .await
        .expect("the watch saw the 64 ConfigMaps")
        .unwrap()
        .unwrap();
    assert_eq!(seen.len(), 64);
    let after = connections_to(port);
    // Over HTTP/1.1 the 64 creates in flight opened about 64 connections; kube-testenv's agent,
    // in this process too, may open one or two of its own meanwhile.
    assert!(
        after <= before + 3,
        "{before} connections to the API server before, {after} after 64 requests in flight"
    );
}
