//! The JobSet, LeaderWorkerSet, Kueue and Kubeflow Trainer controllers, run as their releases
//! run them: with their admission webhooks (the controllers rely on the defaults their mutating
//! webhooks set, Kueue on its suspending ones), here served on loopback and called by the API
//! server. JobSet, LWS and Kueue serve the instance's serving certificate; Trainer always runs
//! its own certificate rotator, so it gets a CA of its own that the rotator accepts (below).

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

mod catalog;
mod certs;

pub use catalog::{JOBSET, KUEUE, LWS, TRAINER};
use certs::{throwaway_pair, trainer_setup};

/// One webhook of a controller: name, mutating or not, path, resources, operations, the
/// label that must exist on the object (pod webhooks only look at the controller's own pods)
/// and the namespaces it never sees.
struct Hook {
    name: &'static str,
    mutating: bool,
    path: &'static str,
    group: &'static str,
    version: &'static str,
    resources: &'static [&'static str],
    operations: &'static [&'static str],
    label: Option<&'static str>,
    exclude_namespaces: &'static [&'static str],
}

/// How a controller manager is configured and started.
enum Launch {
    /// A controller-runtime `Configuration` file of API `api`, with `extra` YAML appended, and
    /// `args` besides `--config` and `--kubeconfig`.
    Config {
        api: &'static str,
        extra: &'static str,
        args: &'static [&'static str],
        /// A folder the binary insists on reading a certificate pair from at start-up even
        /// though what uses it is off (Kueue's metrics server): filled with a throwaway
        /// self-signed pair if missing.
        must_exist: Option<&'static str>,
    },
    /// Kubeflow Trainer: flags only, its certificate rotator fed a Secret it accepts.
    Trainer,
}

/// A controller manager and its webhooks, as its release manifests configure them.
pub struct Controller {
    pub name: &'static str,
    binary: &'static str,
    launch: Launch,
    /// Names of the mutating and validating webhook configurations (Trainer's rotator updates
    /// its configuration by name).
    configurations: (&'static str, &'static str),
    hooks: &'static [Hook],
}

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
                "rules": [{"apiGroups": [h.group], "apiVersions": [h.version], "resources": h.resources,
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
            if !h.exclude_namespaces.is_empty() {
                w["namespaceSelector"] = json!({"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": h.exclude_namespaces}]});
            }
            w
        })
        .collect();
    let kind = if mutating {
        "MutatingWebhookConfiguration"
    } else {
        "ValidatingWebhookConfiguration"
    };
    let name = if mutating {
        c.configurations.0
    } else {
        c.configurations.1
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": hooks,
    })
}

/// Registers the controller's webhooks, writes its configuration and starts it.
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
    let pki = dir.join("pki");
    // `trainer_tmp` is Trainer's TMPDIR (empty for the others).
    let (ca_bundle, trainer_tmp) = match c.launch {
        Launch::Trainer => trainer_setup(client, dir).await?,
        Launch::Config { .. } => {
            let ca = fs::read_to_string(pki.join("ca.crt")).map_err(Error::io("read ca.crt"))?;
            (
                base64::engine::general_purpose::STANDARD.encode(ca),
                String::new(),
            )
        }
    };

    let pp = PatchParams::apply("kube-testenv").force();
    let name = |o: &kube::api::ObjectMeta| o.name.clone().unwrap_or_default();
    if c.hooks.iter().any(|h| h.mutating) {
        let m: MutatingWebhookConfiguration =
            serde_json::from_value(webhook_json(c, true, webhook, &ca_bundle))
                .map_err(|e| Error::Invalid(format!("{} webhook configuration: {e}", c.name)))?;
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .patch(&name(&m.metadata), &pp, &Patch::Apply(&m))
            .await
            .map_err(Error::kube(format!(
                "register {} mutating webhooks",
                c.name
            )))?;
    }
    let v: ValidatingWebhookConfiguration =
        serde_json::from_value(webhook_json(c, false, webhook, &ca_bundle))
            .map_err(|e| Error::Invalid(format!("{} webhook configuration: {e}", c.name)))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&name(&v.metadata), &pp, &Patch::Apply(&v))
        .await
        .map_err(Error::kube(format!(
            "register {} validating webhooks",
            c.name
        )))?;

    let binary = bin_dir.join(c.binary);
    match &c.launch {
        Launch::Trainer => {
            // Flags only; leader election and metrics are off by default. `env` sets TMPDIR,
            // where controller-runtime's webhook server looks for its certificate.
            launcher.spawn(
                c.name,
                Path::new("/usr/bin/env"),
                &[
                    format!("TMPDIR={trainer_tmp}"),
                    binary.display().to_string(),
                    format!("--kubeconfig={kubeconfig}"),
                    format!("--webhook-server-port={webhook}"),
                    format!("--health-probe-bind-address=127.0.0.1:{health}"),
                    "--metrics-bind-address=0".into(),
                    "--zap-devel=false".into(),
                ],
            )?;
        }
        Launch::Config {
            api,
            extra,
            args,
            must_exist,
        } => {
            if let Some(d) = must_exist {
                throwaway_pair(Path::new(d))?;
            }
            let certs = dir.join(format!("{}-certs", c.name));
            fs::create_dir_all(&certs).map_err(Error::io(format!("create {}", certs.display())))?;
            for (from, to) in [("serving.crt", "tls.crt"), ("serving.key", "tls.key")] {
                fs::copy(pki.join(from), certs.join(to))
                    .map_err(Error::io(format!("copy {from}")))?;
            }
            // Leader election, the built-in certificate rotator (it wants a Secret and Service
            // in its own namespace) and the metrics server (it wants certificates) are off; the
            // webhook and health endpoints stay on loopback.
            let config = dir.join(format!("{}-config.yaml", c.name));
            fs::write(
                &config,
                format!(
                    "apiVersion: {api}\nkind: Configuration\nleaderElection: {{leaderElect: false}}\ninternalCertManagement: {{enable: false}}\nwebhook: {{host: 127.0.0.1, port: {webhook}, certDir: {certs}}}\nmetrics: {{bindAddress: \"0\"}}\nhealth: {{healthProbeBindAddress: \"127.0.0.1:{health}\"}}\n{extra}",
                    certs = certs.display(),
                ),
            )
            .map_err(Error::io(format!("write {}", config.display())))?;
            let mut argv = vec![
                format!("--config={}", config.display()),
                format!("--kubeconfig={kubeconfig}"),
                "--zap-devel=false".into(),
            ];
            argv.extend(args.iter().map(|a| a.to_string()));
            launcher.spawn(c.name, &binary, &argv)?;
        }
    }
    Ok(())
}

/// Waits until the controller's webhook port accepts connections (it serves admission requests
/// for its kinds, so nothing can be created before) and, for Trainer, until its health endpoint
/// says ready (its webhooks are registered only once its rotator accepted the certificate).
pub async fn wait_ready(
    c: &Controller,
    launcher: &mut Launcher,
    ports: ControllerPorts,
) -> Result<()> {
    let [webhook, _, health] = ports;
    let trainer = matches!(c.launch, Launch::Trainer);
    launcher
        .wait_until(c.name, || {
            std::net::TcpStream::connect(("127.0.0.1", webhook)).is_ok()
                && (!trainer || crate::launcher::http_get_plain(health, "/readyz").is_some())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_configurations_are_valid_objects() {
        for c in [&JOBSET, &LWS, &KUEUE, &TRAINER] {
            for mutating in [true, false] {
                if mutating && !c.hooks.iter().any(|h| h.mutating) {
                    continue;
                }
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
