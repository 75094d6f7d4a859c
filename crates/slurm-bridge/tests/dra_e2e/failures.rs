//! A failure injected at each step of making a pod's claim leaves no claim behind.

use crate::e2e::{self, NS, allocated, claim_name};
use crate::support::{DRA_GPU, DRA_NODE, all_claims, dra_pod, start, wait_node};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// One injected failure per step of making a pod's claim, each by a ValidatingAdmissionPolicy
/// that refuses one pod's write: creating the claim, allocating it in its status, pointing the
/// pod's `extendedResourceClaimStatus` at it, and binding the pod. Each pod shows the failure, and
/// with the scheduler stopped no claim is left and no pod names one. Without the policies, each
/// pod is bound with exactly one claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failure_at_each_step_of_a_claim_leaves_no_claim() {
    let (mut env, controllers) = start().await;
    wait_node(&env, DRA_NODE, &["Gres=gpu:gpu.example.com:4"]).await;
    let steps = [
        (
            "fail-create",
            "resourceclaims",
            "CREATE",
            "!(has(object.metadata.generateName) && object.metadata.generateName.startsWith('fail-create-'))",
            reason_claim(),
        ),
        (
            "fail-allocate",
            "resourceclaims/status",
            "UPDATE",
            "!(has(object.metadata.generateName) && object.metadata.generateName.startsWith('fail-allocate-'))",
            reason_claim(),
        ),
        (
            "fail-status",
            "pods/status",
            "UPDATE",
            "!(object.metadata.name == 'fail-status' && has(object.status.extendedResourceClaimStatus))",
            reason_claim(),
        ),
        (
            "fail-bind",
            "pods/binding",
            "CREATE",
            "object.metadata.name != 'fail-bind'",
            "BindingFailed",
        ),
    ];
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.kube.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.kube.clone());
    // The claim-creation policy last: once it refuses a dry run, the others are in force too.
    for (pod, resource, op, expression, _) in steps.iter().rev() {
        let group = if resource.starts_with("pods") {
            ""
        } else {
            "resource.k8s.io"
        };
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": pod},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["*"],
                    "operations": [op], "resources": [resource]}]},
                "validations": [{"expression": expression,
                    "message": format!("injected failure for {pod}")}]},
        }))
        .unwrap();
        policies
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": pod},
            "spec": {"policyName": pod, "validationActions": ["Deny"]},
        }))
        .unwrap();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    let claims: Api<ResourceClaim> = Api::namespaced(env.kube.clone(), NS);
    let probe: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"generateName": "fail-create-probe-"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    }))
    .unwrap();
    wait_policies(&claims, &probe, true).await;

    // One GPU each, on a shared node, so the four jobs run side by side.
    for (pod, ..) in &steps {
        let mut p = dra_pod(pod, DRA_GPU, "1", &["sleep", "infinity"]);
        p["metadata"]["annotations"] = json!({"slurmjob.slinky.slurm.net/exclusive": "false"});
        env.create_pod(p).await;
    }
    for (pod, _, _, _, reason) in &steps {
        let message = env
            .wait_condition(pod, reason, Duration::from_secs(60))
            .await;
        assert!(
            message.contains(&format!("injected failure for {pod}")),
            "{pod}: {message}"
        );
        println!("{pod}: {reason}: {message}");
    }
    env.stop_scheduler().await;
    let left = all_claims(&env).await;
    assert!(
        left.is_empty(),
        "claims left behind: {:?}",
        left.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    for (pod, ..) in &steps {
        let p = env.pods().get(pod).await.unwrap();
        assert_eq!(claim_name(&p), None, "{pod} names a claim");
        assert!(!e2e::node_name_is_set(&p), "{pod} is bound");
    }

    // The policies go: every pod is bound with exactly one claim, and no GPU is in two.
    for (pod, ..) in &steps {
        bindings
            .delete(pod, &DeleteParams::default())
            .await
            .unwrap();
        policies
            .delete(pod, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_policies(&claims, &probe, false).await;
    env.start_scheduler().await;
    let names: Vec<String> = steps.iter().map(|s| s.0.to_string()).collect();
    let pods = env.wait_bound(&names, Duration::from_secs(90)).await;
    let all = all_claims(&env).await;
    assert_eq!(all.len(), steps.len(), "one claim per pod");
    let mut gpus = BTreeSet::new();
    for p in &pods {
        let name = claim_name(p).expect("a claim");
        let claim = all
            .iter()
            .find(|c| c.name_any() == name)
            .expect("the named claim exists");
        for (_, _, device) in allocated(claim) {
            assert!(gpus.insert(device.clone()), "{device} in two claims");
        }
    }
    assert_eq!(gpus.len(), steps.len());
    env.assert_invariants().await;
    controllers.stop().await;
}

/// Waits until a dry run creating `probe` is refused (`in_force`) or accepted: the policies are
/// in force, or gone. The API server picks policy changes up a moment after they are written.
async fn wait_policies(claims: &Api<ResourceClaim>, probe: &ResourceClaim, in_force: bool) {
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while claims.create(&dry_run, probe).await.is_ok() == in_force {
        assert!(
            Instant::now() < deadline,
            "the policies are {} after 30 s",
            if in_force {
                "not in force"
            } else {
                "still in force"
            }
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn reason_claim() -> &'static str {
    slurm_bridge::dra::claims::REASON_CLAIM_FAILED
}
