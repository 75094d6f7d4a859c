//! Self-managed certificates, so an install needs no cert-manager: a CA and a serving
//! certificate for given DNS names or IP addresses, kept in the cert dir; the `caBundle` of
//! named Mutating/ValidatingWebhookConfigurations kept in sync with the CA; both rotated before
//! they expire.
//!
//! Files in the cert dir: `ca.crt` (the CA bundle: the signing CA first, then earlier CAs
//! until they expire, so certificates they signed stay trusted during a CA rotation), `ca.key`,
//! `tls.crt`, `tls.key` (keys mode 0600). Each file is written to a temporary name and renamed.
//!
//! One pass ([`SelfManaged::pass`]):
//! 1. the CA is (re)made when missing, unreadable, or when it would expire before a new
//!    serving certificate (validity plus renewal margin); expired CAs leave the bundle;
//! 2. the bundle is written into every webhook of the named configurations (only where it
//!    differs, so replicas and restarts agree; a configuration created later is filled at the
//!    next pass);
//! 3. the serving certificate is reissued when missing, not signed by the current CA, not valid
//!    for every name, or within the renewal margin of its expiry. After a CA rotation it waits
//!    for the bundle to reach the API server first, unless the current one has expired.

use super::tls;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::api::{Api, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// CA bundle file.
pub const CA_CERT_FILE: &str = "ca.crt";
/// CA key file.
pub const CA_KEY_FILE: &str = "ca.key";
const CA_COMMON_NAME: &str = "slurm-bridge-admission-ca";

/// A self-managed certificate problem.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Writing or reading a file.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was done.
        action: &'static str,
        /// File.
        path: String,
        /// I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Generating a key or certificate.
    #[error("generating the {what}: {message}")]
    Generate {
        /// Which.
        what: &'static str,
        /// rcgen's error.
        message: String,
    },
    /// A name is neither a DNS name nor an IP address.
    #[error("{0:?} is not a DNS name or an IP address")]
    BadName(String),
    /// The API server refused or failed.
    #[error("webhook configuration {name}: {message}")]
    Api {
        /// Configuration.
        name: String,
        /// Error text.
        message: String,
    },
    /// No Mutating- or ValidatingWebhookConfiguration has the name.
    #[error("no MutatingWebhookConfiguration or ValidatingWebhookConfiguration named {0}")]
    NotFound(String),
}

fn gen_err(what: &'static str) -> impl Fn(rcgen::Error) -> CertError {
    move |e| CertError::Generate {
        what,
        message: e.to_string(),
    }
}

/// Settings of the self-managed mode.
#[derive(Debug, Clone)]
pub struct SelfManaged {
    /// The cert dir (must be writable, e.g. an emptyDir).
    pub dir: PathBuf,
    /// DNS names and IP addresses of the serving certificate (the first is its common name).
    pub names: Vec<String>,
    /// Mutating/ValidatingWebhookConfigurations whose `caBundle` is kept in sync.
    pub webhook_configurations: Vec<String>,
    /// Lifetime of a serving certificate.
    pub validity: Duration,
    /// Lifetime of a CA.
    pub ca_validity: Duration,
    /// Renew this long before expiry.
    pub renew_before: Duration,
    /// Interval of the passes.
    pub check_interval: Duration,
}

