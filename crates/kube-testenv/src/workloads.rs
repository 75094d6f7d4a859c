//! The JobSet and LeaderWorkerSet controllers, run as their releases run them: with their
//! admission webhooks (both controllers rely on the defaults their mutating webhooks set), here
//! served on loopback with the instance's serving certificate and called by the API server.

use crate::error::{Error, Result};
use crate::launcher::Launcher;
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;

/// One webhook of a controller: name, mutating or not, path, resources, operations, and the
/// label that must exist on the object (pod webhooks only look at the controller's own pods).
struct Hook {
    name: &'static str,
    mutating: bool,
    path: &'static str,
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    operations: &'static [&'static str],
    label: Option<&'static str>,
}

/// A controller manager and its webhooks, as its release manifests configure them.
pub struct Controller {
    pub name: &'static str,
    binary: &'static str,
    config_api: &'static str,
    hooks: &'static [Hook],
}

pub const JOBSET: Controller = Controller {
    name: "jobset",
    binary: "jobset-controller",
    config_api: "config.jobset.x-k8s.io/v1alpha1",
    hooks: &[
        Hook {
            name: "mjobset.kb.io",
            mutating: true,
            path: "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
            group: "jobset.x-k8s.io",
            version: "v1alpha2",
            resource: "jobsets",
            operations: &["CREATE"],
            label: None,
        },
        Hook {
            name: "mpod.kb.io",
            mutating: true,
            path: "/mutate--v1-pod",
            group: "",
            version: "v1",
            resource: "pods",
            operations: &["CREATE"],
            label: Some("jobset.sigs.k8s.io/jobset-name"),
        },
        Hook {
            name: "vjobset.kb.io",
            mutating: false,
            path: "/validate-jobset-x-k8s-io-v1alpha2-jobset",
            group: "jobset.x-k8s.io",
            version: "v1alpha2",
            resource: "jobsets",
            operations: &["CREATE", "UPDATE"],
            label: None,
        },
        Hook {
            name: "vpod.kb.io",
            mutating: false,
            path: "/validate--v1-pod",
            group: "",
            version: "v1",
            resource: "pods",
            operations: &["CREATE"],
            label: Some("jobset.sigs.k8s.io/jobset-name"),
        },
    ],
};

pub const LWS: Controller = Controller {
    name: "lws",
    binary: "lws-controller",
    config_api: "config.lws.x-k8s.io/v1alpha1",
    hooks: &[
        Hook {
            name: "mleaderworkerset.kb.io",
            mutating: true,
            path: "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            group: "leaderworkerset.x-k8s.io",
            version: "v1",
            resource: "leaderworkersets",
            operations: &["CREATE", "UPDATE"],
            label: None,
        },
        Hook {
            name: "mpod.kb.io",
            mutating: true,
            path: "/mutate--v1-pod",
            group: "",
            version: "v1",
            resource: "pods",
            operations: &["CREATE"],
            label: Some("leaderworkerset.sigs.k8s.io/name"),
        },
        Hook {
            name: "vleaderworkerset.kb.io",
            mutating: false,
            path: "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            group: "leaderworkerset.x-k8s.io",
            version: "v1",
            resource: "leaderworkersets",
            operations: &["CREATE", "UPDATE"],
            label: None,
        },
        Hook {
            name: "vpod.kb.io",
            mutating: false,
            path: "/validate--v1-pod",
            group: "",
            version: "v1",
            resource: "pods",
            operations: &["CREATE", "UPDATE"],
            label: Some("leaderworkerset.sigs.k8s.io/name"),
        },
        Hook {
            name: "vdisaggregatedset.kb.io",
            mutating: false,
            path: "/validate-disaggregatedset-x-k8s-io-v1-disaggregatedset",
            group: "disaggregatedset.x-k8s.io",
            version: "v1",
            resource: "disaggregatedsets",
            operations: &["CREATE", "UPDATE"],
            label: None,
        },
    ],
};

/// `[webhook, metrics, health]` ports.
pub type ControllerPorts = [u16; 3];

fn webhook_json(c: &Controller, mutating: bool, port: u16, ca_bundle: &str) -> Value {
    let hooks: Vec<Value> = c
        .hooks
        .iter()
        .filter(|h| h.mutating == mutating)
        .map(|h| {
            let mut w = json!({
                "name": h.name,
                "clientConfig": {"url": format!("https://127.0.0.1:{port}{}", h.path), "caBundle": ca_bundle},
                "rules": [{"apiGroups": [h.group], "apiVersions": [h.version], "resources": [h.resource],
                           "operations": h.operations, "scope": "*"}],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            });
            if let Some(label) = h.label {
                w["objectSelector"] =
                    json!({"matchExpressions": [{"key": label, "operator": "Exists"}]});
            }
            w
        })
        .collect();
    let kind = if mutating {
        "MutatingWebhookConfiguration"
    } else {
        "ValidatingWebhookConfiguration"
    };
    let prefix = if mutating { "mutating" } else { "validating" };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": format!("{}-{prefix}-webhook-configuration", c.name)},
        "webhooks": hooks,
    })
}

