//! The Helm chart installed into a real control plane (kube-testenv) with real Slurm
//! (slurm-testenv). The container image is replaced by the locally built binary, run as a process
//! per Deployment with the Deployment's own arguments, and with a token of the Deployment's own
//! ServiceAccount (TokenRequest): real RBAC decides every call the components make.
//!
//! Then a pod created in a managed namespace is admitted (the chart's webhook configurations,
//! self-managed certificates), scheduled through Slurm, bound, runs and completes, and its job
//! ends; a GPU pod gets its DRA claim, which goes with it; `helm upgrade` with a changed value keeps the webhooks working; `helm uninstall` leaves
//! no webhook configuration, ClusterRole or binding behind, and pods are created freely again.

mod e2e;

use e2e::helm::{self, Component, Identity};
use e2e::{Env, SCHEDULER, create_retrying, wait_phase, wait_until};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use slurm_bridge::wellknown::holds_finalizer;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RELEASE: &str = "sb";
const RELEASE_NS: &str = "slinky";
const MANAGED_NS: &str = "slurm-bridge";
const WEBHOOK: &str = "sb-slurm-bridge-admission";

fn assert_no_rbac_denials(components: &[Component]) {
    for c in components {
        let log = c.log();
        assert!(
            !log.contains("forbidden") && !log.contains("Forbidden") && !log.contains(" 403"),
            "{}: a call was refused by RBAC:\n{log}",
            c.name
        );
    }
}

async fn webhook_ca_filled(env: &Env) -> bool {
    let m: Api<MutatingWebhookConfiguration> = Api::all(env.kube.clone());
    let v: Api<ValidatingWebhookConfiguration> = Api::all(env.kube.clone());
    let (Ok(m), Ok(v)) = (m.get(WEBHOOK).await, v.get(WEBHOOK).await) else {
        return false;
    };
    let m_ok = m
        .webhooks
        .unwrap_or_default()
        .iter()
        .all(|w| w.client_config.ca_bundle.is_some());
    let v_ok = v
        .webhooks
        .unwrap_or_default()
        .iter()
        .all(|w| w.client_config.ca_bundle.is_some());
    m_ok && v_ok
}

fn pod(name: &str, seconds: u32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": MANAGED_NS},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "command": ["sleep", seconds.to_string()],
            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]},
    }))
    .unwrap()
}

async fn dra_round_trip(env: &Env, pods: &Api<Pod>) {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]},
    }))
    .unwrap();
    Api::<DeviceClass>::all(env.kube.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let slice: ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": "node-2-gpus"},
        "spec": {"driver": "gpu.example.com", "nodeName": "node-2",
                 "pool": {"name": "node-2", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}},
                             {"name": "gpu-1", "attributes": {"index": {"int": 1}}}]},
    }))
    .unwrap();
    Api::<ResourceSlice>::all(env.kube.clone())
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
    let resource = "deviceclass.resource.kubernetes.io/gpu.example.com";
    let gpu: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gpu", "namespace": MANAGED_NS},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "command": ["sleep", "3"],
            "resources": {"requests": {resource: "1", "memory": "100Mi"}, "limits": {resource: "1"}}}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &gpu).await.unwrap();
    let bound = env
        .wait_bound_in(MANAGED_NS, &["gpu".to_string()], Duration::from_secs(90))
        .await
        .remove(0);
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("node-2")
    );
    let claim = e2e::claim_name(&bound).expect("the GPU pod names its claim");
    let claims: Api<ResourceClaim> = Api::namespaced(env.kube.clone(), MANAGED_NS);
    let allocated = e2e::allocated(&claims.get(&claim).await.unwrap());
    assert_eq!(
        allocated.len(),
        1,
        "one GPU allocated in {claim}: {allocated:?}"
    );
    wait_until("GPU claim deleted", Duration::from_secs(60), async || {
        claims.get_opt(&claim).await.unwrap().is_none()
    })
    .await;
}

