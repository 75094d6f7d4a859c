//! Booting one control plane: its certificates and kubeconfig, etcd, kube-apiserver,
//! kube-controller-manager (and kube-scheduler), the CRDs, the workload controllers, and the
//! node agent; and the ports each daemon gets.

use super::state::{read_meta, write_file, write_meta};
use super::{
    FEATURE_GATES, Instance, InstanceOptions, KubeletMeta, RUNTIME_CONFIG, SERVICE_CIDR, client_for,
};
use crate::agent::{self, AgentHandle, AgentOptions, NodeSpec};
use crate::error::{Error, Result};
use crate::kubeconfig::kubeconfig_yaml;
use crate::launcher::{Launcher, Probe, http_get_plain, wait_nodes_schedulable};
use crate::realnodes;
use crate::{crds, pki};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Ports of one instance, by role.
pub(super) struct Ports {
    pub(super) etcd_client: u16,
    pub(super) etcd_peer: u16,
    pub(super) apiserver: u16,
    pub(super) controller_manager: u16,
    pub(super) scheduler: u16,
    pub(super) jobset: [u16; 3],
    pub(super) lws: [u16; 3],
    pub(super) trainer: [u16; 3],
    pub(super) kueue: [u16; 3],
}

impl Ports {
    pub(super) const COUNT: usize = 17;

    pub(super) fn new(p: &[u16]) -> Ports {
        Ports {
            etcd_client: p[0],
            etcd_peer: p[1],
            apiserver: p[2],
            controller_manager: p[3],
            scheduler: p[4],
            jobset: [p[5], p[6], p[7]],
            lws: [p[8], p[9], p[10]],
            trainer: [p[11], p[12], p[13]],
            kueue: [p[14], p[15], p[16]],
        }
    }

    pub(super) fn named(p: &[u16]) -> BTreeMap<String, u16> {
        [
            "etcd-client",
            "etcd-peer",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "jobset-webhook",
            "jobset-metrics",
            "jobset-health",
            "lws-webhook",
            "lws-metrics",
            "lws-health",
            "trainer-webhook",
            "trainer-metrics",
            "trainer-health",
            "kueue-webhook",
            "kueue-metrics",
            "kueue-health",
        ]
        .iter()
        .zip(p)
        .map(|(k, v)| (k.to_string(), *v))
        .collect()
    }
}

