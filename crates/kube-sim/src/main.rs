//! `kube-sim`: run the in-memory Kubernetes API server (and the simulated cluster) until
//! SIGINT or SIGTERM, writing a kubeconfig and printing the server URL on stdout.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

/// In-memory Kubernetes API server and simulated cluster.
#[derive(Debug, Parser)]
#[command(name = "kube-sim", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to write a kubeconfig for kubectl and kube-rs.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Prefix of simulated node names.
    #[arg(long, default_value = "node-")]
    node_prefix: String,
    /// YAML file describing the nodes (replaces --nodes).
    #[arg(long)]
    nodes_file: Option<PathBuf>,
    /// API server only: no nodes, kubelet or controllers.
    #[arg(long)]
    no_sim: bool,
    /// Extra resource types (simple entries or CRDs, JSON or YAML).
    #[arg(long)]
    types_file: Option<PathBuf>,
    /// Events kept for watch resumption.
    #[arg(long, default_value_t = 100_000)]
    history: usize,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 5.0)]
    bookmark_interval: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let opts = kube_sim::Options {
        nodes: args.nodes,
        node_prefix: args.node_prefix,
        nodes_file: args.nodes_file,
        simulate: !args.no_sim,
        types_file: args.types_file,
        listen: Some(args.listen),
        history_limit: args.history,
        bookmark_interval: Duration::from_secs_f64(args.bookmark_interval.max(0.01)),
        tls: args
            .tls_cert
            .zip(args.tls_key)
            .map(|(cert, key)| kube_sim::TlsFiles { cert, key }),
        ..Default::default()
    };
    let sim = kube_sim::KubeSim::start(opts)
        .await
        .context("starting kube-sim")?;
    if let Some(p) = &args.kubeconfig {
        sim.write_kubeconfig(p)
            .with_context(|| format!("writing kubeconfig {}", p.display()))?;
    }
    let mut out = std::io::stdout();
    writeln!(out, "{}", sim.url())?;
    out.flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("kube-sim stopping");
    sim.stop().await;
    Ok(())
}
