//! The webhook's blast radius (issue 40): the chart's Mutating- and ValidatingWebhookConfigurations,
//! as `helm template` renders them, applied to a real kube-apiserver (kube-testenv) while no
//! webhook runs (the Service they name does not exist, so every call fails).
//!
//! For `managedNamespaces` (the default values), `managedNamespaceSelector` and
//! `failurePolicy: Ignore`:
//! - pods in namespaces the bridge does not manage (an unrelated one, `default`, `kube-system`, the
//!   release namespace) are created and updated as if the bridge were not installed, and so are
//!   pods there naming another scheduler;
//! - in a managed namespace, a pod naming no scheduler (or `default-scheduler`) follows
//!   `failurePolicy`: refused with `Fail`, created untouched with `Ignore`; a pod naming another
//!   scheduler is created (the bridge leaves it alone), and an UPDATE of a pod that does not name
//!   the bridge scheduler (created before the namespace was managed) goes through;
//! - a pod naming the bridge scheduler is the bridge's in any namespace: its CREATE and UPDATE
//!   follow `failurePolicy`.

#[allow(dead_code)]
#[path = "e2e/poll.rs"]
mod poll;
#[path = "e2e/prometheus.rs"]
mod prometheus;

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const RELEASE: &str = "sb";
const RELEASE_NS: &str = "slinky";
/// The chart's default `schedulerConfig.schedulerName`.
const BRIDGE: &str = "slurm-bridge-scheduler";
const OTHER: &str = "other-scheduler";
/// Managed by the default `managedNamespaces`.
const LISTED_NS: &str = "slurm-bridge";
/// Managed by the selector variant (labelled `slurm-bridge/managed=true`).
const LABELLED_NS: &str = "labelled";
/// Managed by no variant.
const UNRELATED_NS: &str = "unrelated";

/// The chart's webhook configurations rendered with `sets`, as a kubectl `List` in `path`.
fn render_webhooks(env: &kube_testenv::Instance, sets: &[&str], path: &Path) -> Vec<Value> {
    let chart =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../helm/slurm-bridge");
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        RELEASE_NS,
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let text = env.helm(&args).unwrap_or_else(|e| panic!("{e}"));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("rendered YAML parses");
    let hooks: Vec<Value> = docs
        .into_iter()
        .filter(|d| {
            d["kind"] == "MutatingWebhookConfiguration"
                || d["kind"] == "ValidatingWebhookConfiguration"
        })
        .collect();
    assert_eq!(hooks.len(), 2, "both webhook configurations rendered");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": hooks});
    std::fs::write(path, serde_json::to_vec_pretty(&list).unwrap()).unwrap();
    hooks
}

/// The `type` label kube-apiserver gives the webhooks of a configuration kind in its admission
/// metrics.
fn metric_type(kind: &str) -> &'static str {
    match kind {
        "MutatingWebhookConfiguration" => "admit",
        _ => "validating",
    }
}

/// The chart's webhook names (`webhooks[].name`), in both configurations.
const WEBHOOK_NAMES: [&str; 2] = [
    "pods.slinky.slurm.net",
    "managed-namespaces.pods.slinky.slurm.net",
];

/// How many calls kube-apiserver has made to the chart's webhooks of metric type `ty`
/// ([`metric_type`]) that failed: refused (`Fail`) or let through (`Ignore`). Counted before
/// the request is answered, so a call shows here once its request has its answer.
async fn failed_calls(client: &kube::Client, ty: &str) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    let mut failed = 0.0;
    for metric in [
        "apiserver_admission_webhook_rejection_count",
        "apiserver_admission_webhook_fail_open_count",
    ] {
        for name in WEBHOOK_NAMES {
            failed += prometheus::sample(&text, metric, &[("name", name), ("type", ty)]);
        }
    }
    failed
}

/// Creates one webhook configuration and waits until kube-apiserver calls it: a managed pod's
/// dry-run CREATE counts a failed call of its kind. The validating configuration goes first:
/// with `Fail`, a refusing mutating webhook would keep it from being called.
async fn create_in_force(env: &kube_testenv::Instance, v: &Variant, hook: &Value, path: &Path) {
    let kind = hook["kind"].as_str().unwrap();
    let client = env.client();
    let before = failed_calls(&client, metric_type(kind)).await;
    std::fs::write(path, serde_json::to_vec_pretty(hook).unwrap()).unwrap();
    env.kubectl(&["create", "-f", path.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("{}: {e}", v.name));
    wait_for(&format!("{}: {kind} in force", v.name), async || {
        let _ = create(&client, v.managed[0], None, true).await;
        failed_calls(&client, metric_type(kind)).await > before
    })
    .await;
}

/// Waits until kube-apiserver calls none of the chart's webhooks any more: a pod naming the
/// bridge scheduler (sent to both kinds while they exist) is created without a failed call.
async fn wait_removed(client: &kube::Client, v: &Variant) {
    let failed =
        async || failed_calls(client, "admit").await + failed_calls(client, "validating").await;
    wait_for(&format!("{}: configurations removed", v.name), async || {
        let before = failed().await;
        let created = create(client, UNRELATED_NS, Some(BRIDGE), true)
            .await
            .is_ok();
        created && failed().await == before
    })
    .await;
}

fn pod(name: &str, ns: &str, scheduler: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "main", "image": "busybox",
        "command": ["sleep", "infinity"]}]});
    if let Some(s) = scheduler {
        spec["schedulerName"] = json!(s);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .unwrap()
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", SEQ.fetch_add(1, Ordering::Relaxed))
}