impl Instance {
    pub(super) async fn boot(
        opts: &InstanceOptions,
        bins: &[PathBuf],
        dir: &Path,
        ports: &Ports,
        server: &str,
        launcher: &mut Launcher,
        real: Option<(&realnodes::Binaries, &KubeletMeta)>,
    ) -> Result<(kube::Client, AgentHandle)> {
        let kube_bin = &bins[0];
        let kubelet_names = real.map(|(_, k)| k.nodes.clone()).unwrap_or_default();
        // With kubelet nodes the instance has a service CIDR of its own, whose `kubernetes`
        // Service address pods reach (crate::realnodes::forward).
        let service_cidr = real
            .map(|(_, k)| realnodes::service_cidr(k.slot))
            .unwrap_or_else(|| SERVICE_CIDR.to_string());
        let extra_names: Vec<String> = real
            .map(|(_, k)| vec![realnodes::kubernetes_service_ip(k.slot)])
            .unwrap_or_default();
        let pki = pki::generate(&kubelet_names, &extra_names)?;
        let p = dir.join("pki");
        for (file, text, mode) in [
            ("ca.crt", &pki.ca_cert, 0o644),
            // kube-apiserver's client certificate towards kubelets (logs, exec).
            ("admin.crt", &pki.admin_cert, 0o644),
            ("admin.key", &pki.admin_key, 0o600),
            ("serving.crt", &pki.serving_cert, 0o644),
            ("serving.key", &pki.serving_key, 0o600),
            ("sa.key", &pki.sa_key, 0o600),
            ("sa.pub", &pki.sa_pub, 0o644),
        ] {
            write_file(&p.join(file), text, mode)?;
        }
        let kubeconfig = dir.join("kubeconfig");
        write_file(&kubeconfig, &kubeconfig_yaml(server, &pki), 0o600)?;

        let etcd_url = format!("http://127.0.0.1:{}", ports.etcd_client);
        let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
        launcher.spawn(
            "etcd",
            &bins[1].join("etcd"),
            &[
                "--name=default".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                // Test data lives and dies with the instance: durability costs only time.
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        )?;
        // Record the process group at once, so a crash from here on leaves nothing behind.
        let mut meta = read_meta(dir).ok_or_else(|| Error::Invalid("meta.json vanished".into()))?;
        meta.pgid = launcher.pgid;
        meta.leader = launcher.leader;
        write_meta(dir, &meta)?;
        launcher
            .wait_until("etcd", || {
                http_get_plain(ports.etcd_client, "/health").is_some_and(|b| b.contains("true"))
            })
            .await?;

        let pkis = |f: &str| p.join(f).display().to_string();
        let mut apiserver_flags = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.apiserver),
            format!("--tls-cert-file={}", pkis("serving.crt")),
            format!("--tls-private-key-file={}", pkis("serving.key")),
            format!("--client-ca-file={}", pkis("ca.crt")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", pkis("sa.pub")),
            format!("--service-account-signing-key-file={}", pkis("sa.key")),
            format!("--service-cluster-ip-range={service_cidr}"),
            "--authorization-mode=Node,RBAC".into(),
            format!("--runtime-config={RUNTIME_CONFIG}"),
            format!("--feature-gates={FEATURE_GATES}"),
            "--allow-privileged=true".into(),
            format!("--profiling={}", opts.profiling),
            format!("--cert-dir={}", dir.join("pki").display()),
            // kubectl logs/exec: the kubelet nodes' addresses are not names anyone resolves.
            "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
            format!("--kubelet-client-certificate={}", pkis("admin.crt")),
            format!("--kubelet-client-key={}", pkis("admin.key")),
        ];
        if real.is_some() {
            // Webhooks and aggregated APIs behind a Service are reached at a ready endpoint
            // (a pod IP, routed to the nodes' CNI bridges), as no kube-proxy makes ClusterIPs
            // work on the host.
            apiserver_flags.push("--enable-aggregator-routing=true".into());
        }
        if is_large(opts) {
            // New nodes get no not-ready taint that the controller manager would have to lift
            // one by one (they are created Ready; a node that turns NotReady is still tainted).
            apiserver_flags.push("--disable-admission-plugins=TaintNodesByCondition".into());
        }
        launcher.spawn(
            "kube-apiserver",
            &kube_bin.join("kube-apiserver"),
            &apiserver_flags,
        )?;
        let client = client_for(&kubeconfig).await?;
        let probe = Probe::new(&kubeconfig).await?;
        launcher
            .wait_until_async("kube-apiserver", || probe.ok("/readyz"))
            .await?;

        let kc = kubeconfig.display().to_string();
        let auth_flags = |port: u16| {
            vec![
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                "--bind-address=127.0.0.1".to_string(),
                format!("--secure-port={port}"),
                "--leader-elect=false".to_string(),
                format!("--feature-gates={FEATURE_GATES}"),
            ]
        };
        let mut kcm = auth_flags(ports.controller_manager);
        kcm.extend([
            format!("--service-account-private-key-file={}", pkis("sa.key")),
            format!("--root-ca-file={}", pkis("ca.crt")),
            format!("--service-cluster-ip-range={service_cidr}"),
            format!(
                "--controllers={}",
                opts.controllers.as_deref().unwrap_or(if is_large(opts) {
                    // The TTL controller annotates every node, all of them anew each time the
                    // cluster crosses a size step; the agent reads no ConfigMap or Secret.
                    "*,-ttl-controller"
                } else {
                    "*"
                })
            ),
            // The node lifecycle controller looks every second (default 5 s), so new nodes lose
            // their not-ready taint quickly.
            "--node-monitor-period=1s".into(),
            format!(
                "--node-monitor-grace-period={}s",
                node_monitor_grace_period(opts).as_secs()
            ),
            // 100/200, or a tenth of the node count with thousands of nodes: it lifts each new
            // node's not-ready taint (a GET and a PATCH) and annotates it (the TTL controller).
            format!("--kube-api-qps={}", kcm_qps(opts.nodes.len())),
            format!("--kube-api-burst={}", 2 * kcm_qps(opts.nodes.len())),
        ]);
        launcher.spawn(
            "kube-controller-manager",
            &kube_bin.join("kube-controller-manager"),
            &kcm,
        )?;
        if opts.kube_scheduler {
            let mut flags = auth_flags(ports.scheduler);
            flags.extend(opts.kube_scheduler_args.iter().cloned());
            launcher.spawn("kube-scheduler", &bins[6].join("kube-scheduler"), &flags)?;
        }

        let mut more_crds = Vec::new();
        if opts.trainer {
            more_crds.extend(crds::read_dir(&bins[4].join("crds"))?);
        }
        if opts.kueue {
            more_crds.extend(crds::read_dir(&bins[5].join("crds"))?);
        }
        crds::install(&client, opts.workload_controllers, &more_crds).await?;
        {
            use crate::workloads::{self, JOBSET, KUEUE, LWS, TRAINER};
            let jobset = opts.workload_controllers || opts.trainer;
            let mut started = Vec::new();
            if jobset {
                workloads::start(&JOBSET, &client, launcher, &bins[2], dir, &kc, ports.jobset)
                    .await?;
                started.push((&JOBSET, ports.jobset));
            }
            if opts.workload_controllers {
                workloads::start(&LWS, &client, launcher, &bins[3], dir, &kc, ports.lws).await?;
                started.push((&LWS, ports.lws));
            }
            if opts.kueue {
                workloads::start(&KUEUE, &client, launcher, &bins[5], dir, &kc, ports.kueue)
                    .await?;
                started.push((&KUEUE, ports.kueue));
            }
            if opts.trainer {
                workloads::start(
                    &TRAINER,
                    &client,
                    launcher,
                    &bins[4],
                    dir,
                    &kc,
                    ports.trainer,
                )
                .await?;
                started.push((&TRAINER, ports.trainer));
            }
            for (c, p) in started {
                workloads::wait_ready(c, launcher, p).await?;
            }
        }

        // Pods need the `default` ServiceAccount, which the controller manager creates.
        let sa: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(client.clone(), "default");
        launcher
            .wait_until_async("kube-controller-manager", || async {
                sa.get_opt("default").await.ok().flatten().is_some()
            })
            .await?;

        // node-1 .. node-N are the kubelets'; the agent serves the others.
        let (kubelet_specs, simulated): (Vec<NodeSpec>, Vec<NodeSpec>) = opts
            .nodes
            .iter()
            .cloned()
            .partition(|n| kubelet_names.contains(&n.name));
        let kubelet_specs: Vec<NodeSpec> = kubelet_names
            .iter()
            .map(|name| {
                kubelet_specs
                    .iter()
                    .find(|n| n.name == *name)
                    .cloned()
                    .unwrap_or_else(|| NodeSpec {
                        name: name.clone(),
                        ..Default::default()
                    })
            })
            .collect();
        if let Some((real_bins, k)) = real {
            realnodes::start(
                launcher,
                real_bins,
                dir,
                &read_meta(dir).map(|m| m.name).unwrap_or_default(),
                k.slot,
                &kubelet_specs,
                &pki,
                server,
            )
            .await?;
        }
        let agent_opts = AgentOptions {
            node_monitor_grace_period: node_monitor_grace_period(opts),
            ..AgentOptions::default()
        };
        let agent = agent::start(client.clone(), simulated.clone(), agent_opts)
            .await
            .map_err(|e| Error::Agent(e.to_string()))?;
        if !kubelet_specs.is_empty() {
            // A kubelet that exits says why at once (its log's tail), rather than at the end of
            // the nodes' wait.
            let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
            let names = kubelet_names.clone();
            launcher
                .wait_until_async("kubelet-node-1", || {
                    let nodes = nodes.clone();
                    let names = names.clone();
                    async move {
                        for n in &names {
                            let Ok(Some(node)) = nodes.get_opt(n).await else {
                                return false;
                            };
                            if !crate::launcher::schedulable(&node) {
                                return false;
                            }
                        }
                        true
                    }
                })
                .await?;
        }
        let mut all = simulated;
        all.extend(kubelet_specs);
        wait_nodes_schedulable(&client, &all).await?;
        Ok((client, agent))
    }
}

/// The controller manager's `--node-monitor-grace-period`: the one asked for, else 50 s
/// (Kubernetes' default) or, with thousands of nodes, four of the agent's stretched Lease
/// periods ([`agent::grace_period_for`]).
fn node_monitor_grace_period(opts: &InstanceOptions) -> Duration {
    opts.node_monitor_grace_period
        .unwrap_or_else(|| agent::grace_period_for(opts.nodes.len(), &AgentOptions::default()))
}

/// kube-controller-manager's client QPS for an instance of `nodes` nodes.
fn kcm_qps(nodes: usize) -> usize {
    (nodes / 10).max(100)
}

/// More nodes than this at start make a large instance: new nodes get no not-ready taint and
/// the TTL controller is off (docs/kube-testenv.md, What runs), which saves the API server three
/// node writes per node.
pub(crate) const LARGE_INSTANCE_NODES: usize = 1_000;

/// True for an instance started with more than [`LARGE_INSTANCE_NODES`] nodes.
fn is_large(opts: &InstanceOptions) -> bool {
    opts.nodes.len() > LARGE_INSTANCE_NODES
}
