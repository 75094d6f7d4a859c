//! The control plane of a plain instance: node Leases and their renewal, Ready nodes with the
//! standard capacity, kubectl and the stamped versions, API discovery, the CRDs and their schema.

use crate::support::{eventually, is_ready, object, quantities, start, strings, taints};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube_testenv::InstanceOptions;
use serde_json::json;
use std::collections::BTreeMap;

/// Nodes, Leases, kubectl, API discovery and the CRDs of a plain instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_serves_nodes_leases_apis_and_crds() {
    let inst = start(InstanceOptions::with_nodes(2)).await;
    let client = inst.client();

    // Leases first: their renewal is checked last, after the other checks had time to pass.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut first_renewal = BTreeMap::new();
    for name in ["node-1", "node-2"] {
        let lease = eventually(&format!("the Lease of {name}"), || {
            let leases = leases.clone();
            async move { leases.get_opt(name).await.ok().flatten() }
        })
        .await;
        let spec = lease.spec.clone().expect("lease spec");
        assert_eq!(spec.holder_identity.as_deref(), Some(name));
        let owner = &lease.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", name));
        first_renewal.insert(name, spec.renew_time.expect("renewTime").0);
    }

    // Nodes: the standard capacity, Ready, and the not-ready taint lifted.
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes");
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["node-1", "node-2"]);
    let standard = strings(&[("cpu", "8"), ("memory", "16000Mi"), ("pods", "110")]);
    for n in &list.items {
        let st = n.status.as_ref().expect("node status");
        assert_eq!(
            quantities(st.capacity.as_ref()),
            standard,
            "{:?}",
            n.metadata.name
        );
        assert_eq!(
            quantities(st.allocatable.as_ref()),
            standard,
            "{:?}",
            n.metadata.name
        );
        assert!(is_ready(n), "{:?} not Ready", n.metadata.name);
        assert!(
            taints(n)
                .iter()
                .all(|t| t.key != "node.kubernetes.io/not-ready"),
            "{:?} still tainted: {:?}",
            n.metadata.name,
            taints(n)
        );
    }

    // kubectl (protobuf, unlike kube-rs) and the versions the binaries were stamped with.
    let out = inst
        .kubectl(&["create", "namespace", "x"])
        .expect("kubectl create namespace");
    assert!(out.contains("namespace/x created"), "{out}");
    let ns: Api<Namespace> = Api::all(client.clone());
    assert!(ns.get_opt("x").await.expect("get namespace x").is_some());
    let version = inst.kubectl(&["version"]).expect("kubectl version");
    assert!(version.contains("Client Version: v1.36.3"), "{version}");
    assert!(version.contains("Server Version: v1.36.3"), "{version}");
    let info = client.apiserver_version().await.expect("/version");
    assert_eq!(info.git_version, "v1.36.3");

    // API discovery: the alpha Workload API (runtime config + feature gate) and DRA.
    for (group_version, kinds) in [
        ("scheduling.k8s.io/v1alpha2", ["Workload", "PodGroup"]),
        ("resource.k8s.io/v1", ["ResourceClaim", "DeviceClass"]),
    ] {
        let resources = client
            .list_api_group_resources(group_version)
            .await
            .unwrap_or_else(|e| panic!("discovery of {group_version}: {e}"));
        let served: Vec<&str> = resources
            .resources
            .iter()
            .map(|r| r.kind.as_str())
            .collect();
        for kind in kinds {
            assert!(
                served.contains(&kind),
                "{group_version} lacks {kind}: {served:?}"
            );
        }
    }

    // The CRDs every instance has, Established.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in [
        "podgroups.scheduling.x-k8s.io",
        "jobsets.jobset.x-k8s.io",
        "leaderworkersets.leaderworkerset.x-k8s.io",
    ] {
        let crd = crds
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
        let conds = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{name} not Established: {conds:?}"
        );
    }

    // The CRD schema is enforced: a coscheduling PodGroup needs an integer minMember ≥ 1.
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "scheduling.x-k8s.io",
        "v1alpha1",
        "PodGroup",
    ));
    let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let group = |name: &str, min: serde_json::Value| -> DynamicObject {
        object(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"minMember": min},
        }))
    };
    groups
        .create(&PostParams::default(), &group("valid", json!(2)))
        .await
        .expect("a valid PodGroup is accepted");
    for (name, min) in [("text", json!("abc")), ("zero", json!(0))] {
        let r = groups
            .create(&PostParams::default(), &group(name, min.clone()))
            .await;
        match r {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422, "minMember {min}: {s:?}");
                assert!(
                    s.message.contains("minMember"),
                    "minMember {min}: {}",
                    s.message
                );
            }
            other => panic!("minMember {min} accepted: {other:?}"),
        }
    }

    // Each node's Lease is renewed (every 10 s, as a kubelet does).
    for (name, first) in first_renewal {
        eventually(&format!("a renewal of the Lease of {name}"), || {
            let leases = leases.clone();
            async move {
                let lease = leases.get(name).await.ok()?;
                let renewed = lease.spec?.renew_time?.0;
                (renewed > first).then_some(())
            }
        })
        .await;
    }
}