/// Creates a pod (`dry_run`: not stored); the API server's answer.
async fn create(
    client: &kube::Client,
    ns: &str,
    scheduler: Option<&str>,
    dry_run: bool,
) -> Result<Pod, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pp = PostParams {
        dry_run,
        ..Default::default()
    };
    api.create(&pp, &pod(&unique("p"), ns, scheduler))
        .await
        .map_err(|e| e.to_string())
}

/// Adds a label to pod `ns/name` (an UPDATE through admission); the API server's answer.
async fn touch(client: &kube::Client, ns: &str, name: &str) -> Result<Pod, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = json!({"metadata": {"labels": {"touched": unique("t")}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| e.to_string())
}

/// A refusal because a webhook could not be called (not for another reason).
fn refused_by_webhook(what: &str, r: Result<Pod, String>) {
    match r {
        Ok(_) => panic!("{what}: admitted, but the webhook is down and failurePolicy is Fail"),
        Err(e) => assert!(
            e.contains("failed calling webhook"),
            "{what}: refused, but not for the webhook: {e}"
        ),
    }
}

fn admitted(what: &str, r: Result<Pod, String>) -> Pod {
    r.unwrap_or_else(|e| panic!("{what}: refused while the webhook is down: {e}"))
}

fn scheduler_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or_default()
}

