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

pub const JOBSET: Controller = Controller {
    name: "jobset",
    binary: "jobset-controller",
    launch: Launch::Config {
        api: "config.jobset.x-k8s.io/v1alpha1",
        extra: "",
        args: &[],
        must_exist: None,
    },
    configurations: (
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
    ),
    hooks: &[
        Hook {
            name: "mjobset.kb.io",
            mutating: true,
            path: "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
            group: "jobset.x-k8s.io",
            version: "v1alpha2",
            resources: &["jobsets"],
            operations: &["CREATE"],
            label: None,
            exclude_namespaces: &[],
        },
        Hook {
            name: "mpod.kb.io",
            mutating: true,
            path: "/mutate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: &["CREATE"],
            label: Some("jobset.sigs.k8s.io/jobset-name"),
            exclude_namespaces: &[],
        },
        Hook {
            name: "vjobset.kb.io",
            mutating: false,
            path: "/validate-jobset-x-k8s-io-v1alpha2-jobset",
            group: "jobset.x-k8s.io",
            version: "v1alpha2",
            resources: &["jobsets"],
            operations: &["CREATE", "UPDATE"],
            label: None,
            exclude_namespaces: &[],
        },
        Hook {
            name: "vpod.kb.io",
            mutating: false,
            path: "/validate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: &["CREATE"],
            label: Some("jobset.sigs.k8s.io/jobset-name"),
            exclude_namespaces: &[],
        },
    ],
};

pub const LWS: Controller = Controller {
    name: "lws",
    binary: "lws-controller",
    launch: Launch::Config {
        api: "config.lws.x-k8s.io/v1alpha1",
        extra: "",
        args: &[],
        must_exist: None,
    },
    configurations: (
        "lws-mutating-webhook-configuration",
        "lws-validating-webhook-configuration",
    ),
    hooks: &[
        Hook {
            name: "mleaderworkerset.kb.io",
            mutating: true,
            path: "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            group: "leaderworkerset.x-k8s.io",
            version: "v1",
            resources: &["leaderworkersets"],
            operations: &["CREATE", "UPDATE"],
            label: None,
            exclude_namespaces: &[],
        },
        Hook {
            name: "mpod.kb.io",
            mutating: true,
            path: "/mutate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: &["CREATE"],
            label: Some("leaderworkerset.sigs.k8s.io/name"),
            exclude_namespaces: &[],
        },
        Hook {
            name: "vleaderworkerset.kb.io",
            mutating: false,
            path: "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            group: "leaderworkerset.x-k8s.io",
            version: "v1",
            resources: &["leaderworkersets"],
            operations: &["CREATE", "UPDATE"],
            label: None,
            exclude_namespaces: &[],
        },
        Hook {
            name: "vpod.kb.io",
            mutating: false,
            path: "/validate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: &["CREATE", "UPDATE"],
            label: Some("leaderworkerset.sigs.k8s.io/name"),
            exclude_namespaces: &[],
        },
        Hook {
            name: "vdisaggregatedset.kb.io",
            mutating: false,
            path: "/validate-disaggregatedset-x-k8s-io-v1-disaggregatedset",
            group: "disaggregatedset.x-k8s.io",
            version: "v1",
            resources: &["disaggregatedsets"],
            operations: &["CREATE", "UPDATE"],
            label: None,
            exclude_namespaces: &[],
        },
    ],
};
/// A Kueue webhook on `group/version` `resources`.
const fn kueue_hook(
    name: &'static str,
    mutating: bool,
    path: &'static str,
    group: &'static str,
    version: &'static str,
    resources: &'static [&'static str],
    operations: &'static [&'static str],
) -> Hook {
    Hook {
        name,
        mutating,
        path,
        group,
        version,
        resources,
        operations,
        label: None,
        exclude_namespaces: &[],
    }
}

/// Namespaces Kueue's pod webhooks never see (its release's `namespaceSelector`).
const KUEUE_EXCLUDED: &[&str] = &["kube-system", "kueue-system"];
const CREATE: &[&str] = &["CREATE"];
const CREATE_UPDATE: &[&str] = &["CREATE", "UPDATE"];

