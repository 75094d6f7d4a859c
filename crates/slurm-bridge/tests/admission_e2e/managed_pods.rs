//! Provided certificates: managed pods (kube client and kubectl) get the bridge scheduler and
//! are bound through Slurm; forged labels and a running pod's jobid change are refused; other
//! schedulers' and unmanaged pods are left alone; bad AdmissionReviews get 400; a certificate
//! rotated while serving.

use crate::e2e::admission::{Certs, start_with};
use crate::e2e::{Env, SCHEDULER, create_retrying};
use crate::support::{
    MANAGED_NS, RETRY, create_namespace, fast_cert_poll, https_post, plain_pod, scheduler_of,
};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use slurm_bridge::admission::validate;
use slurm_bridge::config::Config;
use std::time::{Duration, Instant, SystemTime};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn managed_pods_go_through_slurm_and_forged_labels_are_refused() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    let client = env.kube.clone();
    create_namespace(&client, MANAGED_NS, json!({})).await;

    // Certificates provided in the cert dir (made here with the bridge's own generator).
    let cfg = Config {
        scheduler_name: SCHEDULER.into(),
        managed_namespaces: vec![MANAGED_NS.into()],
        ..Default::default()
    };
    let hook = start_with(
        &client,
        cfg,
        "slurm-bridge-admission",
        fast_cert_poll(Certs::Provided),
    )
    .await;
    let (dir, sm) = (hook.cert_dir.clone(), &hook.certs);
    let ca = sm.ca_bundle().unwrap();
    let addr = hook.handle.local_addr;

    let pods: Api<Pod> = Api::namespaced(client.clone(), MANAGED_NS);
    // Through the kube client, with a nodeName that must be cleared.
    let created = create_retrying(
        &pods,
        &plain_pod(
            "via-api",
            MANAGED_NS,
            json!({"spec": {"nodeName": "node-2"}}),
        ),
        RETRY,
    )
    .await;
    assert_eq!(
        scheduler_of(&created),
        SCHEDULER,
        "mutated to the bridge scheduler"
    );
    assert!(
        created.spec.as_ref().unwrap().node_name.is_none(),
        "nodeName cleared"
    );

    // Through kubectl.
    let manifest = dir.join("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: via-kubectl\n  namespace: {MANAGED_NS}\nspec:\n  containers:\n  - name: main\n    image: busybox\n    command: [sleep, infinity]\n    resources:\n      requests: {{cpu: \"1\", memory: 100Mi}}\n"
        ),
    )
    .unwrap();
    env.kube_env
        .kubectl(&["apply", "-f", manifest.to_str().unwrap()])
        .expect("kubectl apply");
    let via_kubectl = pods.get("via-kubectl").await.unwrap();
    assert_eq!(scheduler_of(&via_kubectl), SCHEDULER);

    // Both end up bound through Slurm without naming the scheduler.
    let names = vec!["via-api".to_string(), "via-kubectl".to_string()];
    let bound = env
        .wait_bound_in(MANAGED_NS, &names, Duration::from_secs(60))
        .await;
    for p in &bound {
        assert!(
            p.labels()
                .contains_key(slurm_bridge::wellknown::LABEL_SLURM_JOBID),
            "{} has a Slurm job id",
            p.metadata.name.as_deref().unwrap_or_default()
        );
    }

    // A forged jobid label is refused with the reference message.
    let forged = plain_pod(
        "forged",
        MANAGED_NS,
        json!({"metadata": {"labels": {slurm_bridge::wellknown::LABEL_SLURM_JOBID: "42"}}}),
    );
    let err = pods
        .create(&PostParams::default(), &forged)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(validate::MSG_JOBID_LABEL), "{err}");
    // So is the kubectl equivalent.
    let forged_yaml = dir.join("forged.yaml");
    std::fs::write(
        &forged_yaml,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: forged2\n  namespace: {MANAGED_NS}\n  annotations:\n    slinky.slurm.net/slurm-node: node-1\nspec:\n  containers:\n  - name: main\n    image: busybox\n"
        ),
    )
    .unwrap();
    let err = env
        .kube_env
        .kubectl(&["apply", "-f", forged_yaml.to_str().unwrap()])
        .unwrap_err();
    assert!(
        err.to_string().contains(validate::MSG_NODE_ANNOTATION),
        "{err}"
    );

    // A pod asking to run as another Slurm user (the Go original submitted it as UserId=4242):
    // no tenant lets its author choose, so it is refused naming the key and the namespace.
    let err = pods
        .create(
            &PostParams::default(),
            &plain_pod(
                "as-4242",
                MANAGED_NS,
                json!({"metadata": {"annotations": {"slurmjob.slinky.slurm.net/user-id": "4242"}}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "in namespace \"{MANAGED_NS}\" (tenant \"(default)\") annotation slurmjob.slinky.slurm.net/user-id=\"4242\" is not allowed"
        )),
        "{err}"
    );

    // A running pod's jobid label cannot change.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = pods.get("via-api").await.unwrap();
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            break;
        }
        assert!(Instant::now() < deadline, "via-api not Running");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err = pods
        .patch(
            "via-api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {slurm_bridge::wellknown::LABEL_SLURM_JOBID: "999999"}}})),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(validate::MSG_RUNNING_JOBID),
        "{err}"
    );
    // Other updates of a managed pod go through (no patch of the immutable schedulerName).
    pods.patch(
        "via-api",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .expect("a plain label update is allowed");

    // Another scheduler's pod in a managed namespace is left alone (no rewrite, no checks).
    let custom = pods
        .create(
            &PostParams::default(),
            &plain_pod(
                "custom",
                MANAGED_NS,
                json!({"spec": {"schedulerName": "custom-scheduler", "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}}),
            ),
        )
        .await
        .expect("another scheduler's pod is not validated");
    assert_eq!(scheduler_of(&custom), "custom-scheduler");
    // A pod outside the managed namespaces keeps the default scheduler.
    let outside = Api::<Pod>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &plain_pod("outside", "default", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(scheduler_of(&outside), "default-scheduler");

    // Bad AdmissionReviews: 400 with a message; the webhook keeps serving.
    for body in [
        &b"not json"[..],
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        br#"{"kind":"Pod"}"#,
    ] {
        let (status, msg, _) = https_post(addr, &ca, "/validate--v1-pod", body).await;
        assert_eq!(status, 400, "{msg}");
        assert!(!msg.trim().is_empty());
    }

    // A certificate rotated while serving: new files in the cert dir; new connections get the
    // new certificate, and the API server (same CA) goes on calling the webhook.
    let (_, _, before) = https_post(addr, &ca, "/validate--v1-pod", b"x").await;
    std::fs::remove_file(dir.join("tls.crt")).unwrap();
    sm.ensure_files(SystemTime::now()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, _, now) = https_post(addr, &ca, "/validate--v1-pod", b"x").await;
        if now != before {
            break;
        }
        assert!(Instant::now() < deadline, "new certificate not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = pods
        .create(
            &PostParams::default(),
            &plain_pod("after-rotation", MANAGED_NS, json!({})),
        )
        .await
        .expect("the API server calls the webhook with the rotated certificate");
    assert_eq!(scheduler_of(&after), SCHEDULER);
    env.wait_bound_in(
        MANAGED_NS,
        &["after-rotation".to_string()],
        Duration::from_secs(60),
    )
    .await;

    drop(hook);
    env.assert_invariants().await;
}