impl SelfManaged {
    /// Defaults: serving certificates for a year, CAs for ten, renewed 30 days before expiry,
    /// checked every minute.
    pub fn new(dir: PathBuf, names: Vec<String>, webhook_configurations: Vec<String>) -> Self {
        SelfManaged {
            dir,
            names,
            webhook_configurations,
            validity: Duration::from_secs(365 * 86400),
            ca_validity: Duration::from_secs(10 * 365 * 86400),
            renew_before: Duration::from_secs(30 * 86400),
            check_interval: Duration::from_secs(60),
        }
    }
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassOutcome {
    /// A new CA was made.
    pub ca_rotated: bool,
    /// A new serving certificate was written.
    pub serving_rotated: bool,
    /// Webhook configurations updated.
    pub configurations_updated: usize,
}

// ---- DER: the validity of a certificate ------------------------------------------------

/// One DER element: (tag, contents, rest).
fn tlv(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn der_time(tag: u8, s: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(s).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let yy: i64 = s[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
        }
        0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let days = days_from_civil(year, n(0)?, n(2)?);
    let secs = days * 86400 + n(4)? * 3600 + n(6)? * 60 + n(8)?;
    u64::try_from(secs)
        .ok()
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

/// The `notAfter` of a DER certificate.
pub fn not_after(der: &[u8]) -> Option<SystemTime> {
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    let (tag, _, r) = tlv(rest)?;
    if tag == 0xa0 {
        rest = r; // version
    }
    let (_, _, r) = tlv(rest)?; // serial
    let (_, _, r) = tlv(r)?; // signature algorithm
    let (_, _, r) = tlv(r)?; // issuer
    let (_, validity, _) = tlv(r)?;
    let (_, _, r) = tlv(validity)?; // notBefore
    let (tag, t, _) = tlv(r)?;
    der_time(tag, t)
}

// ---- files ----------------------------------------------------------------------------

fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), CertError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |action| {
        move |source| CertError::Io {
            action,
            path: path.display().to_string(),
            source,
        }
    };
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy());
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io("writing"))?;
    f.write_all(data).map_err(io("writing"))?;
    f.sync_all().map_err(io("writing"))?;
    std::fs::rename(&tmp, path).map_err(io("renaming into"))
}

fn read_opt(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

fn ca_params(
    not_before: SystemTime,
    not_after: SystemTime,
) -> Result<CertificateParams, CertError> {
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(gen_err("CA"))?;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    p.distinguished_name = dn;
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = not_before.into();
    p.not_after = not_after.into();
    Ok(p)
}

fn pem_of(der: &CertificateDer<'_>) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The CA in the cert dir: its key, and the bundle (signing CA first).
struct Ca {
    key: KeyPair,
    bundle: Vec<CertificateDer<'static>>,
}

impl Ca {
    fn load(dir: &Path) -> Option<Ca> {
        let bundle: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&read_opt(&dir.join(CA_CERT_FILE))?)
                .filter_map(Result::ok)
                .collect();
        let key_pem = String::from_utf8(read_opt(&dir.join(CA_KEY_FILE))?).ok()?;
        let key = KeyPair::from_pem(&key_pem).ok()?;
        (!bundle.is_empty()).then_some(Ca { key, bundle })
    }

    fn signing_not_after(&self) -> Option<SystemTime> {
        self.bundle.first().and_then(|c| not_after(c))
    }

    fn bundle_pem(&self) -> String {
        self.bundle.iter().map(pem_of).collect()
    }
}

/// Whether `leaf` is signed by `ca` and valid for every name at `at`.
fn serving_valid(
    leaf: &CertificateDer<'static>,
    ca: &CertificateDer<'static>,
    names: &[String],
    at: SystemTime,
) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    if roots.add(ca.clone()).is_err() {
        return false;
    }
    let Ok(verifier) = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        tls::provider(),
    )
    .build() else {
        return false;
    };
    let Ok(since_epoch) = at.duration_since(UNIX_EPOCH) else {
        return false;
    };
    names.iter().all(|n| {
        let Ok(name) = ServerName::try_from(n.as_str()) else {
            return false;
        };
        verifier
            .verify_server_cert(
                leaf,
                &[],
                &name,
                &[],
                UnixTime::since_unix_epoch(since_epoch),
            )
            .is_ok()
    })
}

impl SelfManaged {
    /// Checks the names (DNS names or IP addresses).
    pub fn validate(&self) -> Result<(), CertError> {
        if self.names.is_empty() {
            return Err(CertError::BadName(String::new()));
        }
        for n in &self.names {
            if ServerName::try_from(n.as_str()).is_err() {
                return Err(CertError::BadName(n.clone()));
            }
        }
        Ok(())
    }

