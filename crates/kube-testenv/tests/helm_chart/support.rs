//! What the helm chart tests share: the release and its names, `helm` (built from its pinned Go
//! module by kube-testenv, cached) with a private home, renders of the chart with `--set` values
//! or values files, the golden cases, and lookups in the rendered documents.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The release name every render uses.
pub const RELEASE: &str = "sb";
/// The release namespace every render uses.
pub const NAMESPACE: &str = "slinky";
/// `<release>-<chart>`: the prefix of every object name.
pub const PREFIX: &str = "sb-slurm-bridge";

/// The chart, found from this crate's manifest dir.
pub fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../helm/slurm-bridge")
}

/// The golden renders, one file per case of [`CASES`].
pub fn golden_dir() -> PathBuf {
    chart_dir().join("tests/golden")
}

/// Runs helm; returns (success, stdout, stderr).
pub fn helm(args: &[&str]) -> (bool, String, String) {
    let helm = kube_testenv::binaries::helm().expect("build or find the cached helm");
    let home = std::env::temp_dir().join(format!("helm-chart-test-{}", std::process::id()));
    let out = Command::new(helm)
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .expect("run helm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `helm template` of the chart with `--set` values; panics with helm's message on failure.
pub fn render(sets: &[&str]) -> String {
    let (ok, out, err) = try_render(sets);
    assert!(ok, "helm template {sets:?} failed: {err}");
    out
}

/// `helm template` of the chart with `--set` values: (success, stdout, stderr).
pub fn try_render(sets: &[&str]) -> (bool, String, String) {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    helm(&args)
}

/// The YAML documents of a render, empty ones left out.
pub fn documents(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("rendered YAML parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The rendered object of `kind` named `name`; panics if there is none.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// Every rendered object as `Kind/name`.
pub fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// The golden cases: a name and the values that make it. Each major option has its own.
pub const CASES: &[(&str, &[&str])] = &[
    ("default", &[]),
    ("run-mode", &["mode=run"]),
    (
        "self-managed-certs",
        &["admission.certManager.enabled=false"],
    ),
    (
        "namespace-selector",
        &["admission.managedNamespaceSelector.matchLabels.slurm-bridge/managed=true"],
    ),
    (
        "high-availability",
        &[
            "scheduler.replicaCount=2",
            "scheduler.pdb.enabled=true",
            "controllers.replicas=2",
            "controllers.pdb.enabled=true",
            "controllers.pdb.maxUnavailable=1",
            "admission.replicas=3",
            "admission.pdb.enabled=true",
        ],
    ),
    ("admission-disabled", &["admission.enabled=false"]),
    (
        "node-agent-dra-cpu",
        &["nodeAgent.enabled=true", "nodeAgent.draCpu=true"],
    ),
    (
        "release-finalizers-cancel-running",
        &["releaseFinalizers.cancelRunning=true"],
    ),
    (
        "run-mode-self-managed",
        &[
            "mode=run",
            "admission.certManager.enabled=false",
            "admission.managedNamespaceSelector.matchLabels.slurm-bridge/managed=true",
        ],
    ),
    (
        "custom",
        &[
            "fullnameOverride=bridge",
            "image.repository=registry.example/slurm-bridge",
            "image.tag=1.2.3",
            "scheduler.image.pullPolicy=Always",
            "scheduler.verbosity=4",
            "controllers.verbosity=slurm_bridge=trace\\,info",
            "controllers.resources.limits.memory=256Mi",
            "admission.resources.limits.memory=64Mi",
            "schedulerConfig.schedulerName=hpc",
            "schedulerConfig.partition=k8s",
            "sharedConfig.slurmRestApi=https://slurmrestd.hpc:6820",
            "sharedConfig.slurmJwtSecret.name=jwt",
            "sharedConfig.slurmJwtSecret.key=SLURM_JWT",
            "scheduler.extraArgs={--workers=8}",
        ],
    ),
];

/// `helm template` with values files (`-f`) and `--set` values.
pub fn try_render_files(files: &[&std::path::Path], sets: &[&str]) -> (bool, String, String) {
    let chart = chart_dir();
    let mut args: Vec<String> = [
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
    ]
    .map(String::from)
    .to_vec();
    for f in files {
        args.extend(["-f".to_string(), f.display().to_string()]);
    }
    for s in sets {
        args.extend(["--set".to_string(), s.to_string()]);
    }
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A JSON array of strings as a `Vec` (empty if `v` is not an array).
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}
