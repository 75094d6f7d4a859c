//! The chart's alerts (docs/operations.md, "Alerts"): its rules pass `promtool check rules` and
//! the unit tests in helm/slurm-bridge/tests/alerts/alerts-test.yaml, and a real Prometheus
//! (Debian's, `hack/prometheus.sh`) scraping `slurm-bridge run` fires `SlurmBridgePodsWaiting`
//! when a pod's Slurm job pends past the threshold (5 s here), and resolves it once the pod runs.
//! The Grafana dashboard (helm/slurm-bridge/dashboards/slurm-bridge.json) is checked against the
//! same Prometheus: every panel's query is accepted, and every metric it names is one the bridge
//! exports.

mod e2e;

use e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The folder with `prometheus` and `promtool` (fetched once by hack/prometheus.sh).
fn prometheus_bin() -> PathBuf {
    let out = Command::new(e2e::helm::repo_path("../../hack/prometheus.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run hack/prometheus.sh");
    assert!(out.status.success(), "hack/prometheus.sh failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The chart's rule groups (`spec` of its PrometheusRule) for a release in `ns`, with `sets`,
/// written as a Prometheus rules file `dir/rules.yaml`.
fn write_rules(dir: &Path, ns: &str, sets: &[&str]) -> PathBuf {
    let helm = kube_testenv::binaries::helm().expect("helm");
    let mut cmd = Command::new(helm);
    cmd.args(["template", "x", &e2e::helm::chart(), "--namespace", ns])
        .args(["--set", "metrics.prometheusRule.enabled=true"])
        .args(["--show-only", "templates/monitoring.yaml"])
        .env("HELM_CACHE_HOME", dir.join("helm"))
        .env("HELM_CONFIG_HOME", dir.join("helm"))
        .env("HELM_DATA_HOME", dir.join("helm"));
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    let path = dir.join("rules.yaml");
    std::fs::write(&path, serde_json::to_string(&rule["spec"]).unwrap()).unwrap();
    path
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?}: {text}");
    text
}

#[test]
fn the_charts_alert_rules_pass_promtool_and_their_unit_tests() {
    let bin = prometheus_bin();
    let dir = temp_dir("alert-rules");
    write_rules(&dir, "slurm-bridge-system", &[]);
    std::fs::copy(
        e2e::helm::repo_path("../../helm/slurm-bridge/tests/alerts/alerts-test.yaml"),
        dir.join("alerts-test.yaml"),
    )
    .unwrap();
    let checked = run(Command::new(bin.join("promtool"))
        .args(["check", "rules"])
        .arg(dir.join("rules.yaml")));
    assert!(checked.contains("SUCCESS: 7 rules found"), "{checked}");
    let tested = run(Command::new(bin.join("promtool"))
        .args(["test", "rules", "alerts-test.yaml"])
        .current_dir(&dir));
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Prometheus's alerts API: (alertname, state) of each alert.
async fn alerts(url: &str) -> Vec<(String, String)> {
    let Ok(body) = e2e::clients::http_get(&format!("{url}/api/v1/alerts")).await else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                a["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// `s` percent-encoded for a query string (unreserved characters kept).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every panel query of the dashboard (its `$namespace` variable as Grafana's "All").
fn dashboard_queries() -> Vec<String> {
    let path = e2e::helm::repo_path("../../helm/slurm-bridge/dashboards/slurm-bridge.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(d["schemaVersion"].as_i64().is_some() && d["uid"] == "slurm-bridge");
    let panels = d["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    panels
        .iter()
        .flat_map(|p| {
            assert!(p["gridPos"]["w"].as_i64().is_some(), "{p}");
            p["targets"].as_array().expect("targets").clone()
        })
        .map(|t| {
            t["expr"]
                .as_str()
                .expect("expr")
                .replace("$namespace", ".*")
        })
        .collect()
}

/// Families exported only once they have a series (a first error, removal or cancel): the
/// dashboard may name them before they show.
const ON_FIRST_EVENT: &[&str] = &[
    "slurm_bridge_controllers_reconcile_errors",
    "slurm_bridge_controllers_pods_removed",
    "slurm_bridge_controllers_jobs_cancelled",
    "slurm_bridge_controllers_kube_writes",
];

/// The dashboard against a Prometheus that scrapes the bridge (`metrics`: its /metrics text):
/// each query is accepted, and each metric it names is exported (the admission webhooks' only
/// where they run; [`ON_FIRST_EVENT`] once they have a series).
async fn check_dashboard(url: &str, metrics: &str) {
    for q in dashboard_queries() {
        let body = e2e::clients::http_get(&format!("{url}/api/v1/query?query={}", encode(&q)))
            .await
            .unwrap_or_else(|e| panic!("{q}: {e}"));
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{q}: {body}");
        for name in q
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("slurm_bridge_") && !w.starts_with("slurm_bridge_admission_"))
        {
            let family = name.trim_end_matches("_bucket").trim_end_matches("_total");
            assert!(
                metrics.contains(family) || ON_FIRST_EVENT.contains(&family),
                "{q}: the bridge exports no {name}; it has: {:?}",
                metrics
                    .lines()
                    .filter_map(|l| l.strip_prefix("# TYPE "))
                    .collect::<Vec<_>>()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_fires_the_waiting_alert_and_resolves_it() {
    let bin = prometheus_bin();
    let env = Env::start(1).await;
    let dir = temp_dir("alerts-e2e");
    let rules = write_rules(
        &dir,
        "slurm-bridge-system",
        &["metrics.prometheusRule.podsWaitingFor=5s"],
    );

    // The bridge as an admin runs it, its metrics on a known port.
    let probes = format!("127.0.0.1:{}", free_port());
    let config = write_config(&env, &dir, "");
    let mut bridge = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
        .args(["run", "--config"])
        .arg(&config)
        .args(["--leader-elect=false", "--slurm-poll-interval", "200ms"])
        .args(["--health-probe-bind-address", &probes])
        .env("KUBECONFIG", env.kube_env.kubeconfig())
        .env("SLURM_JWT_FILE", env.slurm.token_file())
        .env_remove("SLURM_JWT")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("run.log")).unwrap())
        .spawn()
        .unwrap();

    // Prometheus scrapes it every second, labelled as the chart's namespace would be, and
    // evaluates the chart's rules every second.
    let web = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: slurm-bridge\n    static_configs:\n      - targets: ['{probes}']\n        labels:\n          namespace: slurm-bridge-system\n",
            rules.display()
        ),
    )
    .unwrap();
    let mut prometheus = Command::new(bin.join("prometheus"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://{web}");

    // One node: the first pod runs, the second's job pends in Slurm.
    env.create_pod(sleeper("first", "3600", 1)).await;
    env.wait_bound(&["first".into()], Duration::from_secs(60))
        .await;
    env.create_pod(sleeper("second", "3600", 1)).await;
    wait_some(
        "SlurmBridgePodsWaiting firing",
        Duration::from_secs(90),
        async || {
            alerts(&url)
                .await
                .contains(&("SlurmBridgePodsWaiting".into(), "firing".into()))
                .then_some(())
        },
    )
    .await;
    let metrics = e2e::clients::http_get(&format!("http://{probes}/metrics"))
        .await
        .unwrap();
    check_dashboard(&url, &metrics).await;
    // No alert about errors or leadership meanwhile.
    let now = alerts(&url).await;
    assert!(
        now.iter().all(|(name, _)| name == "SlurmBridgePodsWaiting"),
        "{now:?}"
    );

    // The first pod goes, the second runs: the alert resolves.
    env.pods()
        .delete("first", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    env.wait_bound(&["second".into()], Duration::from_secs(60))
        .await;
    wait_some(
        "SlurmBridgePodsWaiting resolved",
        Duration::from_secs(60),
        async || {
            (!alerts(&url)
                .await
                .iter()
                .any(|(name, _)| name == "SlurmBridgePodsWaiting"))
            .then_some(())
        },
    )
    .await;
    env.pods()
        .delete("second", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("second", "gone", Duration::from_secs(60), |p| p.is_none())
        .await;
    env.assert_invariants().await;
    let _ = prometheus.kill();
    let _ = prometheus.wait();
    let status = terminate(&mut bridge).await;
    assert!(status.success(), "bridge exit: {status:?}");
}
