//! `fault-proxy`: run a fault proxy in front of slurmrestd or kube-apiserver, and change its
//! faults or read its counts while it runs.

use clap::{Args, Parser, Subcommand};
use fault_proxy::{FaultProxy, Faults, ProxyOptions, ServerTls, Upstream, control, kubeconfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "fault-proxy",
    version,
    about = "An HTTP fault proxy for tests: latency, resets, 5xx, 429 and stalls at chosen rates"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a proxy in the foreground until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Change the faults of a running proxy (rates not given keep their value).
    Set {
        /// The proxy's control address (`run --control`).
        #[arg(long)]
        control: String,
        #[command(flatten)]
        faults: FaultArgs,
    },
    /// Print a running proxy's counts of requests and injected faults (JSON).
    Stats {
        #[arg(long)]
        control: String,
    },
}

#[derive(Args)]
struct RunArgs {
    /// The server: `http://HOST:PORT` (slurmrestd) or `https://HOST:PORT`.
    #[arg(
        long,
        conflicts_with = "kubeconfig",
        required_unless_present = "kubeconfig"
    )]
    upstream: Option<String>,
    /// kube-apiserver behind the proxy: server, CA and client identity from this kubeconfig.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: write the same kubeconfig pointed at the proxy here.
    #[arg(long, requires = "kubeconfig")]
    write_kubeconfig: Option<PathBuf>,
    /// PEM CA for an https upstream given with --upstream.
    #[arg(long)]
    upstream_ca: Option<PathBuf>,
    /// Terminate TLS with this PEM certificate (for kube-testenv: <instance>/pki/serving.crt).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Serve the control endpoint (GET/PUT /faults, GET /stats) here.
    #[arg(long, default_value = "127.0.0.1:0")]
    control: SocketAddr,
    /// Seed of the fault draws (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    faults: FaultArgs,
}

/// Fault rates (fractions 0..1 of requests) and durations.
#[derive(Args)]
struct FaultArgs {
    #[arg(long)]
    latency: Option<f64>,
    #[arg(long)]
    latency_ms: Option<u64>,
    #[arg(long)]
    reset: Option<f64>,
    #[arg(long = "error-5xx")]
    error_5xx: Option<f64>,
    #[arg(long = "throttle-429")]
    throttle_429: Option<f64>,
    #[arg(long)]
    stall: Option<f64>,
    #[arg(long)]
    stall_ms: Option<u64>,
    /// Forward, then lose the answer (close the connection).
    #[arg(long)]
    lost_answer: Option<f64>,
    /// Forward, then hold the answer `--slow-answer-ms`.
    #[arg(long)]
    slow_answer: Option<f64>,
    #[arg(long)]
    slow_answer_ms: Option<u64>,
    /// Fault only requests whose `METHOD /path` contains this (repeatable; none: all).
    #[arg(long = "route")]
    routes: Vec<String>,
}

impl FaultArgs {
    fn apply(&self, mut f: Faults) -> Faults {
        let set = |v: Option<f64>, to: &mut f64| v.into_iter().for_each(|v| *to = v);
        set(self.latency, &mut f.latency);
        set(self.reset, &mut f.reset);
        set(self.error_5xx, &mut f.error_5xx);
        set(self.throttle_429, &mut f.throttle_429);
        set(self.stall, &mut f.stall);
        set(self.lost_answer, &mut f.lost_answer);
        set(self.slow_answer, &mut f.slow_answer);
        f.latency_ms = self.latency_ms.unwrap_or(f.latency_ms);
        f.stall_ms = self.stall_ms.unwrap_or(f.stall_ms);
        f.slow_answer_ms = self.slow_answer_ms.unwrap_or(f.slow_answer_ms);
        if !self.routes.is_empty() {
            f.routes = self.routes.clone();
        }
        f
    }
}

fn read(path: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut upstream = match (&args.upstream, &args.kubeconfig) {
        (Some(u), _) => Upstream::plain(u)?,
        (None, Some(k)) => kubeconfig::upstream(k)?,
        (None, None) => anyhow::bail!("give --upstream URL or --kubeconfig PATH"),
    };
    if let Some(ca) = &args.upstream_ca {
        upstream.ca_pem = Some(read(ca)?);
    }
    let mut opts = ProxyOptions::new(upstream);
    opts.listen = args.listen;
    opts.seed = args.seed;
    opts.faults = args.faults.apply(Faults::none());
    if let (Some(c), Some(k)) = (&args.tls_cert, &args.tls_key) {
        opts.serve_tls = Some(ServerTls {
            cert_pem: read(c)?,
            key_pem: read(k)?,
        });
    }
    let proxy = Arc::new(FaultProxy::start(opts).await?);
    let control = proxy.serve_control(args.control).await?;
    if let (Some(src), Some(dst)) = (&args.kubeconfig, &args.write_kubeconfig) {
        kubeconfig::write_pointed_at(src, proxy.url(), dst)?;
        println!("KUBECONFIG={}", dst.display());
    }
    println!("PROXY={}", proxy.url());
    println!("CONTROL={control}");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("{}", serde_json::to_string(&proxy.stats())?);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,fault_proxy=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Cmd::Run(args) => run(args).await,
        Cmd::Set { control, faults } => {
            let now: Faults =
                serde_json::from_str(&control::request(&control, "GET", "/faults", "").await?)?;
            let new = faults.apply(now);
            new.validate()?;
            print!(
                "{}",
                control::request(&control, "PUT", "/faults", &serde_json::to_string(&new)?).await?
            );
            Ok(())
        }
        Cmd::Stats { control } => {
            print!("{}", control::request(&control, "GET", "/stats", "").await?);
            Ok(())
        }
    }
}
