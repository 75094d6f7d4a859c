//! `helm upgrade` from a release of the Go original's chart to this chart, on a real control plane
//! (kube-testenv) with real Slurm (slurm-testenv), as docs/migration.md tells an admin to do it.
//!
//! The original's release is `tests/fixtures/go-original-chart` (the manifests its chart renders
//! at its defaults: Deployments selected by `app.kubernetes.io/name: slurm-bridge-scheduler`, ...)
//! installed with helm. Then:
//! 1. the original's values file as it is (`helm/slurm-bridge/tests/go-original-values.yaml`) is
//!    refused, naming `scheduler.image.repository`;
//! 2. without its three image lines, the upgrade is refused while the original's Deployments
//!    exist, naming them and the command that stops them (the API server would refuse our
//!    selector on them: checked with a dry run);
//! 3. after that command the upgrade succeeds: our Deployments, selectors and image;
//! 4. and works: each Deployment run as a local process with its own arguments admits a pod in the
//!    managed namespace, schedules it through Slurm, and the pod runs, completes, and its job ends.

mod e2e;

use e2e::helm::{self, Identity, repo_path};
use e2e::{Env, SCHEDULER, create_retrying, wait_phase, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

const RELEASE: &str = "slurm-bridge";
const RELEASE_NS: &str = "slinky";
const MANAGED_NS: &str = "slurm-bridge";
const DEPLOYMENTS: [&str; 3] = [
    "slurm-bridge-admission",
    "slurm-bridge-controllers",
    "slurm-bridge-scheduler",
];

/// The original's values file without its three `*.image.repository` lines (the guide's edit).
fn edited_values(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo_path(
        "../../helm/slurm-bridge/tests/go-original-values.yaml",
    ))
    .unwrap();
    let edited: String = text
        .lines()
        .filter(|l| !l.contains("repository: ghcr.io/slinkyproject/"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.join("values.yaml");
    std::fs::write(&path, edited).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_upgrade_from_the_go_originals_release_says_what_to_do_then_works() {
    let env = Env::start(2).await;
    helm::create_namespaces(&env, &[RELEASE_NS, MANAGED_NS]).await;
    let dir = std::env::temp_dir().join(format!("helm-migration-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ours = repo_path("../../helm/slurm-bridge").display().to_string();
    let original = repo_path("tests/fixtures/go-original-chart")
        .display()
        .to_string();
    let original_values = repo_path("../../helm/slurm-bridge/tests/go-original-values.yaml")
        .display()
        .to_string();

    // The original's release, its Deployments rolled out.
    env.kube_env
        .helm(&["install", RELEASE, &original, "--namespace", RELEASE_NS])
        .expect("install the original's release");
    let deployments: Api<Deployment> = Api::namespaced(env.kube.clone(), RELEASE_NS);
    wait_until(
        "the original's Deployments have their pods",
        Duration::from_secs(60),
        async || {
            let mut all = true;
            for d in DEPLOYMENTS {
                let d = deployments.get(d).await.unwrap();
                all &= d.status.and_then(|s| s.replicas) == Some(1);
            }
            all
        },
    )
    .await;

    // 1. The original's values file as it is: refused at its Go images.
    let err = env
        .kube_env
        .helm(&[
            "upgrade",
            RELEASE,
            &ours,
            "--namespace",
            RELEASE_NS,
            "-f",
            &original_values,
        ])
        .expect_err("the Go images were accepted")
        .to_string();
    eprintln!("with the original's values file: {err}");
    assert!(
        err.contains(
            "scheduler.image.repository is \"ghcr.io/slinkyproject/slurm-bridge-scheduler\""
        ),
        "{err}"
    );

    // 2. Without them (and with what this test's cluster needs: no cert-manager, the webhooks
    // served by a local process, the test's Slurm): refused while the original's Deployments exist.
    let listen = format!("127.0.0.1:{}", e2e::free_port());
    let values = edited_values(&dir).display().to_string();
    let mut sets = vec!["image.repository=slurm-bridge".to_string()];
    sets.extend(helm::test_values(&env, &listen));
    let upgrade = || {
        let mut args = vec![
            "upgrade",
            RELEASE,
            ours.as_str(),
            "--namespace",
            RELEASE_NS,
            "-f",
            values.as_str(),
        ];
        for s in &sets {
            args.extend(["--set", s.as_str()]);
        }
        env.kube_env.helm(&args)
    };
    let err = upgrade()
        .expect_err("upgraded over the original's Deployments")
        .to_string();
    eprintln!("over the original's Deployments: {err}");
    for d in DEPLOYMENTS {
        assert!(err.contains(d), "{d} not named: {err}");
    }
    assert!(err.contains("docs/migration.md"), "{err}");
    // Nothing changed: the original still runs as it was.
    for d in DEPLOYMENTS {
        let d = deployments.get(d).await.unwrap();
        let image = d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
            .unwrap();
        assert!(image.starts_with("ghcr.io/slinkyproject/"), "{image}");
    }
    // Why: the API server refuses to change a Deployment's selector.
    let patch = json!({"spec": {"selector": {"matchLabels": {
        "app.kubernetes.io/name": "slurm-bridge", "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "scheduler"}}}});
    let refused = deployments
        .patch(
            "slurm-bridge-scheduler",
            &PatchParams {
                dry_run: true,
                ..Default::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .expect_err("the selector changed");
    assert!(
        refused.to_string().contains("field is immutable"),
        "{refused}"
    );

    // 3. The command the message gives, then the upgrade goes through.
    let command = err
        .split("Stop the original first: ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .unwrap_or_else(|| panic!("no command in: {err}"));
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[0], "kubectl", "{command}");
    env.kube_env
        .kubectl(&words[1..])
        .expect("the given command");
    let pods_in_release: Api<Pod> = Api::namespaced(env.kube.clone(), RELEASE_NS);
    wait_until(
        "the original's pods are gone",
        Duration::from_secs(60),
        async || {
            let sel = format!("app.kubernetes.io/name in ({})", DEPLOYMENTS.join(","));
            pods_in_release
                .list(&ListParams::default().labels(&sel))
                .await
                .unwrap()
                .items
                .is_empty()
        },
    )
    .await;
    let out = upgrade().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("helm upgrade: {out}");
    for d in DEPLOYMENTS {
        let dep = deployments.get(d).await.unwrap();
        let spec = dep.spec.unwrap();
        let component = d.trim_start_matches("slurm-bridge-");
        let sel = spec.selector.match_labels.unwrap();
        assert_eq!(sel["app.kubernetes.io/name"], "slurm-bridge", "{d}");
        assert_eq!(sel["app.kubernetes.io/component"], component, "{d}");
        let container = &spec.template.spec.unwrap().containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some("slurm-bridge:0.1.0"),
            "{d}"
        );
        assert_eq!(container.args.as_ref().unwrap()[0], component, "{d}");
    }

    // What the original had and this chart has not is gone with the upgrade.
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(env.kube.clone(), RELEASE_NS);
    assert!(
        services
            .get_opt("slurm-bridge-controllers")
            .await
            .unwrap()
            .is_none()
    );
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.kube.clone(), RELEASE_NS);
    assert!(
        config_maps
            .get_opt("scheduler-config")
            .await
            .unwrap()
            .is_none()
    );

    // 4. It works: admitted, scheduled through Slurm, bound, runs, completes, its job ends.
    // As the admin: the chart's RBAC under each ServiceAccount is helm_install_e2e's business.
    let manifest = helm::manifest(&env, RELEASE, RELEASE_NS);
    let components =
        helm::start_components(&env, &manifest, RELEASE_NS, &dir, &listen, Identity::Admin).await;
    assert_eq!(components.len(), 3);
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), MANAGED_NS);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "after-migration", "namespace": MANAGED_NS},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "command": ["sleep", "3"],
            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]},
    }))
    .unwrap();
    // The webhooks answer once the admission process has made its certificate and written the
    // caBundle; until then creation fails (failurePolicy Fail).
    let created = create_retrying(&pods, &pod, Duration::from_secs(60)).await;
    assert_eq!(
        created.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some(SCHEDULER),
        "the mutating webhook did not take the pod"
    );
    let bound = env
        .wait_bound_in(
            MANAGED_NS,
            &["after-migration".to_string()],
            Duration::from_secs(90),
        )
        .await;
    let job_id = e2e::job_id_of(&bound[0]);
    wait_phase(
        &pods,
        "after-migration",
        "Succeeded",
        Duration::from_secs(60),
    )
    .await;
    wait_until("Slurm job ended", Duration::from_secs(60), async || {
        !env.active_job_ids().contains(&job_id)
    })
    .await;
    wait_until("finalizer released", Duration::from_secs(60), async || {
        pods.get("after-migration")
            .await
            .is_ok_and(|p| !slurm_bridge::wellknown::holds_finalizer(&p))
    })
    .await;
    env.assert_invariants().await;
    for c in &components {
        eprintln!("{} log: {}", c.name, c.log.display());
    }
    drop(components);
    let _ = std::fs::remove_dir_all(&dir);
}
