//! The Helm chart's release run as local processes: the chart's values a test cluster needs,
//! the release's manifest, and each Deployment started as `slurm-bridge` with the Deployment's
//! own arguments (in-pod paths and addresses replaced by local ones). Used by helm_install_e2e
//! and helm_migration_e2e.

use super::Env;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A path in the repository, from this crate's folder (`../../helm/slurm-bridge`).
pub fn repo_path(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// This repository's chart.
pub fn chart() -> String {
    repo_path("../../helm/slurm-bridge").display().to_string()
}

/// The `--set` values a release needs on the test cluster: no cert-manager, the webhooks served
/// by a local process at `listen`, the test's Slurm (which runs no MCS plugin), a fast
/// certificate check and job poll.
pub fn test_values(env: &Env, listen: &str) -> Vec<String> {
    vec![
        "admission.certManager.enabled=false".to_string(),
        format!("admission.externalUrl=https://{listen}"),
        format!("sharedConfig.slurmRestApi={}", env.slurm.rest_url()),
        "schedulerConfig.mcsLabel=".to_string(),
        "admission.extraArgs={--self-signed-check-interval=1s}".to_string(),
        "scheduler.extraArgs={--slurm-poll-interval=200ms}".to_string(),
    ]
}

/// Creates each namespace of `names`.
pub async fn create_namespaces(env: &Env, names: &[&str]) {
    for ns in names {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(env.kube.clone())
            .create(&PostParams::default(), &n)
            .await
            .unwrap();
    }
}

/// The objects of `release` in `ns`, from `helm get manifest`.
pub fn manifest(env: &Env, release: &str, ns: &str) -> Vec<Value> {
    let text = env
        .kube_env
        .helm(&["get", "manifest", release, "--namespace", ns])
        .expect("helm get manifest");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("manifest parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// A component started from its Deployment: the process and its log; killed on drop.
pub struct Component {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Component {
    /// What the process has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whom the components authenticate as.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Identity {
    /// Each Deployment's own ServiceAccount (a TokenRequest token): the chart's RBAC decides.
    ServiceAccounts,
    /// The cluster admin (the test's kubeconfig).
    Admin,
}

/// A kubeconfig in `dir` that authenticates as `account` of namespace `ns` with a token from
/// the TokenRequest API.
pub async fn account_kubeconfig(env: &Env, ns: &str, account: &str, dir: &Path) -> PathBuf {
    let sas: Api<ServiceAccount> = Api::namespaced(env.kube.clone(), ns);
    let tr: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600},
    }))
    .unwrap();
    let token = sas
        .create_token_request(account, &PostParams::default(), &tr)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token
        .expect("a token");
    let admin = std::fs::read_to_string(env.kube_env.kubeconfig()).unwrap();
    let ca = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("CA in the admin kubeconfig");
    let path = dir.join(format!("{account}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: {account}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: {account}\ncurrent-context: c\n",
            env.kube_env.server()
        ),
    )
    .unwrap();
    path
}

/// A container argument with its in-pod path or address replaced by the local one.
fn local_arg(a: &str, config_path: &Path, dir: &Path, listen: &str) -> String {
    match a.split_once('=') {
        Some(("--config", _)) => format!("--config={}", config_path.display()),
        Some(("--health-probe-bind-address", _)) => {
            "--health-probe-bind-address=127.0.0.1:0".into()
        }
        Some(("--listen", _)) => format!("--listen={listen}"),
        Some(("--cert-dir", _)) => format!("--cert-dir={}", dir.join("certs").display()),
        _ => a.to_string(),
    }
}

/// Starts every Deployment of `manifest` (a release in namespace `ns`) as a local process with
/// the Deployment's container args, its config file written to `dir/config.yaml`, the webhooks
/// on `listen`, as `identity`; the Slurm token file where the Deployment mounts one.
pub async fn start_components(
    env: &Env,
    manifest: &[Value],
    ns: &str,
    dir: &Path,
    listen: &str,
    identity: Identity,
) -> Vec<Component> {
    let config = manifest
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .and_then(|d| d["data"]["config.yaml"].as_str())
        .expect("the chart's ConfigMap");
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let mut out = Vec::new();
    for d in manifest.iter().filter(|d| d["kind"] == "Deployment") {
        let name = d["metadata"]["name"].as_str().unwrap().to_string();
        let spec = &d["spec"]["template"]["spec"];
        let account = spec["serviceAccountName"].as_str().unwrap_or_default();
        let kubeconfig = match identity {
            Identity::ServiceAccounts => account_kubeconfig(env, ns, account, dir).await,
            Identity::Admin => env.kube_env.kubeconfig(),
        };
        let container = &spec["containers"][0];
        let args: Vec<String> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| local_arg(a.as_str().unwrap(), &config_path, dir, listen))
            .collect();
        let uses_slurm = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["name"] == "SLURM_JWT_FILE");
        let log = dir.join(format!("{name}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"));
        cmd.args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAMESPACE", ns)
            .env("RUST_LOG", "info")
            .env_remove("SLURM_JWT")
            .env_remove("SLURM_JWT_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if uses_slurm {
            // What the chart mounts from the Secret: the Slurm token file.
            cmd.env("SLURM_JWT_FILE", env.slurm.token_file());
        }
        eprintln!(
            "starting {name} as {}: slurm-bridge {}",
            match identity {
                Identity::ServiceAccounts => account,
                Identity::Admin => "admin",
            },
            args.join(" ")
        );
        let child = cmd.spawn().expect("start slurm-bridge");
        out.push(Component { name, child, log });
    }
    out
}

/// Kubernetes clients that act as the chart's scheduler and controllers do: the chart installed
/// as release `rbac` in namespace `slurm-bridge-rbac` (admission off: the test serves its own
/// webhooks), and a token of each component's ServiceAccount, so the chart's RBAC decides every
/// call the in-process components make. Returns (scheduler, controllers).
pub async fn chart_rbac_clients(env: &Env, dir: &Path) -> (kube::Client, kube::Client) {
    const NS: &str = "slurm-bridge-rbac";
    create_namespaces(env, &[NS]).await;
    let mut args = vec![
        "install".to_string(),
        "rbac".into(),
        chart(),
        "--namespace".into(),
        NS.into(),
    ];
    for v in test_values(env, "127.0.0.1:1")
        .into_iter()
        .chain(["admission.enabled=false".to_string()])
    {
        args.extend(["--set".to_string(), v]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.kube_env.helm(&args).unwrap_or_else(|e| panic!("{e}"));
    let accounts: Vec<String> = manifest(env, "rbac", NS)
        .iter()
        .filter(|d| d["kind"] == "ServiceAccount")
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let client_of = async |suffix: &str| {
        let account = accounts
            .iter()
            .find(|a| a.ends_with(suffix))
            .unwrap_or_else(|| panic!("a ServiceAccount *{suffix} in {accounts:?}"));
        let path = account_kubeconfig(env, NS, account, dir).await;
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&path).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        kube::Client::try_from(config).unwrap()
    };
    (
        client_of("-scheduler").await,
        client_of("-controllers").await,
    )
}
