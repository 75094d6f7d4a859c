//! RBAC on the instance's API server: a ServiceAccount token limited to its Role, a forged token
//! refused.

use crate::support::{eventually, object, pod, refused, start};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use kube_testenv::InstanceOptions;
use serde_json::json;

/// A ServiceAccount token carries exactly the rights of its Role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_limits_a_service_account_token_to_its_role() {
    let inst = start(InstanceOptions::default()).await;
    let admin = inst.client();
    let pp = PostParams::default();
    for ns in ["team-a", "team-b"] {
        let obj: Namespace = object(json!({"metadata": {"name": ns}}));
        Api::<Namespace>::all(admin.clone())
            .create(&pp, &obj)
            .await
            .expect("create namespace");
    }
    let sa: ServiceAccount = object(json!({"metadata": {"name": "reader"}}));
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team-a");
    sas.create(&pp, &sa).await.expect("create ServiceAccount");
    let role: Role = object(json!({
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    }));
    Api::<Role>::namespaced(admin.clone(), "team-a")
        .create(&pp, &role)
        .await
        .expect("create Role");
    let binding: RoleBinding = object(json!({
        "metadata": {"name": "reader-reads-pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "team-a"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
    }));
    Api::<RoleBinding>::namespaced(admin.clone(), "team-a")
        .create(&pp, &binding)
        .await
        .expect("create RoleBinding");
    // A pod for the reader to see (no node and no scheduler: it stays Pending). It runs as
    // `reader`: the namespace's `default` ServiceAccount may not exist yet.
    let mut visible = pod("visible", None, &["sleep", "1"], json!({}));
    visible.spec.as_mut().unwrap().service_account_name = Some("reader".into());
    Api::<Pod>::namespaced(admin.clone(), "team-a")
        .create(&pp, &visible)
        .await
        .expect("create a pod as admin");

    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = sas
        .create_token_request("reader", &pp, &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token
        .expect("a token");

    // A client with only the token and the cluster CA from the instance's kubeconfig.
    let client_with = |token: &str| {
        let admin_kc = kube::config::Kubeconfig::read_from(inst.kubeconfig()).expect("kubeconfig");
        let cluster = admin_kc.clusters[0].cluster.clone().expect("cluster");
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            cluster.server.expect("server"),
            cluster.certificate_authority_data.expect("CA data"),
        );
        kube::config::Kubeconfig::from_yaml(&yaml).expect("token kubeconfig")
    };
    let reader = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(client_with(&token), &Default::default())
            .await
            .expect("token config"),
    )
    .expect("token client");

    let pods_a: Api<Pod> = Api::namespaced(reader.clone(), "team-a");
    // The RBAC authorizer learns of new bindings through its informers: allow it a moment.
    let listed = eventually("the reader to list pods in team-a", || {
        let pods_a = pods_a.clone();
        async move { pods_a.list(&ListParams::default()).await.ok() }
    })
    .await;
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["visible"]);
    pods_a.get("visible").await.expect("get is granted");

    let intruder = pod("intruder", None, &["sleep", "1"], json!({}));
    assert_eq!(
        refused("create a pod", pods_a.create(&pp, &intruder).await),
        403
    );
    let pods_b: Api<Pod> = Api::namespaced(reader.clone(), "team-b");
    assert_eq!(
        refused(
            "list pods in team-b",
            pods_b.list(&ListParams::default()).await
        ),
        403
    );
    let nodes: Api<Node> = Api::all(reader.clone());
    assert_eq!(
        refused("list nodes", nodes.list(&ListParams::default()).await),
        403
    );
    // A token the API server did not sign authenticates nobody.
    let forged = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(client_with("not-a-token"), &Default::default())
            .await
            .expect("forged config"),
    )
    .expect("forged client");
    assert_eq!(
        refused(
            "list pods with a forged token",
            Api::<Pod>::namespaced(forged, "team-a")
                .list(&ListParams::default())
                .await
        ),
        401
    );
}
