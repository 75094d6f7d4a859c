//! The JobSet and LeaderWorkerSet CRDs, installed when missing so the simulated controllers
//! (and slurm-bridge) can use those kinds. Their schemas keep unknown fields: the sim does
//! not validate, the real CRDs do.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use kube::core::ApiResource;

use super::SimError;
use super::util;

/// `jobset.x-k8s.io/v1alpha2` JobSet.
pub fn jobset_resource() -> ApiResource {
    ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    }
}

/// `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
pub fn lws_resource() -> ApiResource {
    ApiResource {
        group: "leaderworkerset.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    }
}

fn crd(ar: &ApiResource, short: &str, scale: bool) -> Result<CustomResourceDefinition, SimError> {
    let mut subresources = serde_json::json!({ "status": {} });
    if scale {
        subresources["scale"] = serde_json::json!({
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.hpaPodSelector",
        });
    }
    let v = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{}.{}", ar.plural, ar.group) },
        "spec": {
            "group": ar.group,
            "scope": "Namespaced",
            "names": {
                "kind": ar.kind,
                "listKind": format!("{}List", ar.kind),
                "plural": ar.plural,
                "singular": ar.kind.to_lowercase(),
                "shortNames": [short],
            },
            "versions": [{
                "name": ar.version,
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                }},
                "subresources": subresources,
            }],
        },
    });
    serde_json::from_value(v).map_err(|e| SimError::Task(format!("building CRD: {e}")))
}

/// Create the JobSet and LeaderWorkerSet CRDs unless they exist.
pub async fn install(client: &kube::Client) -> Result<(), SimError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for c in [
        crd(&jobset_resource(), "js", false)?,
        crd(&lws_resource(), "lws", true)?,
    ] {
        let name = c.metadata.name.clone().unwrap_or_default();
        match util::retry!(api.create(&PostParams::default(), &c)) {
            Ok(_) => tracing::debug!(crd = %name, "kube-sim: CRD installed"),
            Err(e) if util::is_already_exists(&e) => {}
            Err(e) => return Err(SimError::Api(format!("installing CRD {name}"), e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_are_well_formed() {
        let c = crd(&lws_resource(), "lws", true).unwrap();
        assert_eq!(
            c.metadata.name.as_deref(),
            Some("leaderworkersets.leaderworkerset.x-k8s.io")
        );
        let v = &c.spec.versions[0];
        assert!(v.subresources.as_ref().unwrap().scale.is_some());
        let c = crd(&jobset_resource(), "js", false).unwrap();
        assert_eq!(c.spec.names.kind, "JobSet");
        assert_eq!(c.spec.versions[0].name, "v1alpha2");
    }
}