/// Kueue with the `batch/job` and `pod` integrations (plain pods and pod groups), and the
/// webhooks of those and of its own kinds. The visibility API server is off: it would need an
/// APIService and binds a fixed port.
pub const KUEUE: Controller = Controller {
    name: "kueue",
    binary: "kueue",
    launch: Launch::Config {
        api: "config.kueue.x-k8s.io/v1beta2",
        extra: "integrations:\n  frameworks: [\"batch/job\", \"pod\"]\n",
        args: &["--feature-gates=VisibilityOnDemand=false"],
        must_exist: Some("/etc/kueue/metrics/certs"),
    },
    configurations: (
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    ),
    hooks: &[
        kueue_hook(
            "mjob.kb.io",
            true,
            "/mutate-batch-v1-job",
            "batch",
            "v1",
            &["jobs"],
            CREATE,
        ),
        kueue_hook(
            "vjob.kb.io",
            false,
            "/validate-batch-v1-job",
            "batch",
            "v1",
            &["jobs"],
            CREATE_UPDATE,
        ),
        Hook {
            name: "mpod.kb.io",
            mutating: true,
            path: "/mutate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: CREATE,
            label: None,
            exclude_namespaces: KUEUE_EXCLUDED,
        },
        Hook {
            name: "vpod.kb.io",
            mutating: false,
            path: "/validate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: CREATE_UPDATE,
            label: None,
            exclude_namespaces: KUEUE_EXCLUDED,
        },
        kueue_hook(
            "mworkload.kb.io",
            true,
            "/mutate-kueue-x-k8s-io-v1beta2-workload",
            "kueue.x-k8s.io",
            "v1beta2",
            &["workloads"],
            CREATE,
        ),
        kueue_hook(
            "vworkload.kb.io",
            false,
            "/validate-kueue-x-k8s-io-v1beta2-workload",
            "kueue.x-k8s.io",
            "v1beta2",
            &["workloads", "workloads/status"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "mclusterqueue.kb.io",
            true,
            "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
            "kueue.x-k8s.io",
            "v1beta2",
            &["clusterqueues"],
            CREATE,
        ),
        kueue_hook(
            "vclusterqueue.kb.io",
            false,
            "/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
            "kueue.x-k8s.io",
            "v1beta2",
            &["clusterqueues"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "vcohort.kb.io",
            false,
            "/validate-kueue-x-k8s-io-v1beta2-cohort",
            "kueue.x-k8s.io",
            "v1beta2",
            &["cohorts"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "mresourceflavor.kb.io",
            true,
            "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor",
            "kueue.x-k8s.io",
            "v1beta2",
            &["resourceflavors"],
            CREATE,
        ),
        kueue_hook(
            "vresourceflavor.kb.io",
            false,
            "/validate-kueue-x-k8s-io-v1beta2-resourceflavor",
            "kueue.x-k8s.io",
            "v1beta2",
            &["resourceflavors"],
            CREATE_UPDATE,
        ),
    ],
};

/// Kubeflow Trainer v2's controller manager and its validating webhooks (it has no mutating
/// ones; the configuration name is the one its rotator updates).
pub const TRAINER: Controller = Controller {
    name: "trainer",
    binary: "trainer-controller-manager",
    launch: Launch::Trainer,
    configurations: ("", TRAINER_WEBHOOK_CONFIGURATION),
    hooks: &[
        kueue_hook(
            "validator.clustertrainingruntime.trainer.kubeflow.org",
            false,
            "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime",
            "trainer.kubeflow.org",
            "v1alpha1",
            &["clustertrainingruntimes"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "validator.trainingruntime.trainer.kubeflow.org",
            false,
            "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime",
            "trainer.kubeflow.org",
            "v1alpha1",
            &["trainingruntimes"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "validator.trainjob.trainer.kubeflow.org",
            false,
            "/validate-trainer-kubeflow-org-v1alpha1-trainjob",
            "trainer.kubeflow.org",
            "v1alpha1",
            &["trainjobs"],
            CREATE_UPDATE,
        ),
    ],
};

/// What Trainer v2.0.0's `pkg/util/cert` hard-codes: the webhook configuration, the CA's name,
/// the Secret and the namespace it reads (outside a pod), the Service name in the DNS name.
const TRAINER_WEBHOOK_CONFIGURATION: &str = "validator.trainer.kubeflow.org";
const TRAINER_CA_NAME: &str = "kubeflow-trainer-ca";
const TRAINER_NAMESPACE: &str = "kubeflow-system";
const TRAINER_SECRET: &str = "kubeflow-trainer-webhook-cert";
const TRAINER_DNS_NAME: &str = "kubeflow-trainer-controller-manager.kubeflow-system.svc";
/// The rotator only checks that this file exists (a release mounts the Secret there); the
/// webhook server itself reads `$TMPDIR/k8s-webhook-server/serving-certs`, per instance.
const TRAINER_MOUNT_CHECK: &str = "/tmp/k8s-webhook-server/serving-certs";

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

/// A 2048-bit RSA key as `(PKCS#8 PEM, PKCS#1 PEM)`, from the `openssl` command: Trainer's
/// rotator reads its CA key as PKCS#1 RSA only, and `ring` (rcgen's backend) generates no RSA.
fn rsa_key(dir: &Path) -> Result<(String, String)> {
    let run = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .map_err(|e| {
                Error::Invalid(format!(
                    "openssl (needed for Trainer's webhook CA key; Debian package openssl): {e}"
                ))
            })?;
        if !out.status.success() {
            return Err(Error::Invalid(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    };
    let pkcs8 = run(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
    ])?;
    let file = dir.join("trainer-ca.key");
    fs::write(&file, &pkcs8).map_err(Error::io(format!("write {}", file.display())))?;
    let pkcs1 = run(&["rsa", "-in", &file.display().to_string(), "-traditional"])?;
    Ok((pkcs8, pkcs1))
}

/// PEM `(ca_cert, ca_key, serving_cert, serving_key)` that Trainer's certificate rotator keeps
/// instead of replacing: an RSA CA valid for its CA name (key in PKCS#1), a serving certificate
/// for its Service's DNS name (which the rotator checks) and for 127.0.0.1 (which the API
/// server calls).
fn trainer_certs(dir: &Path) -> Result<(String, String, String, String)> {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let err = |e: rcgen::Error| Error::Invalid(format!("Trainer webhook certificate: {e}"));
    let (ca_pkcs8, ca_pkcs1) = rsa_key(dir)?;
    let ca_key =
        KeyPair::from_pem_and_sign_algo(&ca_pkcs8, &rcgen::PKCS_RSA_SHA256).map_err(err)?;
    let mut ca = CertificateParams::new(vec![TRAINER_CA_NAME.to_string()]).map_err(err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
    let ca_key_pem = ca_pkcs1;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().map_err(err)?;
    let mut serving =
        CertificateParams::new(vec![TRAINER_DNS_NAME.to_string(), "127.0.0.1".to_string()])
            .map_err(err)?;
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let cert = serving.signed_by(&key, &issuer).map_err(err)?;
    Ok((ca_cert.pem(), ca_key_pem, cert.pem(), key.serialize_pem()))
}

/// Writes a self-signed `tls.crt`/`tls.key` (for no real name) into `dir` unless one is there.
fn throwaway_pair(dir: &Path) -> Result<()> {
    if dir.join("tls.crt").exists() && dir.join("tls.key").exists() {
        return Ok(());
    }
    let err = |e: rcgen::Error| Error::Invalid(format!("placeholder certificate: {e}"));
    let key = rcgen::KeyPair::generate().map_err(err)?;
    let cert = rcgen::CertificateParams::new(vec!["kube-testenv-unused".to_string()])
        .map_err(err)?
        .self_signed(&key)
        .map_err(err)?;
    fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
    fs::write(dir.join("tls.crt"), cert.pem()).map_err(Error::io("write placeholder tls.crt"))?;
    fs::write(dir.join("tls.key"), key.serialize_pem())
        .map_err(Error::io("write placeholder tls.key"))?;
    Ok(())
}

/// Creates Trainer's namespace and the Secret its rotator reads, writes the serving pair where
/// its webhook server reads it, and returns the CA bundle (base64) and the `TMPDIR` to run it with.
async fn trainer_setup(client: &kube::Client, dir: &Path) -> Result<(String, String)> {
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    let (ca, ca_key, cert, key) = trainer_certs(dir)?;
    let pp = PatchParams::apply("kube-testenv").force();
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TRAINER_NAMESPACE}}))
    .map_err(|e| Error::Invalid(format!("Trainer namespace: {e}")))?;
    Api::<Namespace>::all(client.clone())
        .patch(TRAINER_NAMESPACE, &pp, &Patch::Apply(&ns))
        .await
        .map_err(Error::kube(format!("create namespace {TRAINER_NAMESPACE}")))?;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": TRAINER_SECRET, "namespace": TRAINER_NAMESPACE},
        "stringData": {"ca.crt": ca, "ca.key": ca_key, "tls.crt": cert, "tls.key": key},
    }))
    .map_err(|e| Error::Invalid(format!("Trainer Secret: {e}")))?;
    Api::<Secret>::namespaced(client.clone(), TRAINER_NAMESPACE)
        .patch(TRAINER_SECRET, &pp, &Patch::Apply(&secret))
        .await
        .map_err(Error::kube(format!("create Secret {TRAINER_SECRET}")))?;
    let tmp = dir.join("trainer-tmp");
    let certs = tmp.join("k8s-webhook-server/serving-certs");
    for d in [&certs, Path::new(TRAINER_MOUNT_CHECK)] {
        fs::create_dir_all(d).map_err(Error::io(format!("create {}", d.display())))?;
    }
    fs::write(certs.join("tls.crt"), &cert).map_err(Error::io("write Trainer tls.crt"))?;
    fs::write(certs.join("tls.key"), &key).map_err(Error::io("write Trainer tls.key"))?;
    let check = Path::new(TRAINER_MOUNT_CHECK).join("tls.crt");
    if !check.exists() {
        fs::write(&check, &cert).map_err(Error::io(format!("write {}", check.display())))?;
    }
    Ok((
        base64::engine::general_purpose::STANDARD.encode(ca),
        tmp.display().to_string(),
    ))
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
