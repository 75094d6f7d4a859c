//! `BENCH_APISERVER_PPROF=<prefix>`: a CPU profile of kube-apiserver during a line
//! (`<prefix>.<line>.pb.gz`, for `go tool pprof`), `BENCH_APISERVER_PPROF_SECONDS` long
//! (default 4) from the line's start: what the API server spends its CPU on for each scheduler.

use futures::AsyncReadExt;
use tokio::task::JoinHandle;

/// True when the bench should start kube-apiserver with `--profiling`.
pub(crate) fn wanted() -> bool {
    std::env::var_os("BENCH_APISERVER_PPROF").is_some()
}

/// Starts the profile of `line` now; await the handle after the line to have it written.
pub(crate) fn start(kube: &kube_testenv::Instance, line: &str) -> Option<JoinHandle<()>> {
    let prefix = std::env::var("BENCH_APISERVER_PPROF").ok()?;
    let seconds: u32 = std::env::var("BENCH_APISERVER_PPROF_SECONDS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("BENCH_APISERVER_PPROF_SECONDS: whole seconds")
        })
        .unwrap_or(4);
    let path = format!("{prefix}.{line}.pb.gz");
    let client = kube.client().clone();
    Some(tokio::spawn(async move {
        let req = http::Request::get(format!("/debug/pprof/profile?seconds={seconds}"))
            .body(Vec::new())
            .unwrap();
        let mut body = Vec::new();
        let read = async {
            let mut stream = client.request_stream(req).await?;
            stream.read_to_end(&mut body).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        };
        match read.await {
            Ok(()) => {
                std::fs::write(&path, &body).expect("BENCH_APISERVER_PPROF");
                println!("  kube-apiserver profile: {path} ({} bytes)", body.len());
            }
            Err(e) => println!("  kube-apiserver profile for {path} failed: {e}"),
        }
    }))
}
