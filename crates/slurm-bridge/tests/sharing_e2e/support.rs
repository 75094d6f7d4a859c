//! What the sharing tests share: a hybrid node with cgroups, the node agent as a process, pods
//! that report their CPUs, and Slurm's CPU_IDs.

use crate::e2e::controllers::Controllers;
use crate::e2e::{self, Env, wait_some};
use crate::e2e::{temp_dir, terminate, write_config};
use kube::api::LogParams;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(90);

/// One hybrid node, `node-1`: slurmd with cgroups owning the host's CPUs, and a real kubelet;
/// the scheduler (asking `default_mem_per_cpu` MiB per CPU for pods that set no memory) and the
/// controllers run in-process.
pub async fn start(default_mem_per_cpu: Option<u64>) -> (Env, Controllers) {
    let slurm_opts = slurm_testenv::InstanceOptions {
        slurmd_nodes: 1,
        cgroups: true,
        ..Default::default()
    };
    let mut kube_opts = kube_testenv::InstanceOptions::with_nodes(1);
    kube_opts.kubelet_nodes = 1;
    let mut env = Env::start_with(slurm_opts, kube_opts).await;
    let slurm = e2e::rest_client(&env.slurm);
    env.start_scheduler_opts(slurm, tokio::sync::watch::channel(true).1, |o| {
        o.config.default_mem_per_cpu_mib = default_mem_per_cpu;
    })
    .await;
    let controllers = Controllers::start(&env, |_| {}).await;
    (env, controllers)
}

/// `slurm-bridge node-agent` for `node-1`, started as an admin would (config file, Slurm token
/// file), connected to the node's containerd; stopped when dropped.
pub struct NodeAgent {
    child: std::process::Child,
    pub log: PathBuf,
}

impl NodeAgent {
    /// Starts the agent and waits until the runtime has registered it.
    pub async fn start(env: &Env) -> NodeAgent {
        Self::start_with(env, &[]).await
    }

    /// Starts the agent as the node's `dra.cpu` DRA driver too (`--dra-cpu`, the kubelet's
    /// folders and containerd's CDI folder, Kubernetes through KUBECONFIG), and waits until the
    /// runtime and the kubelet have registered it.
    pub async fn start_dra(env: &Env) -> NodeAgent {
        let dirs = env.kube_env.kubelet_dirs("node-1").expect("kubelet node-1");
        let dra_socket = dirs.plugins.join("dra.cpu/dra.sock");
        let endpoint = dirs
            .kubelet_path(&dra_socket)
            .expect("under the kubelet's root");
        let path = |p: &std::path::Path| p.display().to_string();
        let agent = Self::start_with(
            env,
            &[
                "--dra-cpu".into(),
                format!("--kubelet-registry-dir={}", path(&dirs.plugins_registry)),
                format!("--kubelet-plugins-dir={}", path(&dirs.plugins)),
                format!("--kubelet-dra-endpoint={}", path(&endpoint)),
                format!("--cdi-dir={}", path(&dirs.cdi)),
            ],
        )
        .await;
        agent
            .wait_log("the kubelet registered the dra.cpu plugin")
            .await;
        // Ready: with --dra-cpu also the kubelet's registration and the published slices.
        agent.wait_ready().await;
        agent
    }

    async fn start_with(env: &Env, extra: &[String]) -> NodeAgent {
        let dir = temp_dir("node-agent");
        let config = write_config(env, &dir, "");
        let log = dir.join("agent.log");
        let socket = env.kube_env.nri_socket("node-1").expect("kubelet node-1");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
            .args(["node-agent", "--node", "node-1", "--config"])
            .arg(&config)
            .arg("--nri-socket")
            .arg(&socket)
            // Any free port: tests run agents side by side on one host.
            .arg("--health-probe-bind-address=127.0.0.1:0")
            .args(extra)
            .env("KUBECONFIG", env.kube_env.kubeconfig())
            .env("SLURM_JWT_FILE", env.slurm.token_file())
            .env_remove("SLURM_JWT")
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start slurm-bridge node-agent");
        let agent = NodeAgent { child, log };
        agent.wait_log("NRI: registered with the runtime").await;
        agent
    }

    /// The probe address the agent logged it serves on.
    pub async fn probe_address(&self) -> String {
        wait_some("the agent's probe address", WAIT, async || {
            let log = std::fs::read_to_string(&self.log).ok()?;
            let line = log
                .lines()
                .find(|l| l.contains("serving /healthz, /readyz and /metrics"))?;
            let addr = line.split("addr=").nth(1)?;
            Some(addr.split_whitespace().next()?.to_string())
        })
        .await
    }

    /// GET `path` of the agent's probe server: (status, body).
    pub async fn get(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.probe_address().await;
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .unwrap_or_else(|e| panic!("the agent's probe server {addr}: {e}"));
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let code = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (code, body)
    }

