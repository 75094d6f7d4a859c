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

mod bundle;
mod ca;
mod der;
mod files;
mod shared;

use super::tls;
use bundle::sync_ca_bundle;
use ca::{Ca, ca_params, serving_valid};
pub use der::not_after;
use files::{read_opt, write_atomic};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::ServerName;
pub use shared::CaSecret;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
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
    /// Reading or writing the Secret of the shared CA failed.
    #[error("CA Secret {namespace}/{name}: {message}")]
    Secret {
        /// Its namespace.
        namespace: String,
        /// Its name.
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
    /// The Secret the CA is shared through, so several replicas serve certificates of one CA
    /// (`None`: the CA stays in this pod's cert dir, fit for one replica only).
    pub ca_secret: Option<CaSecret>,
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
            ca_secret: None,
        }
    }
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
        self.create_dir()?;
        let (ca, ca_rotated) = self.ensure_ca(now)?;
        self.ensure_serving(&ca, ca_rotated, now)
    }

    /// As [`SelfManaged::ensure_files`], with the CA taken from (or published to) the shared
    /// Secret first when one is configured: used at start-up, so a replica never serves a
    /// certificate of a CA of its own.
    pub async fn ensure_start(
        &self,
        client: &kube::Client,
        now: SystemTime,
    ) -> Result<PassOutcome, CertError> {
        let Some(shared) = &self.ca_secret else {
            let sm = self.clone();
            return tokio::task::spawn_blocking(move || sm.ensure_files(now))
                .await
                .map_err(|e| CertError::Generate {
                    what: "certificates",
                    message: format!("certificate task failed: {e}"),
                })?;
        };
        self.create_dir()?;
        let (ca, ca_rotated) = self.ensure_shared_ca(client, shared, now).await?;
        self.ensure_serving(&ca, ca_rotated, now)
    }

    /// At start-up, with the CA `ca` in place (`ca_rotated`: made anew): issues the serving
    /// certificate when it is missing or due, without waiting for a caBundle sync.
    fn ensure_serving(
        &self,
        ca: &Ca,
        ca_rotated: bool,
        now: SystemTime,
    ) -> Result<PassOutcome, CertError> {
        let serving_rotated = !self.serving_ok(ca, now + self.renew_before);
        if serving_rotated {
            self.issue_serving(ca, now)?;
        }
        Ok(PassOutcome {
            ca_rotated,
            serving_rotated,
            configurations_updated: 0,
        })
    }

    fn create_dir(&self) -> Result<(), CertError> {
        std::fs::create_dir_all(&self.dir).map_err(|source| CertError::Io {
            action: "creating",
            path: self.dir.display().to_string(),
            source,
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
        self.create_dir()?;
        let (ca, ca_rotated) = match &self.ca_secret {
            Some(shared) => self.ensure_shared_ca(client, shared, now).await?,
            None => self.ensure_ca(now)?,
        };
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

    /// Runs passes every `check_interval` until `stop` completes, and at once when leadership
    /// is won; the configurations are written only while `leading` is true. (Without the pass on
    /// winning, a replica that won the Lease after its first pass left the webhook
    /// configurations' caBundle stale for a whole `check_interval`, and the API server refused
    /// the managed namespaces' pods meanwhile: a minute after `helm install` in mode `run`.)
    pub async fn run(
        self,
        client: kube::Client,
        mut leading: watch::Receiver<bool>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(self.check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leadership_open = true;
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
                changed = leading.changed(), if leadership_open => {
                    if changed.is_err() {
                        // The sender is gone: leadership stays as it is; ticks go on.
                        leadership_open = false;
                        continue;
                    }
                    if !*leading.borrow_and_update() {
                        continue;
                    }
                }
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