    /// Step 1: the CA, made or rotated when needed. True when it changed.
    fn ensure_ca(&self, now: SystemTime) -> Result<(Ca, bool), CertError> {
        let needed_until = now + self.validity + self.renew_before;
        let existing = Ca::load(&self.dir);
        if let Some(ca) = &existing
            && ca.signing_not_after().is_some_and(|t| t >= needed_until)
        {
            // Drop expired CAs from the bundle.
            let kept: Vec<_> = ca
                .bundle
                .iter()
                .filter(|c| not_after(c).is_some_and(|t| t > now))
                .cloned()
                .collect();
            if kept.len() != ca.bundle.len() {
                let ca = Ca {
                    key: KeyPair::from_pem(&ca.key.serialize_pem()).map_err(gen_err("CA key"))?,
                    bundle: kept,
                };
                write_atomic(
                    &self.dir.join(CA_CERT_FILE),
                    ca.bundle_pem().as_bytes(),
                    0o644,
                )?;
                return Ok((ca, true));
            }
            let ca = existing.ok_or_else(|| CertError::Generate {
                what: "CA",
                message: "vanished".into(),
            })?;
            return Ok((ca, false));
        }
        let key = KeyPair::generate().map_err(gen_err("CA key"))?;
        let params = ca_params(
            now - Duration::from_secs(300),
            now + self.ca_validity.max(self.validity + self.renew_before),
        )?;
        let cert = params.self_signed(&key).map_err(gen_err("CA"))?;
        let mut bundle = vec![cert.der().clone()];
        if let Some(old) = existing {
            bundle.extend(
                old.bundle
                    .into_iter()
                    .filter(|c| not_after(c).is_some_and(|t| t > now)),
            );
        }
        let ca = Ca { key, bundle };
        write_atomic(
            &self.dir.join(CA_KEY_FILE),
            ca.key.serialize_pem().as_bytes(),
            0o600,
        )?;
        write_atomic(
            &self.dir.join(CA_CERT_FILE),
            ca.bundle_pem().as_bytes(),
            0o644,
        )?;
        tracing::info!(dir = %self.dir.display(), "made a new admission CA");
        Ok((ca, true))
    }

    /// Whether the serving certificate in the dir is good at `at`.
    fn serving_ok(&self, ca: &Ca, at: SystemTime) -> bool {
        let (Some(cert), Some(key), Some(signing)) = (
            read_opt(&self.dir.join(tls::CERT_FILE)),
            read_opt(&self.dir.join(tls::KEY_FILE)),
            ca.bundle.first(),
        ) else {
            return false;
        };
        let Ok(ck) = tls::certified_key(&cert, &key, "tls.crt", "tls.key") else {
            return false;
        };
        ck.cert
            .first()
            .is_some_and(|leaf| serving_valid(leaf, signing, &self.names, at))
    }

    /// Step 3: a new serving certificate signed by `ca`.
    fn issue_serving(&self, ca: &Ca, now: SystemTime) -> Result<(), CertError> {
        let ca_until = ca.signing_not_after().unwrap_or(now + self.validity);
        let issuer = Issuer::new(
            ca_params(now, ca_until)?,
            KeyPair::from_pem(&ca.key.serialize_pem()).map_err(gen_err("CA key"))?,
        );
        let key = KeyPair::generate().map_err(gen_err("serving key"))?;
        let mut p =
            CertificateParams::new(self.names.clone()).map_err(gen_err("serving certificate"))?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            self.names.first().cloned().unwrap_or_default(),
        );
        p.distinguished_name = dn;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.not_before = (now - Duration::from_secs(300)).into();
        p.not_after = (now + self.validity).min(ca_until).into();
        let cert = p
            .signed_by(&key, &issuer)
            .map_err(gen_err("serving certificate"))?;
        // Key first: the reloader refuses a certificate whose key is not there yet.
        write_atomic(
            &self.dir.join(tls::KEY_FILE),
            key.serialize_pem().as_bytes(),
            0o600,
        )?;
        write_atomic(&self.dir.join(tls::CERT_FILE), cert.pem().as_bytes(), 0o644)?;
        tracing::info!(dir = %self.dir.display(), names = ?self.names, "issued a new serving certificate");
        Ok(())
    }

    /// The files only (steps 1 and 3, no API server): makes what is missing or due. Used at
    /// start-up before the server loads its certificate.
    pub fn ensure_files(&self, now: SystemTime) -> Result<PassOutcome, CertError> {
        std::fs::create_dir_all(&self.dir).map_err(|source| CertError::Io {
            action: "creating",
            path: self.dir.display().to_string(),
            source,
        })?;
        let (ca, ca_rotated) = self.ensure_ca(now)?;
        let serving_rotated = !self.serving_ok(&ca, now + self.renew_before);
        if serving_rotated {
            self.issue_serving(&ca, now)?;
        }
        Ok(PassOutcome {
            ca_rotated,
            serving_rotated,
            configurations_updated: 0,
        })
    }

    /// The CA bundle (PEM) in the cert dir.
    pub fn ca_bundle(&self) -> Option<String> {
        Ca::load(&self.dir).map(|c| c.bundle_pem())
    }

    /// One pass (see the module documentation). `sync` says whether this replica writes the
    /// webhook configurations (the leader).
    pub async fn pass(
        &self,
        client: &kube::Client,
        now: SystemTime,
        sync: bool,
    ) -> Result<PassOutcome, CertError> {
        std::fs::create_dir_all(&self.dir).map_err(|source| CertError::Io {
            action: "creating",
            path: self.dir.display().to_string(),
            source,
        })?;
        let (ca, ca_rotated) = self.ensure_ca(now)?;
        let mut outcome = PassOutcome {
            ca_rotated,
            ..Default::default()
        };
        let mut synced = false;
        if sync {
            let bundle = ca.bundle_pem();
            let mut errors = Vec::new();
            for name in &self.webhook_configurations {
                match sync_ca_bundle(client, name, bundle.as_bytes()).await {
                    Ok(n) => outcome.configurations_updated += n,
                    Err(e) => errors.push(e),
                }
            }
            synced = errors.is_empty();
            if let Some(e) = errors.into_iter().next() {
                tracing::warn!(error = %e, "caBundle not synced; retrying at the next pass");
            }
        }
        if !self.serving_ok(&ca, now + self.renew_before) {
            // After a new CA, wait until the API server trusts it, unless the certificate in
            // service has expired anyway.
            if !ca_rotated || synced || !self.serving_ok(&ca, now) {
                self.issue_serving(&ca, now)?;
                outcome.serving_rotated = true;
            }
        }
        Ok(outcome)
    }

    /// Runs passes every `check_interval` until `stop` completes; the configurations are
    /// written only while `leading` is true.
    pub async fn run(
        self,
        client: kube::Client,
        leading: watch::Receiver<bool>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(self.check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            let sync = *leading.borrow();
            match self.pass(&client, SystemTime::now(), sync).await {
                Ok(o) if o != PassOutcome::default() => {
                    tracing::info!(
                        ca_rotated = o.ca_rotated,
                        serving_rotated = o.serving_rotated,
                        configurations_updated = o.configurations_updated,
                        "self-managed certificates updated"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "self-managed certificate pass failed"),
            }
        }
    }
}