    /// Waits until the agent's /readyz answers 200, and checks it turned ready only after
    /// containerd's synchronization (before it, containerd creates containers without it).
    pub async fn wait_ready(&self) {
        wait_some("the node agent's /readyz answers 200", WAIT, async || {
            (self.get("/readyz").await.0 == 200).then_some(())
        })
        .await;
        let log = std::fs::read_to_string(&self.log).unwrap();
        let at = |text: &str| {
            log.find(text)
                .unwrap_or_else(|| panic!("the agent's log lacks {text:?}:\n{log}"))
        };
        assert!(
            at("NRI: synchronizing") < at("node agent ready"),
            "the agent turned ready before containerd's synchronization:\n{log}"
        );
    }

    /// Waits until the agent's log has `text`.
    pub async fn wait_log(&self, text: &str) {
        wait_some(
            &format!("node agent log shows {text:?}"),
            WAIT,
            async || {
                std::fs::read_to_string(&self.log)
                    .ok()
                    .filter(|l| l.contains(text))
                    .map(|_| ())
            },
        )
        .await;
    }

    /// SIGTERM, and the exit status.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        let status = terminate(&mut self.child).await;
        std::mem::forget(self);
        status
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bridge pod (not exclusive: it shares the node with batch jobs) running `script` with
/// `sh -c` in the kubelet node's busybox image, with `resources`, never restarted.
pub fn pod(env: &Env, name: &str, resources: Value, script: &str) -> Value {
    let image = env.kube_env.image().expect("kubelet nodes");
    e2e::pod(
        name,
        json!({"slurmjob.slinky.slurm.net/exclusive": "false"}),
        json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script], "resources": resources}],
        }),
    )
}

/// A script line printing the CPUs its shell may run on, as `cpus=<list>`.
pub const PRINT_CPUS: &str = "echo cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)";

/// The CPU lists printed by [`PRINT_CPUS`] in `text`, in order.
pub fn printed_cpus(text: &str) -> Vec<BTreeSet<u32>> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("cpus="))
        .map(|l| slurm_bridge::resources::cpulist::parse_cpu_list(l).expect("a CPU list"))
        .collect()
}

/// The pod's logs; empty while they cannot be read.
pub async fn logs(env: &Env, pod: &str) -> String {
    env.pods()
        .logs(pod, &LogParams::default())
        .await
        .unwrap_or_default()
}

/// Waits until `pod` has printed a CPU list for which `ok` holds; returns it.
pub async fn wait_pod_cpus(
    env: &Env,
    pod: &str,
    what: &str,
    ok: impl Fn(&BTreeSet<u32>) -> bool,
) -> BTreeSet<u32> {
    wait_some(&format!("{pod} prints CPUs {what}"), WAIT, async || {
        printed_cpus(&logs(env, pod).await)
            .into_iter()
            .rev()
            .find(&ok)
    })
    .await
}

/// The machine CPUs of Slurm job `id`'s `CPU_IDs` (`scontrol show -d job`), through the
/// host's CPU map slurm-testenv described the node with.
pub fn job_cpus(env: &Env, id: impl std::fmt::Display) -> BTreeSet<u32> {
    let text = env
        .slurm
        .run(&["scontrol", "show", "-d", "job", &id.to_string()])
        .unwrap();
    let list = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("CPU_IDs="))
        .unwrap_or_else(|| panic!("no CPU_IDs in {text}"));
    let ids: Vec<u32> = slurm_bridge::resources::cpulist::parse_cpu_list(list)
        .unwrap()
        .into_iter()
        .collect();
    let host = env.slurm.host_cpus().expect("slurm-testenv with cgroups");
    host.to_machine(&ids).into_iter().collect()
}

/// The output file of batch job `id` (its working folder is slurm-testenv's `work`).
pub fn batch_output(env: &Env, id: &str) -> PathBuf {
    env.slurm.dir().join("work").join(format!("slurm-{id}.out"))
}

/// Submits a batch job of one task on node-1 with `--mem=<mem>` running `script`; its id.
pub fn sbatch(env: &Env, mem: &str, script: &str) -> String {
    env.slurm
        .run(&[
            "sbatch",
            "--parsable",
            "-w",
            "node-1",
            "-n",
            "1",
            &format!("--mem={mem}"),
            "--wrap",
            script,
        ])
        .expect("sbatch")
        .trim()
        .to_string()
}

/// Waits until the batch job's output has a line for which `ok` holds; returns the output.
pub async fn wait_output(env: &Env, id: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let out = batch_output(env, id);
    wait_some(
        &format!("batch job {id}'s output {what}"),
        WAIT,
        async || {
            std::fs::read_to_string(&out)
                .ok()
                .filter(|t| t.lines().any(&ok))
        },
    )
    .await
}
