//! Tests of the Helm chart `helm/slurm-bridge` with a real `helm` (built from its pinned Go module
//! by kube-testenv, cached): `helm lint`, `helm template` golden files for the default values and
//! each major option, values the chart must refuse, and least-privilege RBAC: every rule the
//! chart renders must be in an allow-list that mirrors the Kubernetes calls each component's
//! code makes (`crates/slurm-bridge/src`), and every call in the list must be granted.
//!
//! Regenerate the golden files with `UPDATE_GOLDEN=1 cargo test -p kube-testenv --test helm_chart`.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

const RELEASE: &str = "sb";
const NAMESPACE: &str = "slinky";
/// `<release>-<chart>`: the prefix of every object name.
const PREFIX: &str = "sb-slurm-bridge";

fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../helm/slurm-bridge")
}

fn golden_dir() -> PathBuf {
    chart_dir().join("tests/golden")
}

/// Runs helm; returns (success, stdout, stderr).
fn helm(args: &[&str]) -> (bool, String, String) {
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
fn render(sets: &[&str]) -> String {
    let (ok, out, err) = try_render(sets);
    assert!(ok, "helm template {sets:?} failed: {err}");
    out
}

fn try_render(sets: &[&str]) -> (bool, String, String) {
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

fn documents(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("rendered YAML parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn kinds(docs: &[Value]) -> BTreeSet<String> {
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
const CASES: &[(&str, &[&str])] = &[
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

#[test]
fn helm_lint_passes_for_every_case() {
    let chart = chart_dir();
    for (name, sets) in CASES {
        let mut args = vec![
            "lint",
            "--strict",
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
        ];
        for s in *sets {
            args.extend(["--set", s]);
        }
        let (ok, out, err) = helm(&args);
        assert!(ok, "helm lint ({name}) failed:\n{out}\n{err}");
        assert!(
            out.contains("0 chart(s) failed"),
            "helm lint ({name}):\n{out}"
        );
    }
}

#[test]
fn helm_is_the_pinned_version() {
    let (ok, out, err) = helm(&["version", "--short"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("v3.22.0"), "helm version: {out}");
}

#[test]
fn templates_match_the_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut stale = Vec::new();
    for (name, sets) in CASES {
        let rendered = render(sets);
        let path = golden_dir().join(format!("{name}.yaml"));
        if update {
            std::fs::create_dir_all(golden_dir()).unwrap();
            std::fs::write(&path, &rendered).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
                path.display()
            )
        });
        if want != rendered {
            let first = want
                .lines()
                .zip(rendered.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(want.lines().count().min(rendered.lines().count()));
            stale.push(format!(
                "{name}: first difference at line {}: golden {:?}, rendered {:?}",
                first + 1,
                want.lines().nth(first),
                rendered.lines().nth(first)
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "rendered templates differ from the golden files (UPDATE_GOLDEN=1 regenerates them):\n{}",
        stale.join("\n")
    );
}

/// The pre-delete hook (issue 21): a Job running `release-finalizers` under its own
/// ServiceAccount, with the Slurm token and config mounted as the Deployments have them; its
/// objects are hooks (created before the Job, deleted after it succeeds); a value turns it off.
#[test]
fn the_pre_delete_hook_releases_finalizers() {
    let name = format!("{PREFIX}-release-finalizers");
    let docs = documents(&render(&[]));
    for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"] {
        let d = find(&docs, kind, &name);
        let a = &d["metadata"]["annotations"];
        assert_eq!(a["helm.sh/hook"], "pre-delete", "{kind}");
        assert_eq!(
            a["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded",
            "{kind}"
        );
    }
    let weight = |kind: &str| -> i32 {
        find(&docs, kind, &name)["metadata"]["annotations"]["helm.sh/hook-weight"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(weight("ServiceAccount") < weight("Job"));
    assert!(weight("ClusterRoleBinding") < weight("Job"));
    let job = find(&docs, "Job", &name);
    let spec = &job["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], name);
    assert_eq!(spec["restartPolicy"], "Never");
    let c = &spec["containers"][0];
    assert_eq!(
        strings(&c["args"]),
        [
            "release-finalizers",
            "--config=/etc/slurm-bridge/config.yaml"
        ]
    );
    assert!(
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "SLURM_JWT_FILE")
    );
    let secret = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "slurm-token")
        .expect("the Slurm token volume");
    assert_eq!(secret["secret"]["secretName"], "slurm-bridge-token");
    let binding = find(&docs, "ClusterRoleBinding", &name);
    assert_eq!(binding["roleRef"]["name"], name);
    assert_eq!(binding["subjects"][0]["name"], name);
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    // Rendered in both modes; --cancel-running by value; none when disabled.
    let run = documents(&render(&["mode=run"]));
    find(&run, "Job", &name);
    let cancel = documents(&render(&["releaseFinalizers.cancelRunning=true"]));
    let args =
        strings(&find(&cancel, "Job", &name)["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.contains(&"--cancel-running".to_string()), "{args:?}");
    let off = documents(&render(&["releaseFinalizers.enabled=false"]));
    assert!(
        !kinds(&off)
            .iter()
            .any(|k| k.ends_with("-release-finalizers")),
        "disabled, yet rendered: {:?}",
        kinds(&off)
    );
}

#[test]
fn the_options_render_what_they_say() {
    // split: three Deployments, each with its ServiceAccount.
    let docs = documents(&render(&[]));
    for c in ["scheduler", "controllers", "admission"] {
        let d = find(&docs, "Deployment", &format!("{PREFIX}-{c}"));
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(spec["serviceAccountName"], format!("{PREFIX}-{c}"));
        assert_eq!(spec["containers"][0]["args"][0], c);
        let checksum = d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            .as_str()
            .unwrap();
        assert!(
            checksum.len() == 64 && checksum.chars().all(|c| c.is_ascii_hexdigit()),
            "{checksum}"
        );
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        let container = &spec["containers"][0];
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        let env: Vec<&str> = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        if c == "admission" {
            // Admission does not call Slurm: no token.
            assert!(!env.contains(&"SLURM_JWT_FILE"), "{env:?}");
        } else {
            let jwt = &container["env"][0];
            assert_eq!(jwt["name"], "SLURM_JWT_FILE");
            assert_eq!(jwt["value"], "/var/run/secrets/slurm/auth-token");
            let vol = spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == "slurm-token")
                .unwrap();
            assert_eq!(vol["secret"]["secretName"], "slurm-bridge-token");
            assert_eq!(vol["secret"]["items"][0]["key"], "auth-token");
        }
        find(&docs, "Service", &format!("{PREFIX}-{c}-metrics"));
    }
    assert!(
        !kinds(&docs)
            .iter()
            .any(|k| k.starts_with("PodDisruptionBudget/"))
    );
    // cert-manager by default: the CA is injected, the serving certificate mounted.
    let m = find(
        &docs,
        "MutatingWebhookConfiguration",
        &format!("{PREFIX}-admission"),
    );
    assert_eq!(
        m["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/{PREFIX}-admission")
    );
    assert_eq!(m["webhooks"][0]["failurePolicy"], "Fail");
    assert_eq!(
        m["webhooks"][0]["rules"][0]["resources"],
        serde_json::json!(["pods"])
    );
    let v = find(
        &docs,
        "ValidatingWebhookConfiguration",
        &format!("{PREFIX}-admission"),
    );
    assert_eq!(
        v["webhooks"][0]["rules"][0]["resources"],
        serde_json::json!(["pods", "pods/resize"])
    );
    find(&docs, "Certificate", &format!("{PREFIX}-admission"));
    let cm = find(&docs, "ConfigMap", &format!("{PREFIX}-config"));
    let config = cm["data"]["config.yaml"].as_str().unwrap();
    assert!(
        config.contains("schedulerName: \"slurm-bridge-scheduler\""),
        "{config}"
    );
    assert!(
        config.contains("managedNamespaces:\n  - slurm-bridge"),
        "{config}"
    );
    assert!(!config.contains("priorityClasses"), "{config}");
    // priorityClasses reach config.yaml as given.
    let docs = documents(&render(&[
        "schedulerConfig.priorityClasses.high.qos=urgent",
        "schedulerConfig.priorityClasses.high.priority=1000",
    ]));
    let cm = find(&docs, "ConfigMap", &format!("{PREFIX}-config"));
    let config = cm["data"]["config.yaml"].as_str().unwrap();
    assert!(
        config.contains("priorityClasses:\n  high:\n    priority: 1000\n    qos: urgent\n"),
        "{config}"
    );

    // run: one Deployment, its ServiceAccount bound to the three components' roles.
    let docs = documents(&render(&["mode=run"]));
    let deployments: Vec<_> = kinds(&docs)
        .into_iter()
        .filter(|k| k.starts_with("Deployment/"))
        .collect();
    assert_eq!(deployments, vec![format!("Deployment/{PREFIX}-run")]);
    let run = find(&docs, "Deployment", &format!("{PREFIX}-run"));
    let args = &run["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[0], "run");
    assert!(
        args.as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--cert-dir=/var/run/slurm-bridge/certs")
    );
    let svc = find(&docs, "Service", &format!("{PREFIX}-admission"));
    assert_eq!(
        svc["spec"]["selector"]["app.kubernetes.io/component"],
        "run"
    );

    // Self-managed certificates: the bridge's own flags, a writable cert dir, no cert-manager.
    let docs = documents(&render(&["admission.certManager.enabled=false"]));
    assert!(
        !kinds(&docs)
            .iter()
            .any(|k| k.starts_with("Certificate/") || k.starts_with("Issuer/"))
    );
    let adm = find(&docs, "Deployment", &format!("{PREFIX}-admission"));
    let spec = &adm["spec"]["template"]["spec"];
    let args: Vec<&str> = spec["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&format!("--webhook-configurations={PREFIX}-admission").as_str()),
        "{args:?}"
    );
    // The CA is shared through a Secret, so more than one replica serves one CA.
    assert!(
        args.contains(&format!("--self-signed-ca-secret={PREFIX}-admission-ca").as_str()),
        "{args:?}"
    );
    assert!(
        args.contains(
            &format!("--self-signed-names={PREFIX}-admission,{PREFIX}-admission.{NAMESPACE},{PREFIX}-admission.{NAMESPACE}.svc,{PREFIX}-admission.{NAMESPACE}.svc.cluster.local").as_str()
        ),
        "{args:?}"
    );
    let certs = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "certs")
        .unwrap();
    assert!(certs["emptyDir"].is_object(), "{certs}");
    let m = find(
        &docs,
        "MutatingWebhookConfiguration",
        &format!("{PREFIX}-admission"),
    );
    assert!(m["metadata"]["annotations"].is_null());

    // High availability: PDBs only over more than one replica.
    let docs = documents(&render(CASES[4].1));
    let pdb = find(
        &docs,
        "PodDisruptionBudget",
        &format!("{PREFIX}-controllers"),
    );
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"]["minAvailable"].is_null());
    let pdb = find(&docs, "PodDisruptionBudget", &format!("{PREFIX}-scheduler"));
    assert_eq!(pdb["spec"]["minAvailable"], 1);

    // Admission disabled: no webhook objects at all.
    let docs = documents(&render(&["admission.enabled=false"]));
    assert!(
        !kinds(&docs).iter().any(|k| k.contains("admission")),
        "{:?}",
        kinds(&docs)
    );
}

/// Reference quirk 19: the controllers Deployment took `admission.resources`, and the scheduler's
/// objects were always named `slurm-bridge-scheduler` (a duplicated name helper).
#[test]
fn chart_quirks_are_fixed() {
    let docs = documents(&render(&[
        "fullnameOverride=bridge",
        "controllers.resources.limits.memory=256Mi",
        "admission.resources.limits.memory=64Mi",
    ]));
    let ctl = find(&docs, "Deployment", "bridge-controllers");
    assert_eq!(
        ctl["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "256Mi"
    );
    let adm = find(&docs, "Deployment", "bridge-admission");
    assert_eq!(
        adm["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "64Mi"
    );
    for kind in [
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    ] {
        find(&docs, kind, "bridge-scheduler");
    }
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "slurm-bridge-scheduler"),
        "an object still has the hard-coded name"
    );
}

#[test]
fn bad_values_are_refused_with_a_reason() {
    let cases: &[(&[&str], &str)] = &[
        (&["mode=both"], "mode must be"),
        (
            &["scheduler.replicaCount=2", "scheduler.leaderElect=false"],
            "leaderElect",
        ),
        (
            &["controllers.replicas=2", "controllers.leaderElect=false"],
            "leaderElect",
        ),
        (
            &["admission.managedNamespaces={slinky}"],
            "release namespace",
        ),
        (&["admission.failurePolicy=Sometimes"], "failurePolicy"),
    ];
    for (sets, reason) in cases {
        let (ok, _, err) = try_render(sets);
        assert!(!ok, "{sets:?} rendered");
        assert!(err.contains(reason), "{sets:?}: {err}");
    }
}

/// `helm template` with values files (`-f`) and `--set` values.
fn try_render_files(files: &[&std::path::Path], sets: &[&str]) -> (bool, String, String) {
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

/// The values file written for the Go original's chart (every key of reference §2.7).
fn go_original_values() -> PathBuf {
    chart_dir().join("tests/go-original-values.yaml")
}

#[test]
fn go_original_images_are_refused_naming_the_key() {
    // The original's whole values file: refused at its first Go image, named by key.
    let (ok, _, err) = try_render_files(&[&go_original_values()], &[]);
    assert!(
        !ok,
        "the original's values file rendered with its Go images"
    );
    assert!(
        err.contains("scheduler.image.repository")
            && err.contains("ghcr.io/slinkyproject/slurm-bridge-scheduler")
            && err.contains("Go original")
            && err.contains("image.repository to the slurm-bridge image"),
        "{err}"
    );
    // Each Go image under each key, mirrored registries too.
    for (key, image) in [
        (
            "scheduler.image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-scheduler",
        ),
        (
            "controllers.image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-controllers",
        ),
        (
            "admission.image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-admission",
        ),
        (
            "controllers.image.repository",
            "registry.example/mirror/slurm-bridge-controllers",
        ),
        (
            "run.image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-scheduler",
        ),
        (
            "image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-admission",
        ),
    ] {
        let set = format!("{key}={image}");
        let (ok, _, err) = try_render(&[&set]);
        assert!(!ok, "{set} rendered");
        assert!(
            err.contains(&format!("{key} is \"{image}\"")),
            "{set}: {err}"
        );
    }
    // This project's own image under a name that merely contains the Go names is fine.
    render(&["scheduler.image.repository=registry.example/slurm-bridge-scheduler-rs"]);
}

#[test]
fn go_original_values_without_its_images_render_this_charts_binary() {
    // The guide's one edit: drop the three `*.image.repository` lines, name our image.
    let text = std::fs::read_to_string(go_original_values()).unwrap();
    let edited: String = text
        .lines()
        .filter(|l| !l.contains("repository: ghcr.io/slinkyproject/"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        text.lines().count() - edited.lines().count(),
        3,
        "three image lines removed"
    );
    let file = std::env::temp_dir().join(format!("go-original-values-{}.yaml", std::process::id()));
    std::fs::write(&file, edited).unwrap();
    let (ok, out, err) = try_render_files(
        &[&file],
        &["image.repository=registry.example/slurm-bridge"],
    );
    let _ = std::fs::remove_file(&file);
    assert!(ok, "{err}");
    let docs = documents(&out);
    for c in ["scheduler", "controllers", "admission"] {
        let d = find(&docs, "Deployment", &format!("{PREFIX}-{c}"));
        let container = &d["spec"]["template"]["spec"]["containers"][0];
        // One image, each Deployment with its own subcommand and only flags the binary knows.
        assert_eq!(
            container["image"], "registry.example/slurm-bridge:0.1.0",
            "{c}"
        );
        assert_eq!(container["imagePullPolicy"], "IfNotPresent", "{c}");
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args[0], c, "{c}: {args:?}");
        for gone in [
            "--feature-gates",
            "-zap-log-level",
            "--v=",
            "--metrics-bind-address",
        ] {
            assert!(!args.iter().any(|a| a.starts_with(gone)), "{c}: {args:?}");
        }
        if c != "admission" {
            // leaderElect: false in the original's values is kept.
            assert!(args.contains(&"--leader-elect=false"), "{c}: {args:?}");
            assert_eq!(container["env"][0]["name"], "SLURM_JWT_FILE");
        }
        // Selectors are this chart's (docs/migration.md: the original's Deployments go first).
        let sel = &d["spec"]["selector"]["matchLabels"];
        assert_eq!(sel["app.kubernetes.io/name"], "slurm-bridge", "{c}");
        assert_eq!(sel["app.kubernetes.io/component"], c, "{c}");
    }
    // config.yaml is the original's rendered default (reference §2.1).
    let cm = find(&docs, "ConfigMap", &format!("{PREFIX}-config"));
    let config: Value =
        serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(
        config,
        serde_json::json!({
            "schedulerName": "slurm-bridge-scheduler",
            "slurmRestApi": "http://slurm-restapi.slurm:6820",
            "managedNamespaces": ["slurm-bridge"],
            "mcsLabel": "kubernetes",
            "partition": "slurm-bridge",
        })
    );
    // cert-manager, as the original's default.
    find(&docs, "Certificate", &format!("{PREFIX}-admission"));
}

// ---- RBAC ----------------------------------------------------------------------------------

/// One permission: (apiGroup, resource, verb).
type Perm = (&'static str, &'static str, &'static str);

fn perms(group: &'static str, resources: &[&'static str], verbs: &[&'static str]) -> Vec<Perm> {
    resources
        .iter()
        .flat_map(|r| verbs.iter().map(move |v| (group, *r, *v)))
        .collect()
}

/// What the scheduler calls, cluster-wide (src/scheduler, src/workload/kube_reader.rs, src/caches/).
fn scheduler_calls() -> Vec<Perm> {
    [
        // caches/: pod reflector (list, watch); pod_ops.rs: label/annotation/finalizer patches,
        // a get after a Binding conflict; reconcile.rs, sweep.rs: get; kube_reader.rs: list a group.
        perms("", &["pods"], &["get", "list", "watch", "patch"]),
        perms("", &["pods/binding"], &["create"]), // pod_ops.rs bind
        perms("", &["pods/status"], &["patch"]),   // pod_ops.rs set_unschedulable
        perms("", &["nodes"], &["list", "watch"]), // caches/ node reflector
        perms("events.k8s.io", &["events"], &["create"]), // pod_ops.rs event_for
        // workload/owner.rs + kinds/*: the owner walk and the translators, served by one
        // reflector per kind (caches/objects.rs: list, watch) with live GETs on a miss.
        perms(
            "apps",
            &["replicasets", "statefulsets"],
            &["get", "list", "watch"],
        ),
        perms("batch", &["jobs"], &["get", "list", "watch"]),
        perms("jobset.x-k8s.io", &["jobsets"], &["get", "list", "watch"]),
        perms(
            "leaderworkerset.x-k8s.io",
            &["leaderworkersets"],
            &["get", "list", "watch"],
        ),
        perms(
            "scheduling.x-k8s.io",
            &["podgroups"],
            &["get", "list", "watch"],
        ),
        perms(
            "scheduling.k8s.io",
            &["podgroups", "workloads"],
            &["get", "list", "watch"],
        ),
        perms("scheduling.k8s.io", &["podgroups/status"], &["patch"]), // podgroup.rs
        // DRA: caches/ ResourceSlice reflector; scheduler/claims.rs (DeviceClass get_opt,
        // the claim a pod names read back, claims listed by pod uid, created, deleted;
        // allocation written to the claim status).
        perms("resource.k8s.io", &["resourceslices"], &["list", "watch"]),
        perms("resource.k8s.io", &["deviceclasses"], &["get"]),
        perms(
            "resource.k8s.io",
            &["resourceclaims"],
            &["get", "list", "create", "delete"],
        ),
        perms("resource.k8s.io", &["resourceclaims/status"], &["patch"]),
        // Volumes: caches/ reflectors; volumes/bind.rs claimRef and selected-node patches,
        // the claims and PVs read back.
        perms(
            "",
            &["persistentvolumeclaims", "persistentvolumes"],
            &["get", "list", "watch", "patch"],
        ),
        perms("storage.k8s.io", &["storageclasses"], &["list", "watch"]),
        // The API server's own check when a status write sets allocation or reservedFor.
        perms("resource.k8s.io", &["resourceclaims/binding"], &["patch"]),
    ]
    .concat()
}

/// What the controllers call, cluster-wide (src/controllers, src/caches/).
fn controllers_calls() -> Vec<Perm> {
    [
        // caches/ reflector; pod_ops.rs remove_finalizer / clear_job; pod/actions.rs remove.
        perms("", &["pods"], &["list", "watch", "patch", "delete"]),
        perms("", &["pods/status"], &["patch"]), // pod/actions.rs DisruptionTarget
        perms("", &["nodes"], &["list", "watch", "patch"]), // node/kube_ops.rs
        perms("", &["nodes/status"], &["patch"]), // node/kube_ops.rs conditions
        perms("events.k8s.io", &["events"], &["create"]),
        // DRA: caches/ ResourceSlice reflector; pod/actions.rs -> claims::delete_pod_claim.
        perms("resource.k8s.io", &["resourceslices"], &["list", "watch"]),
        perms("resource.k8s.io", &["resourceclaims"], &["delete"]),
    ]
    .concat()
}

/// What the pre-delete hook calls, cluster-wide (src/cli/release_finalizers.rs: list every pod,
/// get one again after a conflict, patch its finalizers).
fn release_finalizers_calls() -> Vec<Perm> {
    perms("", &["pods"], &["get", "list", "patch"])
}

/// What admission calls (src/admission): namespaces only with a selector (managed.rs), the
/// webhook configurations only in the self-managed mode (certs.rs, GET and PUT), by name.
fn admission_calls(selector: bool, self_managed: bool) -> Vec<Perm> {
    let mut p = Vec::new();
    if selector {
        p.extend(perms("", &["namespaces"], &["get", "list", "watch"]));
    }
    if self_managed {
        p.extend(perms(
            "admissionregistration.k8s.io",
            &[
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ],
            &["get", "update"],
        ));
    }
    p
}

/// The self-managed CA shared between replicas, in the release namespace only
/// (src/admission/certs/shared.rs: GET and PUT by name, POST with no name to limit it to).
fn ca_secret_calls() -> Vec<(Perm, Option<Vec<String>>)> {
    let name = vec![format!("{PREFIX}-admission-ca")];
    vec![
        (("", "secrets", "create"), None),
        (("", "secrets", "get"), Some(name.clone())),
        (("", "secrets", "update"), Some(name)),
    ]
}

/// The leader Lease, in the release namespace only (src/leader.rs: kube-lease-manager's get,
/// create, patch; the Lease watch).
fn lease_calls() -> Vec<Perm> {
    perms(
        "coordination.k8s.io",
        &["leases"],
        &["get", "list", "watch", "create", "patch"],
    )
}

/// A grant: what a ServiceAccount may do, where (`None`: cluster-wide), on which names
/// (`None`: any).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    account: String,
    namespace: Option<String>,
    perm: (String, String, String),
    names: Option<Vec<String>>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Every grant the rendered objects give, through the bindings to the roles they define. A
/// binding to a role the chart does not render (e.g. `cluster-admin`) is an error.
fn grants(docs: &[Value]) -> Result<Vec<Grant>, String> {
    let mut out = Vec::new();
    for b in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        let ns = (b["kind"] == "RoleBinding").then(|| {
            b["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string()
        });
        let role_kind = b["roleRef"]["kind"].as_str().unwrap_or("");
        let role_name = b["roleRef"]["name"].as_str().unwrap_or("");
        let role = docs
            .iter()
            .find(|d| {
                d["kind"] == role_kind
                    && d["metadata"]["name"] == role_name
                    && (role_kind == "ClusterRole"
                        || d["metadata"]["namespace"].as_str() == ns.as_deref())
            })
            .ok_or_else(|| {
                format!(
                    "binding {} refers to {role_kind} {role_name}, not in the chart",
                    b["metadata"]["name"]
                )
            })?;
        if role["aggregationRule"].is_object() {
            return Err(format!("{role_name} aggregates other roles"));
        }
        for s in b["subjects"].as_array().into_iter().flatten() {
            if s["kind"] != "ServiceAccount" || s["namespace"] != NAMESPACE {
                return Err(format!("binding {} has subject {s}", b["metadata"]["name"]));
            }
            let account = s["name"].as_str().unwrap().to_string();
            for rule in role["rules"].as_array().into_iter().flatten() {
                if rule["nonResourceURLs"].is_array() {
                    return Err(format!("{role_name} grants nonResourceURLs"));
                }
                let names = rule["resourceNames"]
                    .is_array()
                    .then(|| strings(&rule["resourceNames"]));
                for g in strings(&rule["apiGroups"]) {
                    for r in strings(&rule["resources"]) {
                        for v in strings(&rule["verbs"]) {
                            out.push(Grant {
                                account: account.clone(),
                                namespace: ns.clone(),
                                perm: (g.clone(), r.clone(), v),
                                names: names.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// What each ServiceAccount may be granted, for the values of a case.
struct Allowed {
    cluster: Vec<Perm>,
    leases: bool,
    /// Namespaced permissions on the shared CA Secret (with the names they must be limited to).
    ca_secret: Vec<(Perm, Option<Vec<String>>)>,
    /// Permissions that must name these objects (resourceNames).
    named: Vec<(Perm, Vec<String>)>,
}

fn allowed_for(component: &str, selector: bool, self_managed: bool, admission: bool) -> Allowed {
    let adm = if admission {
        admission_calls(selector, self_managed)
    } else {
        vec![]
    };
    let webhook = format!("{PREFIX}-admission");
    let named = adm
        .iter()
        .filter(|p| p.0 == "admissionregistration.k8s.io")
        .map(|p| (*p, vec![webhook.clone()]))
        .collect();
    let ca_secret = if admission && self_managed {
        ca_secret_calls()
    } else {
        vec![]
    };
    match component {
        "scheduler" => Allowed {
            cluster: scheduler_calls(),
            leases: true,
            ca_secret: vec![],
            named: vec![],
        },
        "controllers" => Allowed {
            cluster: controllers_calls(),
            leases: true,
            ca_secret: vec![],
            named: vec![],
        },
        "admission" => Allowed {
            cluster: adm,
            leases: false,
            ca_secret,
            named,
        },
        "run" => Allowed {
            cluster: [scheduler_calls(), controllers_calls(), adm].concat(),
            leases: true,
            ca_secret,
            named,
        },
        "release-finalizers" => Allowed {
            cluster: release_finalizers_calls(),
            leases: false,
            ca_secret: vec![],
            named: vec![],
        },
        other => panic!("unknown component {other}"),
    }
}

/// Checks the grants of a render against the allow-lists: the errors (grants beyond what the
/// code calls, and calls not granted).
fn check_rbac(
    docs: &[Value],
    selector: bool,
    self_managed: bool,
    admission: bool,
    leader: bool,
) -> Vec<String> {
    let grants = match grants(docs) {
        Ok(g) => g,
        Err(e) => return vec![e],
    };
    let mut errors = Vec::new();
    let accounts: BTreeSet<String> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceAccount")
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let mut by_account: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in &grants {
        by_account.entry(&g.account).or_default().push(g);
    }
    for g in &grants {
        let Some(component) = g.account.strip_prefix(&format!("{PREFIX}-")) else {
            errors.push(format!("grant to a foreign account: {g:?}"));
            continue;
        };
        if !accounts.contains(&g.account) {
            errors.push(format!(
                "grant to an account the chart does not create: {g:?}"
            ));
        }
        let allowed = allowed_for(component, selector, self_managed, admission);
        let (grp, res, verb) = (&g.perm.0, &g.perm.1, &g.perm.2);
        if [grp, res, verb].iter().any(|s| s.contains('*')) {
            errors.push(format!("{component}: wildcard in {:?}", g.perm));
            continue;
        }
        let is = |p: &Perm| p.0 == grp && p.1 == res && p.2 == verb;
        match &g.namespace {
            Some(ns) => {
                let lease = allowed.leases && lease_calls().iter().any(is);
                let secret = allowed.ca_secret.iter().find(|(p, _)| is(p));
                let secret = match secret {
                    Some((_, Some(names))) => g.names.as_ref() == Some(names),
                    Some((_, None)) => true,
                    None => false,
                };
                if !(ns == NAMESPACE && (lease || secret)) {
                    errors.push(format!(
                        "{component}: namespaced grant beyond the leader Lease and the CA Secret: {g:?}"
                    ));
                }
            }
            None => {
                if !allowed.cluster.iter().any(is) {
                    errors.push(format!(
                        "{component}: ClusterRole grants {verb} on {grp}/{res}, which the code does not call"
                    ));
                } else if let Some((_, names)) = allowed.named.iter().find(|(p, _)| is(p))
                    && g.names.as_ref() != Some(names)
                {
                    errors.push(format!(
                        "{component}: {verb} on {grp}/{res} must be limited to {names:?}, is {:?}",
                        g.names
                    ));
                }
            }
        }
    }
    // And the other way round: each running component can make every call its code makes.
    for d in docs
        .iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
    {
        let spec = &d["spec"]["template"]["spec"];
        let account = spec["serviceAccountName"].as_str().unwrap();
        let component = account.strip_prefix(&format!("{PREFIX}-")).unwrap();
        let allowed = allowed_for(component, selector, self_managed, admission);
        let have = by_account.get(account).cloned().unwrap_or_default();
        for p in &allowed.cluster {
            if !have
                .iter()
                .any(|g| g.namespace.is_none() && g.perm == (p.0.into(), p.1.into(), p.2.into()))
            {
                errors.push(format!(
                    "{component}: the code calls {} on {}/{}, not granted",
                    p.2, p.0, p.1
                ));
            }
        }
        for (p, _) in &allowed.ca_secret {
            if !have.iter().any(|g| {
                g.namespace.as_deref() == Some(NAMESPACE)
                    && g.perm == (p.0.into(), p.1.into(), p.2.into())
            }) {
                errors.push(format!(
                    "{component}: the shared CA needs {} on secrets, not granted",
                    p.2
                ));
            }
        }
        if allowed.leases && leader {
            for p in lease_calls() {
                if !have.iter().any(|g| {
                    g.namespace.as_deref() == Some(NAMESPACE)
                        && g.perm == (p.0.into(), p.1.into(), p.2.into())
                }) {
                    errors.push(format!(
                        "{component}: leader election needs {} on leases, not granted",
                        p.2
                    ));
                }
            }
        }
    }
    errors
}

#[test]
fn rbac_grants_no_more_than_the_components_use() {
    // (values, managedNamespaceSelector set, self-managed certificates, admission, leader election)
    let cases: &[(&[&str], bool, bool, bool, bool)] = &[
        (&[], false, false, true, true),
        (&["mode=run"], false, false, true, true),
        (
            &["admission.certManager.enabled=false"],
            false,
            true,
            true,
            true,
        ),
        (
            &["admission.managedNamespaceSelector.matchLabels.a=b"],
            true,
            false,
            true,
            true,
        ),
        (
            &[
                "mode=run",
                "admission.certManager.enabled=false",
                "admission.managedNamespaceSelector.matchLabels.a=b",
            ],
            true,
            true,
            true,
            true,
        ),
        (&["admission.enabled=false"], false, false, false, true),
        (
            &[
                "scheduler.leaderElect=false",
                "controllers.leaderElect=false",
            ],
            false,
            false,
            true,
            false,
        ),
    ];
    for (sets, selector, self_managed, admission, leader) in cases {
        let docs = documents(&render(sets));
        let errors = check_rbac(&docs, *selector, *self_managed, *admission, *leader);
        assert!(
            errors.is_empty(),
            "RBAC of {sets:?}:\n{}",
            errors.join("\n")
        );
        if !leader {
            assert!(
                !docs.iter().any(|d| d["kind"] == "Role"),
                "{sets:?}: a lease Role without leader election"
            );
        }
    }
    // With cert-manager and a namespace list, admission needs no permission at all.
    let docs = documents(&render(&[]));
    assert!(
        !kinds(&docs).contains(&format!("ClusterRole/{PREFIX}-admission")),
        "admission has a ClusterRole it does not need"
    );
}

/// The checker itself: a rendered chart with one extra verb, a wildcard, a lease grant
/// cluster-wide, an unnamed webhook grant, or a binding to cluster-admin is caught.
#[test]
fn rbac_check_catches_excess_grants() {
    let base = documents(&render(&["admission.certManager.enabled=false"]));
    assert!(check_rbac(&base, false, true, true, true).is_empty());
    fn role(docs: &mut [Value], name: &str) -> usize {
        docs.iter()
            .position(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
            .unwrap()
    }
    type Tamper = Box<dyn Fn(&mut Vec<Value>)>;
    let tamper: Vec<(&str, Tamper)> = vec![
        (
            "delete on pods",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-scheduler"));
                d[i]["rules"][0]["verbs"]
                    .as_array_mut()
                    .unwrap()
                    .push("delete".into());
            }),
        ),
        (
            "wildcard",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-controllers"));
                d[i]["rules"].as_array_mut().unwrap().push(serde_json::json!({"apiGroups": ["apps"], "resources": ["*"], "verbs": ["get"]}));
            }),
        ),
        (
            "cluster-wide leases",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-controllers"));
                d[i]["rules"].as_array_mut().unwrap().push(serde_json::json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}));
            }),
        ),
        (
            "secrets",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-admission"));
                d[i]["rules"].as_array_mut().unwrap().push(serde_json::json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}));
            }),
        ),
        (
            "unnamed webhook configurations",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-admission"));
                let rules = d[i]["rules"].as_array_mut().unwrap();
                for r in rules.iter_mut() {
                    r.as_object_mut().unwrap().remove("resourceNames");
                }
            }),
        ),
        (
            "a CA Secret grant not limited to its name",
            Box::new(|d: &mut Vec<Value>| {
                let i = d
                    .iter()
                    .position(|d| {
                        d["kind"] == "Role"
                            && d["metadata"]["name"] == format!("{PREFIX}-admission-ca")
                    })
                    .unwrap();
                for r in d[i]["rules"].as_array_mut().unwrap().iter_mut() {
                    r.as_object_mut().unwrap().remove("resourceNames");
                }
            }),
        ),
        (
            "cluster-admin",
            Box::new(|d: &mut Vec<Value>| {
                d.push(serde_json::json!({"kind": "ClusterRoleBinding", "metadata": {"name": "x"},
                "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": format!("{PREFIX}-scheduler"), "namespace": NAMESPACE}]}));
            }),
        ),
        (
            "a missing call",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-scheduler"));
                d[i]["rules"].as_array_mut().unwrap().remove(1); // pods/binding
            }),
        ),
    ];
    for (what, f) in tamper {
        let mut docs = base.clone();
        f(&mut docs);
        let errors = check_rbac(&docs, false, true, true, true);
        assert!(!errors.is_empty(), "{what}: not caught");
    }
}
