//! Certificates the controllers need beyond the instance's serving pair: Kubeflow Trainer's
//! own CA (its rotator accepts nothing else) with the Secret and files it reads, and the
//! throwaway pair a binary insists on at start-up.

use crate::error::{Error, Result};
use base64::Engine;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use std::fs;
use std::path::Path;

/// What Trainer v2.0.0's `pkg/util/cert` hard-codes: the webhook configuration, the CA's name,
/// the Secret and the namespace it reads (outside a pod), the Service name in the DNS name.
pub(super) const TRAINER_WEBHOOK_CONFIGURATION: &str = "validator.trainer.kubeflow.org";
const TRAINER_CA_NAME: &str = "kubeflow-trainer-ca";
const TRAINER_NAMESPACE: &str = "kubeflow-system";
const TRAINER_SECRET: &str = "kubeflow-trainer-webhook-cert";
const TRAINER_DNS_NAME: &str = "kubeflow-trainer-controller-manager.kubeflow-system.svc";
/// The rotator only checks that this file exists (a release mounts the Secret there); the
/// webhook server itself reads `$TMPDIR/k8s-webhook-server/serving-certs`, per instance.
const TRAINER_MOUNT_CHECK: &str = "/tmp/k8s-webhook-server/serving-certs";

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
pub(super) fn throwaway_pair(dir: &Path) -> Result<()> {
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
pub(super) async fn trainer_setup(client: &kube::Client, dir: &Path) -> Result<(String, String)> {
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