/// Registers the controller's webhooks, writes its configuration and starts it. The webhook
/// serves the instance's serving certificate (valid for 127.0.0.1), signed by the cluster CA.
pub async fn start(
    c: &Controller,
    client: &kube::Client,
    launcher: &mut Launcher,
    bin_dir: &Path,
    dir: &Path,
    kubeconfig: &str,
    ports: ControllerPorts,
) -> Result<()> {
    let [webhook, _metrics, health] = ports;
    let certs = dir.join(format!("{}-certs", c.name));
    fs::create_dir_all(&certs).map_err(Error::io(format!("create {}", certs.display())))?;
    let pki = dir.join("pki");
    for (from, to) in [("serving.crt", "tls.crt"), ("serving.key", "tls.key")] {
        fs::copy(pki.join(from), certs.join(to)).map_err(Error::io(format!("copy {from}")))?;
    }
    let ca = fs::read_to_string(pki.join("ca.crt")).map_err(Error::io("read ca.crt"))?;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);

    let pp = PatchParams::apply("kube-testenv").force();
    let m: MutatingWebhookConfiguration =
        serde_json::from_value(webhook_json(c, true, webhook, &ca_bundle))
            .map_err(|e| Error::Invalid(format!("{} webhook configuration: {e}", c.name)))?;
    let v: ValidatingWebhookConfiguration =
        serde_json::from_value(webhook_json(c, false, webhook, &ca_bundle))
            .map_err(|e| Error::Invalid(format!("{} webhook configuration: {e}", c.name)))?;
    let name = |o: &kube::api::ObjectMeta| o.name.clone().unwrap_or_default();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&name(&m.metadata), &pp, &Patch::Apply(&m))
        .await
        .map_err(Error::kube(format!(
            "register {} mutating webhooks",
            c.name
        )))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&name(&v.metadata), &pp, &Patch::Apply(&v))
        .await
        .map_err(Error::kube(format!(
            "register {} validating webhooks",
            c.name
        )))?;

    // Leader election, the built-in certificate rotator (it wants a Secret and Service in its
    // own namespace) and the metrics server (it wants certificates) are off; the webhook and
    // health endpoints stay on loopback.
    let config = dir.join(format!("{}-config.yaml", c.name));
    fs::write(
        &config,
        format!(
            "apiVersion: {api}\nkind: Configuration\nleaderElection: {{leaderElect: false}}\ninternalCertManagement: {{enable: false}}\nwebhook: {{host: 127.0.0.1, port: {webhook}, certDir: {certs}}}\nmetrics: {{bindAddress: \"0\"}}\nhealth: {{healthProbeBindAddress: \"127.0.0.1:{health}\"}}\n",
            api = c.config_api,
            certs = certs.display(),
        ),
    )
    .map_err(Error::io(format!("write {}", config.display())))?;
    launcher.spawn(
        c.name,
        &bin_dir.join(c.binary),
        &[
            format!("--config={}", config.display()),
            format!("--kubeconfig={kubeconfig}"),
            "--zap-devel=false".into(),
        ],
    )?;
    Ok(())
}

/// Waits until the controller's webhook port accepts connections (it serves admission requests
/// for its kinds, so nothing can be created before).
pub async fn wait_ready(
    c: &Controller,
    launcher: &mut Launcher,
    ports: ControllerPorts,
) -> Result<()> {
    let port = ports[0];
    launcher
        .wait_until(c.name, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_configurations_are_valid_objects() {
        for c in [&JOBSET, &LWS] {
            for mutating in [true, false] {
                let v = webhook_json(c, mutating, 9443, "Q0E=");
                let hooks = v["webhooks"].as_array().unwrap();
                assert!(!hooks.is_empty());
                for h in hooks {
                    assert!(
                        h["clientConfig"]["url"]
                            .as_str()
                            .unwrap()
                            .starts_with("https://127.0.0.1:9443/")
                    );
                }
                if mutating {
                    let _: MutatingWebhookConfiguration = serde_json::from_value(v).unwrap();
                } else {
                    let _: ValidatingWebhookConfiguration = serde_json::from_value(v).unwrap();
                }
            }
        }
    }
}