/// The pre-delete hook's objects from `helm get hooks`: the ServiceAccount, ClusterRole and
/// binding are created (as Helm does before the Job), and the Job's arguments returned.
async fn create_hook_objects(env: &Env) -> (Vec<Value>, Vec<String>) {
    let text = env
        .kube_env
        .helm(&["get", "hooks", RELEASE, "--namespace", RELEASE_NS])
        .expect("helm get hooks");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("hooks parse");
    let docs: Vec<Value> = docs
        .into_iter()
        .filter(|d| d["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete")
        .collect();
    let job = docs
        .iter()
        .find(|d| d["kind"] == "Job")
        .expect("the pre-delete hook Job");
    let args: Vec<String> = job["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let pp = PostParams::default();
    let mut created = Vec::new();
    for d in docs.iter().filter(|d| d["kind"] != "Job") {
        match d["kind"].as_str().unwrap() {
            "ServiceAccount" => {
                let sa: ServiceAccount = serde_json::from_value(d.clone()).unwrap();
                Api::<ServiceAccount>::namespaced(env.kube.clone(), RELEASE_NS)
                    .create(&pp, &sa)
                    .await
                    .unwrap();
            }
            "ClusterRole" => {
                let r: ClusterRole = serde_json::from_value(d.clone()).unwrap();
                Api::<ClusterRole>::all(env.kube.clone())
                    .create(&pp, &r)
                    .await
                    .unwrap();
            }
            "ClusterRoleBinding" => {
                let b: ClusterRoleBinding = serde_json::from_value(d.clone()).unwrap();
                Api::<ClusterRoleBinding>::all(env.kube.clone())
                    .create(&pp, &b)
                    .await
                    .unwrap();
            }
            other => panic!("unexpected hook object {other}"),
        }
        created.push(d.clone());
    }
    (created, args)
}

/// What `hook-delete-policy: hook-succeeded` does after the Job.
async fn delete_hook_objects(env: &Env, objects: &[Value]) {
    let dp = kube::api::DeleteParams::default();
    for d in objects {
        let name = d["metadata"]["name"].as_str().unwrap();
        match d["kind"].as_str().unwrap() {
            "ServiceAccount" => {
                let _ = Api::<ServiceAccount>::namespaced(env.kube.clone(), RELEASE_NS)
                    .delete(name, &dp)
                    .await
                    .unwrap();
            }
            "ClusterRole" => {
                let _ = Api::<ClusterRole>::all(env.kube.clone())
                    .delete(name, &dp)
                    .await
                    .unwrap();
            }
            _ => {
                let _ = Api::<ClusterRoleBinding>::all(env.kube.clone())
                    .delete(name, &dp)
                    .await
                    .unwrap();
            }
        }
    }
}

/// Issue 21: the scheduler and the controllers stop for good while one pod runs briefly and one
/// long. The short one finishes with nobody to release it (it keeps the finalizer: the fault).
/// The chart's pre-delete hook, run as a process under its own ServiceAccount, releases both
/// pods and cancels the finished pod's Slurm job; the running pod keeps running with its job.
/// Returns the components still running (admission).
async fn bridge_stops_and_the_pre_delete_hook_releases(
    env: &Env,
    pods: &Api<Pod>,
    components: Vec<Component>,
    dir: &Path,
) -> Vec<Component> {
    for (name, seconds) in [("finishes-late", 8), ("keeps-running", 3600)] {
        pods.create(&PostParams::default(), &pod(name, seconds))
            .await
            .unwrap();
    }
    let names = ["finishes-late".to_string(), "keeps-running".to_string()];
    let bound = env
        .wait_bound_in(MANAGED_NS, &names, Duration::from_secs(90))
        .await;
    let late_job = e2e::job_id_of(&bound[0]);
    let running_job = e2e::job_id_of(&bound[1]);
    // The bridge stops (the Deployments are gone); admission stays for the checks after.
    let (stopped, kept): (Vec<Component>, Vec<Component>) = components
        .into_iter()
        .partition(|c| !c.name.ends_with("-admission"));
    assert_eq!(stopped.len(), 2, "scheduler and controllers");
    drop(stopped);
    wait_phase(pods, "finishes-late", "Succeeded", Duration::from_secs(60)).await;
    let late = pods.get("finishes-late").await.unwrap();
    assert!(
        holds_finalizer(&late),
        "precondition: with no bridge, the finished pod keeps the finalizer"
    );
    assert!(env.active_job_ids().contains(&late_job));

    // The hook, as Helm runs it: its objects first, then the Job's command.
    let (objects, args) = create_hook_objects(env).await;
    assert_eq!(args[0], "release-finalizers", "{args:?}");
    let account = objects
        .iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .and_then(|d| d["metadata"]["name"].as_str())
        .unwrap()
        .to_string();
    let kubeconfig = helm::account_kubeconfig(env, RELEASE_NS, &account, dir).await;
    let config_path = dir.join("config.yaml");
    let args: Vec<String> = args
        .iter()
        .map(|a| match a.split_once('=') {
            Some(("--config", _)) => format!("--config={}", config_path.display()),
            _ => a.clone(),
        })
        .collect();
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info")
            .env_remove("SLURM_JWT")
            .env("SLURM_JWT_FILE", env.slurm.token_file())
            .stdin(Stdio::null())
            .output()
            .expect("run release-finalizers");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        eprintln!("release-finalizers: {}\n{stdout}{stderr}", out.status);
        assert!(out.status.success(), "release-finalizers failed:\n{stderr}");
        assert!(
            !stderr.contains("forbidden") && !stderr.contains("Forbidden"),
            "RBAC refused a call of the hook:\n{stderr}"
        );
        stdout
    };
    let started = Instant::now();
    let stdout = run();
    eprintln!(
        "release-finalizers took {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        stdout.contains("finalizers removed: 2 pods"),
        "both pods released:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("Slurm jobs cancelled: 1 [{late_job}]")),
        "the finished pod's job cancelled:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "left running (their pods still run; scancel them when the pods end): 1 [{running_job}]"
        )),
        "the running pod's job left running and named:\n{stdout}"
    );
    // Idempotent: a second run finds nothing to do and names the same running job.
    let again = run();
    assert!(again.contains("finalizers removed: 0 pods"), "{again}");
    assert!(again.contains("Slurm jobs cancelled: 0 []"), "{again}");
    assert!(again.contains(&format!("[{running_job}]")), "{again}");
    delete_hook_objects(env, &objects).await;

    // The finished pod is deleted without a stuck finalizer; its Slurm job has ended.
    pods.delete("finishes-late", &Default::default())
        .await
        .unwrap();
    wait_until(
        "finishes-late deleted",
        Duration::from_secs(30),
        async || pods.get_opt("finishes-late").await.unwrap().is_none(),
    )
    .await;
    wait_until("its Slurm job ended", Duration::from_secs(30), async || {
        !env.active_job_ids().contains(&late_job)
    })
    .await;
    // The running pod runs on with its job, free to go whenever it ends.
    let running = pods.get("keeps-running").await.unwrap();
    assert_eq!(
        running.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert!(!holds_finalizer(&running));
    assert!(env.active_job_ids().contains(&running_job));
    env.assert_invariants().await;
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_install_schedules_through_slurm_under_the_charts_rbac() {
    let env = Env::start(2).await;
    helm::create_namespaces(&env, &[RELEASE_NS, MANAGED_NS]).await;
    let dir = std::env::temp_dir().join(format!("helm-install-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let listen = format!("127.0.0.1:{}", e2e::free_port());
    let started = Instant::now();
    let chart = helm::chart();
    let values = helm::test_values(&env, &listen);
    let install = |cmd: &str, extra: &[&str]| {
        let mut args = vec![cmd, RELEASE, chart.as_str(), "--namespace", RELEASE_NS];
        for v in &values {
            args.extend(["--set", v.as_str()]);
        }
        args.extend(extra);
        env.kube_env.helm(&args).unwrap_or_else(|e| panic!("{e}"))
    };
    let out = install("install", &[]);
    eprintln!(
        "helm install ({:.1} s): {out}",
        started.elapsed().as_secs_f64()
    );
    let manifest = helm::manifest(&env, RELEASE, RELEASE_NS);
    let components = helm::start_components(
        &env,
        &manifest,
        RELEASE_NS,
        &dir,
        &listen,
        Identity::ServiceAccounts,
    )
    .await;
    assert_eq!(
        components.len(),
        3,
        "three Deployments: {:?}",
        components.iter().map(|c| &c.name).collect::<Vec<_>>()
    );

    // The admission process fills both configurations' caBundle (self-managed mode).
    wait_until("caBundle filled", Duration::from_secs(60), async || {
        webhook_ca_filled(&env).await
    })
    .await;

    // Admitted (schedulerName set by the mutating webhook), scheduled through Slurm, bound, runs,
    // completes, and its Slurm job ends.
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), MANAGED_NS);
    let created = create_retrying(&pods, &pod("through-helm", 3), Duration::from_secs(30)).await;
    assert_eq!(
        created.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some(SCHEDULER),
        "the chart's mutating webhook did not take the pod"
    );
    let bound = env
        .wait_bound_in(
            MANAGED_NS,
            &["through-helm".to_string()],
            Duration::from_secs(90),
        )
        .await;
    let job_id = e2e::job_id_of(&bound[0]);
    eprintln!(
        "bound to {:?} as Slurm job {job_id}",
        bound[0].spec.as_ref().unwrap().node_name
    );
    wait_phase(&pods, "through-helm", "Succeeded", Duration::from_secs(60)).await;
    wait_until("Slurm job ended", Duration::from_secs(60), async || {
        !env.active_job_ids().contains(&job_id)
    })
    .await;
    // DRA under the chart's RBAC: a node's GPU slice re-registers it with GRES, a pod asking for
    // a GPU is bound with an allocated claim (scheduler: DeviceClass get, claims get, list,
    // create, status patch, pod status), and the claim goes with the pod (controllers: delete).
    dra_round_trip(&env, &pods).await;
    // The validating webhook is in force too.
    let mut forged = pod("forged", 1);
    forged.metadata.labels = Some(
        [(
            slurm_bridge::wellknown::LABEL_SLURM_JOBID.to_string(),
            "1".to_string(),
        )]
        .into(),
    );
    let err = pods
        .create(&PostParams::default(), &forged)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("slurm external jobid label"),
        "{err}"
    );
    assert_no_rbac_denials(&components);

    // helm upgrade with a changed value: the configurations change and keep working.
    let out = install("upgrade", &["--set", "admission.timeoutSeconds=7"]);
    eprintln!("helm upgrade: {out}");
    let m: Api<MutatingWebhookConfiguration> = Api::all(env.kube.clone());
    let hook = m.get(WEBHOOK).await.unwrap();
    assert_eq!(hook.webhooks.as_ref().unwrap()[0].timeout_seconds, Some(7));
    wait_until(
        "caBundle after upgrade",
        Duration::from_secs(30),
        async || webhook_ca_filled(&env).await,
    )
    .await;
    let p = create_retrying(&pods, &pod("after-upgrade", 1), Duration::from_secs(30)).await;
    assert_eq!(
        p.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some(SCHEDULER)
    );
    env.wait_bound_in(
        MANAGED_NS,
        &["after-upgrade".to_string()],
        Duration::from_secs(90),
    )
    .await;
    // It runs to completion under the upgraded release: its finalizer goes while the bridge runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = pods.get("after-upgrade").await.unwrap();
        let finished = matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if finished && !holds_finalizer(&p) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after-upgrade not finished and released within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.assert_invariants().await;
    assert_no_rbac_denials(&components);

    // The bridge goes away for good: a pod that finishes afterwards must not keep the finalizer.
    let components =
        bridge_stops_and_the_pre_delete_hook_releases(&env, &pods, components, &dir).await;

    // helm uninstall: nothing left that blocks or gates pod creation, no cluster-scoped RBAC.
    // `--no-hooks`: the hook Job ran above as a process (kube-testenv's node agent does not run
    // images).
    let out = env
        .kube_env
        .helm(&[
            "uninstall",
            RELEASE,
            "--namespace",
            RELEASE_NS,
            "--wait",
            "--no-hooks",
        ])
        .expect("helm uninstall");
    eprintln!("helm uninstall: {out}");
    let v: Api<ValidatingWebhookConfiguration> = Api::all(env.kube.clone());
    let released = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    assert!(m.list(&released).await.unwrap().items.is_empty());
    assert!(v.list(&released).await.unwrap().items.is_empty());
    assert!(m.get_opt(WEBHOOK).await.unwrap().is_none());
    assert!(v.get_opt(WEBHOOK).await.unwrap().is_none());
    let roles: Api<ClusterRole> = Api::all(env.kube.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(env.kube.clone());
    assert!(roles.list(&released).await.unwrap().items.is_empty());
    assert!(bindings.list(&released).await.unwrap().items.is_empty());
    // Even with the admission process still running, a pod is created untouched.
    let p = pods
        .create(&PostParams::default(), &pod("after-uninstall", 1))
        .await
        .expect("pod creation after uninstall");
    assert_eq!(
        p.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );
    // And the admission process did not recreate a configuration, in two passes of its
    // certificate check (every second here) after the uninstall. Each pass now logs what it
    // misses (the release took the configurations, the CA Secret's RBAC and the
    // ServiceAccount); the second of two passes logged from here on started after the first
    // ended, so after the uninstall.
    let admission = components
        .iter()
        .find(|c| c.name.ends_with("-admission"))
        .expect("the admission process");
    let passes = || {
        let log = admission.log();
        log.matches("self-managed certificate pass failed").count()
            + log.matches("caBundle not synced").count()
    };
    let before = passes();
    wait_until(
        "two certificate passes of the admission process after the uninstall",
        Duration::from_secs(60),
        async || passes() >= before + 2,
    )
    .await;
    assert!(m.get_opt(WEBHOOK).await.unwrap().is_none());
    env.assert_invariants().await;
    drop(components);
    let _ = std::fs::remove_dir_all(&dir);
}
