//! kube-sim benchmark: `cargo run --release -p kube-sim --example bench [-- PODS]`.
//!
//! Prints the time to create PODS pods (default 10,000) through the kube-rs client, the time
//! to list them, watch events per second delivered to each of 10 watchers (live, while pods
//! are patched, and replayed from the history), and the RSS after the load. Client and server
//! share the process, so the figures include the client's work.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_sim::{KubeSim, Options};
use serde_json::json;

const WATCHERS: usize = 10;
const IN_FLIGHT: usize = 64;

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<f64>().ok())
            })
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("bench-{i:05}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
        "spec": {"schedulerName": "slurm-bridge-scheduler",
                 "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                 "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]}
    }))
    .expect("pod")
}

/// Start `WATCHERS` watchers from `rv`; each returns how long it took to see `want` events.
async fn watchers(api: &Api<Pod>, rv: &str, want: usize) -> Vec<tokio::task::JoinHandle<Duration>> {
    let mut out = Vec::new();
    for _ in 0..WATCHERS {
        let stream = api
            .watch(&WatchParams::default(), rv)
            .await
            .expect("watch")
            .boxed();
        out.push(tokio::spawn(async move {
            let start = Instant::now();
            let mut stream = stream;
            let mut n = 0;
            while n < want {
                match stream.try_next().await {
                    Ok(Some(WatchEvent::Added(_) | WatchEvent::Modified(_))) => n += 1,
                    Ok(Some(_)) => {}
                    Ok(None) => panic!("watch ended after {n} events"),
                    Err(e) => panic!("watch failed after {n} events: {e}"),
                }
            }
            start.elapsed()
        }));
    }
    out
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let sim = KubeSim::start(Options {
        simulate: false,
        ..Default::default()
    })
    .await?;
    let api: Api<Pod> = Api::default_namespaced(sim.client());
    println!(
        "kube-sim bench: {n} pods, {WATCHERS} watchers, {IN_FLIGHT} requests in flight, RSS at start {:.1} MiB",
        rss_mib()
    );

    let rv0 = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &pod(i)).await }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    let create = t.elapsed();
    println!(
        "create {n} pods:            {:>8.1} ms  ({:.0} pods/s)",
        ms(create),
        n as f64 / create.as_secs_f64()
    );

    let mut best = Duration::MAX;
    let mut best_raw = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let l = api.list(&ListParams::default()).await?;
        best = best.min(t.elapsed());
        assert_eq!(l.items.len(), n);
        let t = Instant::now();
        let body = raw_get(sim.url(), "/api/v1/namespaces/default/pods").await?;
        best_raw = best_raw.min(t.elapsed());
        assert!(body > n * 100);
    }
    println!(
        "list {n} pods (kube-rs, typed): {:>6.1} ms  (best of 5)",
        ms(best)
    );
    println!(
        "list {n} pods (HTTP bytes):     {:>6.1} ms  (best of 5, server + transfer)",
        ms(best_raw)
    );

    // Replay from history: every watcher starts before the creations.
    let replay = watchers(&api, &rv0, n).await;
    let mut worst = Duration::ZERO;
    for w in replay {
        worst = worst.max(w.await?);
    }
    println!(
        "watch replay, {WATCHERS} watchers:  {:>8.0} events/s per watcher ({n} events, slowest {:.1} ms)",
        n as f64 / worst.as_secs_f64(),
        ms(worst)
    );

    // Live: watchers at the current version while every pod is patched.
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let live = watchers(&api, &rv, n).await;
    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                api.patch(
                    &format!("bench-{i:05}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"round": "2"}}})),
                )
                .await
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    let patch = t.elapsed();
    let mut worst = Duration::ZERO;
    for w in live {
        worst = worst.max(w.await?);
    }
    println!(
        "patch {n} pods:             {:>8.1} ms  ({:.0} writes/s)",
        ms(patch),
        n as f64 / patch.as_secs_f64()
    );
    println!(
        "watch live, {WATCHERS} watchers:    {:>8.0} events/s per watcher (all {n} events delivered in {:.1} ms)",
        n as f64 / worst.as_secs_f64(),
        ms(worst)
    );
    // Live, with the writes made in-process (no HTTP on the write side), so the figure is
    // the delivery rate rather than the rate of the writers.
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let live = watchers(&api, &rv, n).await;
    let store = sim.store().clone();
    let tid = store.tid("", "pods").expect("pods registered");
    let t = Instant::now();
    tokio::task::spawn_blocking(move || {
        for i in 0..n {
            store.write(|txn| {
                if let Some(cur) = txn.get(tid, "default", &format!("bench-{i:05}")) {
                    let mut v = (*cur.value).clone();
                    v["metadata"]["labels"]["round"] = json!("3");
                    txn.replace(tid, v);
                }
            });
        }
    })
    .await?;
    let writes = t.elapsed();
    let mut worst = Duration::ZERO;
    for w in live {
        worst = worst.max(w.await?);
    }
    println!(
        "watch live, in-process writes: {:>5.0} events/s per watcher (writes took {:.1} ms, all {n} events delivered in {:.1} ms)",
        n as f64 / worst.as_secs_f64(),
        ms(writes),
        ms(worst)
    );
    println!("RSS after load:            {:>8.1} MiB", rss_mib());
    sim.stop().await;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// GET a path with a bare HTTP/1.1 request; returns the body length.
async fn raw_get(url: &str, path: &str) -> Result<usize, Box<dyn std::error::Error>> {
    use http_body_util::BodyExt;
    let addr = url.trim_start_matches("http://");
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", addr)
        .header("accept", "application/json")
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    Ok(resp.into_body().collect().await?.to_bytes().len())
}
