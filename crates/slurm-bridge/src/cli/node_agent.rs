//! `slurm-bridge node-agent`: the containerd NRI plugin that pins the containers of the pods the
//! bridge bound on this node to their Slurm job's CPUs ([`crate::node_agent`], docs/hybrid.md);
//! with `--dra-cpu` also the node's `dra.cpu` DRA driver (docs/dra.md).

use crate::config::Config;
use crate::node_agent::dra_cpu::kubelet::{self as dra_plugin, DriverConfig};
use crate::node_agent::{Agent, Health, Metrics, Topology, Unmanaged};
use crate::resources::cpulist::parse_cpu_list;
use anyhow::Context;
use prometheus_client::registry::Registry;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `node-agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeAgentArgs {
    /// This node's Kubernetes name (the chart passes `spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    pub node: String,
    /// Slurm's name for this node, when it differs (its `slinky.slurm.net/slurm-nodename` label).
    #[arg(long)]
    pub slurm_node: Option<String>,
    /// containerd's NRI socket.
    #[arg(long, default_value = "/var/run/nri/nri.sock")]
    pub nri_socket: PathBuf,
    /// Containers of pods the bridge did not bind: `leave` them as the kubelet made them, or
    /// confine them to a CPU list such as `0-1` (e.g. Slurm's CpuSpecList cores).
    #[arg(long, default_value = "leave", value_parser = parse_unmanaged)]
    pub unmanaged_cpus: Unmanaged,
    /// The sysfs this machine's CPU topology is read from.
    #[arg(long, default_value = "/sys", hide = true)]
    pub sysfs: PathBuf,
    /// The plugin's index among NRI plugins (two digits; lower runs first).
    #[arg(long, default_value = "10")]
    pub plugin_index: String,
    /// Also be this node's `dra.cpu` DRA driver: publish its CPUs as a ResourceSlice, prepare
    /// the claims the bridge wrote through the kubelet's DRA plugin API, pin to their CPUs.
    /// Needs Kubernetes API access (in-cluster or KUBECONFIG).
    #[arg(long)]
    pub dra_cpu: bool,
    /// The kubelet's plugin registration folder (with `--dra-cpu`).
    #[arg(long, default_value = "/var/lib/kubelet/plugins_registry")]
    pub kubelet_registry_dir: PathBuf,
    /// The kubelet's plugins folder; the DRA socket is `<dir>/dra.cpu/dra.sock` (with
    /// `--dra-cpu`).
    #[arg(long, default_value = "/var/lib/kubelet/plugins")]
    pub kubelet_plugins_dir: PathBuf,
    /// The DRA socket's path as the kubelet sees it, when the kubelet sees the plugins folder
    /// under another path than the agent (default: the agent's path).
    #[arg(long)]
    pub kubelet_dra_endpoint: Option<PathBuf>,
    /// The folder of CDI specs containerd reads (its `cdi_spec_dirs`) (with `--dra-cpu`).
    #[arg(long, default_value = "/var/run/cdi")]
    pub cdi_dir: PathBuf,
    /// Address of /healthz, /readyz and /metrics (port 0: any free port, as logged). /readyz
    /// answers 200 while the agent is registered with containerd's NRI (with `--dra-cpu`, also
    /// its kubelet plugin registered and its ResourceSlices published), else 503 and why.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: std::net::SocketAddr,
}

fn parse_unmanaged(s: &str) -> Result<Unmanaged, String> {
    if s.trim().eq_ignore_ascii_case("leave") {
        return Ok(Unmanaged::Leave);
    }
    let cpus = parse_cpu_list(s).map_err(|e| format!("{e}, or `leave`"))?;
    if cpus.is_empty() {
        return Err("an empty CPU list: give `leave` or CPUs such as 0-1".into());
    }
    Ok(Unmanaged::Cpus(cpus.into_iter().map(i64::from).collect()))
}

/// Runs the agent until SIGTERM/SIGINT, reconnecting to the runtime when it restarts.
pub async fn run(cfg: Config, args: NodeAgentArgs) -> anyhow::Result<()> {
    let topology = Topology::read(&args.sysfs)
        .with_context(|| format!("reading the CPU topology under {}", args.sysfs.display()))?;
    let slurm = super::process::slurm_client(&cfg)?;
    let listener = crate::server::bind(args.health_probe_bind_address).await?;
    let mut registry = Registry::default();
    let metrics = Metrics::new(&mut registry);
    let health = Health::new(args.dra_cpu);
    let cluster = (!cfg.cluster_name.is_empty()).then(|| cfg.cluster_name.clone());
    let slurm_node = args.slurm_node.clone().unwrap_or_else(|| args.node.clone());
    tracing::info!(
        node = %args.node,
        slurm_node = %slurm_node,
        socket = %args.nri_socket.display(),
        cores = topology.cpus.slurm_cores(),
        "node agent starting"
    );
    let mut signals = super::process::signals()?;
    let mut agent = Agent::new(
        slurm,
        cluster,
        slurm_node,
        topology.clone(),
        args.unmanaged_cpus,
    )
    .with_metrics(metrics);
    let dra = if args.dra_cpu {
        // Read before the NRI connection: its synchronization pins by the claims.
        let prepared = dra_plugin::load_prepared(&args.cdi_dir)?;
        agent = agent.with_prepared(prepared.clone());
        let client =
            crate::k8s::rate_limit::client(crate::k8s::rate_limit::Limits::new(50.0, 100)?)
                .await
                .context(
                    "connecting to Kubernetes (KUBECONFIG or in-cluster config) for --dra-cpu",
                )?;
        let config = DriverConfig {
            node: args.node.clone(),
            registry_dir: args.kubelet_registry_dir.clone(),
            plugins_dir: args.kubelet_plugins_dir.clone(),
            kubelet_endpoint: args.kubelet_dra_endpoint.clone(),
            cdi_dir: args.cdi_dir.clone(),
        };
        futures::future::Either::Left(dra_plugin::run(
            client,
            config,
            topology,
            prepared,
            health.clone(),
        ))
    } else {
        futures::future::Either::Right(futures::future::pending())
    };
    let probes = crate::server::serve_with_reason(
        listener,
        health.not_ready(),
        Arc::new(registry),
        futures::future::pending(),
    );
    tokio::select! {
        r = crate::node_agent::serve(agent, &args.nri_socket, &args.plugin_index, health) => r.map_err(Into::into),
        r = dra => r.map_err(Into::into),
        r = probes => r.context("serving probes"),
        _ = futures::StreamExt::next(&mut signals) => {
            tracing::info!("node agent stopping; pinned containers keep their CPUs, prepared claims their CDI specs");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmanaged_cpus_is_leave_or_a_cpu_list() {
        assert_eq!(parse_unmanaged("leave").unwrap(), Unmanaged::Leave);
        assert_eq!(
            parse_unmanaged("0-1").unwrap(),
            Unmanaged::Cpus([0, 1].into())
        );
        let e = parse_unmanaged("some").unwrap_err();
        assert!(e.contains("expected") && e.contains("leave"), "{e}");
        assert!(parse_unmanaged("").unwrap_err().contains("empty"));
    }
}