fn api_err(name: &str) -> impl Fn(kube::Error) -> CertError + '_ {
    move |e| CertError::Api {
        name: name.into(),
        message: e.to_string(),
    }
}

/// Writes `bundle` into the webhooks `configs` gives of the configuration `name`, where it
/// differs: `None` when the configuration does not exist, else whether it was updated.
async fn sync_one<K>(
    api: Api<K>,
    name: &str,
    bundle: &[u8],
    configs: impl for<'a> Fn(&'a mut K) -> Vec<&'a mut WebhookClientConfig>,
) -> Result<Option<bool>, CertError>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let Some(mut obj) = api.get_opt(name).await.map_err(api_err(name))? else {
        return Ok(None);
    };
    let mut changed = false;
    for c in configs(&mut obj) {
        if c.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle) {
            c.ca_bundle = Some(ByteString(bundle.to_vec()));
            changed = true;
        }
    }
    if changed {
        api.replace(name, &PostParams::default(), &obj)
            .await
            .map_err(api_err(name))?;
    }
    Ok(Some(changed))
}

/// Writes `bundle` into every webhook of the Mutating- and/or ValidatingWebhookConfiguration
/// `name` where it differs. Returns how many configurations were updated.
pub async fn sync_ca_bundle(
    client: &kube::Client,
    name: &str,
    bundle: &[u8],
) -> Result<usize, CertError> {
    let mutating = sync_one(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        name,
        bundle,
        |m| {
            m.webhooks
                .iter_mut()
                .flatten()
                .map(|w| &mut w.client_config)
                .collect()
        },
    )
    .await?;
    let validating = sync_one(
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        name,
        bundle,
        |v| {
            v.webhooks
                .iter_mut()
                .flatten()
                .map(|w| &mut w.client_config)
                .collect()
        },
    )
    .await?;
    let found = mutating.is_some() || validating.is_some();
    let updated = [mutating, validating]
        .into_iter()
        .filter(|c| *c == Some(true))
        .count();
    if !found {
        return Err(CertError::NotFound(name.into()));
    }
    if updated > 0 {
        tracing::info!(configuration = name, "caBundle updated");
    }
    Ok(updated)
}