async fn create_namespace(client: &kube::Client, name: &str, labels: Value) {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels},
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Waits for the `default` ServiceAccount of `ns` (pods cannot be created before it exists).
async fn wait_default_account(client: &kube::Client, ns: &str) {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sas.get_opt("default").await.unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "no default ServiceAccount in {ns}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`poll::wait_until`] for at most 20 s.
async fn wait_for(what: &str, check: impl AsyncFnMut() -> bool) {
    poll::wait_until(what, Duration::from_secs(20), check).await
}

struct Variant {
    name: &'static str,
    sets: &'static [&'static str],
    /// Namespaces the variant manages.
    managed: &'static [&'static str],
    /// Namespaces it does not manage.
    unmanaged: &'static [&'static str],
    fail: bool,
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "managedNamespaces (default values)",
        sets: &[],
        managed: &[LISTED_NS],
        unmanaged: &[
            UNRELATED_NS,
            LABELLED_NS,
            "default",
            "kube-system",
            RELEASE_NS,
        ],
        fail: true,
    },
    Variant {
        name: "managedNamespaceSelector",
        sets: &["admission.managedNamespaceSelector.matchLabels.slurm-bridge/managed=true"],
        managed: &[LABELLED_NS],
        unmanaged: &[
            UNRELATED_NS,
            LISTED_NS,
            "default",
            "kube-system",
            RELEASE_NS,
        ],
        fail: true,
    },
    Variant {
        name: "managedNamespaceSelector with matchExpressions",
        sets: &[
            "admission.managedNamespaceSelector.matchExpressions[0].key=slurm-bridge/managed",
            "admission.managedNamespaceSelector.matchExpressions[0].operator=Exists",
        ],
        managed: &[LABELLED_NS],
        unmanaged: &[
            UNRELATED_NS,
            LISTED_NS,
            "default",
            "kube-system",
            RELEASE_NS,
        ],
        fail: true,
    },
    Variant {
        name: "failurePolicy=Ignore",
        sets: &["admission.failurePolicy=Ignore"],
        managed: &[LISTED_NS],
        unmanaged: &[
            UNRELATED_NS,
            LABELLED_NS,
            "default",
            "kube-system",
            RELEASE_NS,
        ],
        fail: false,
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_webhook_down_only_the_bridges_pods_wait() {
    let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions::default())
        .await
        .unwrap();
    let client = env.client();
    for (ns, labels) in [
        (RELEASE_NS, json!({})),
        (LISTED_NS, json!({})),
        (UNRELATED_NS, json!({})),
        (LABELLED_NS, json!({"slurm-bridge/managed": "true"})),
    ] {
        create_namespace(&client, ns, labels).await;
    }
    for ns in [RELEASE_NS, LISTED_NS, UNRELATED_NS, LABELLED_NS, "default"] {
        wait_default_account(&client, ns).await;
    }
    // Pods made before any webhook configuration, to be updated while the webhook is down.
    let pp = PostParams::default();
    let mut old = Vec::new();
    for (ns, scheduler) in [
        (UNRELATED_NS, None),
        (UNRELATED_NS, Some(BRIDGE)),
        (LISTED_NS, None),
        (LABELLED_NS, None),
    ] {
        let name = unique("old");
        Api::<Pod>::namespaced(client.clone(), ns)
            .create(&pp, &pod(&name, ns, scheduler))
            .await
            .unwrap();
        old.push((ns, name, scheduler));
    }
    let dir = std::env::temp_dir().join(format!("webhook-outage-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    for v in VARIANTS {
        let started = Instant::now();
        let file = dir.join("webhooks.json");
        let hooks = render_webhooks(&env, v.sets, &file);
        // Each in force before any check: kube-apiserver calls it (a failed call is counted).
        for kind in [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ] {
            let hook = hooks.iter().find(|h| h["kind"] == kind).unwrap();
            create_in_force(&env, v, hook, &dir.join(format!("{kind}.json"))).await;
        }

        // Not the bridge's: created and updated as if it were not installed.
        for ns in v.unmanaged {
            for scheduler in [None, Some("default-scheduler"), Some(OTHER)] {
                let what = format!("{}: a pod in {ns} naming {scheduler:?}", v.name);
                let p = admitted(&what, create(&client, ns, scheduler, true).await);
                assert_ne!(scheduler_of(&p), BRIDGE, "{what}: mutated");
            }
            if *ns != "kube-system" {
                let what = format!("{}: a pod created and updated in {ns}", v.name);
                let p = admitted(&what, create(&client, ns, None, false).await);
                admitted(
                    &what,
                    touch(&client, ns, p.metadata.name.as_deref().unwrap()).await,
                );
            }
        }
        for (ns, name, scheduler) in &old {
            if scheduler.is_none() {
                admitted(
                    &format!("{}: an UPDATE of {ns}/{name}, naming no scheduler", v.name),
                    touch(&client, ns, name).await,
                );
            }
        }
        // In a managed namespace, a pod naming another scheduler is not the bridge's.
        for ns in v.managed {
            let what = format!("{}: a pod in managed {ns} naming {OTHER}", v.name);
            admitted(&what, create(&client, ns, Some(OTHER), false).await);
        }

        // The bridge's: a pod naming no scheduler in a managed namespace, and a pod naming the
        // bridge scheduler anywhere.
        let mut bridges: Vec<(String, Option<&str>)> = Vec::new();
        for ns in v.managed {
            bridges.push((ns.to_string(), None));
            bridges.push((ns.to_string(), Some("default-scheduler")));
            bridges.push((ns.to_string(), Some(BRIDGE)));
        }
        bridges.push((UNRELATED_NS.into(), Some(BRIDGE)));
        bridges.push(("default".into(), Some(BRIDGE)));
        for (ns, scheduler) in &bridges {
            let what = format!("{}: a pod in {ns} naming {scheduler:?}", v.name);
            let r = create(&client, ns, *scheduler, false).await;
            if v.fail {
                refused_by_webhook(&what, r);
            } else {
                let p = admitted(&what, r);
                assert_eq!(
                    scheduler_of(&p),
                    scheduler.unwrap_or("default-scheduler"),
                    "{what}: untouched with Ignore"
                );
            }
        }
        for (ns, name, _) in old.iter().filter(|o| o.2 == Some(BRIDGE)) {
            let what = format!("{}: an UPDATE of {ns}/{name}, naming {BRIDGE}", v.name);
            let r = touch(&client, ns, name).await;
            if v.fail {
                refused_by_webhook(&what, r);
            } else {
                admitted(&what, r);
            }
        }
        eprintln!(
            "{}: {} webhook entries; checked in {:.1} s",
            v.name,
            hooks
                .iter()
                .map(|h| h["webhooks"].as_array().map_or(0, Vec::len))
                .sum::<usize>(),
            started.elapsed().as_secs_f64()
        );

        env.kubectl(&["delete", "-f", file.to_str().unwrap(), "--wait"])
            .unwrap_or_else(|e| panic!("{}: {e}", v.name));
        // Gone from the API server's view: a pod naming the bridge scheduler is created again,
        // and no webhook call failed for it.
        wait_removed(&client, v).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
