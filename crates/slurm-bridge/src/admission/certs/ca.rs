//! The CA and serving certificates: their parameters, PEM, and whether a serving certificate is
//! still good for the current CA, names and renewal margin.

use super::super::tls;
use super::der::not_after;
use super::files::read_opt;
use super::{CA_CERT_FILE, CA_COMMON_NAME, CA_KEY_FILE, CertError, gen_err};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The parameters of a new CA certificate (CA common name, cert and CRL signing) valid from
/// `not_before` to `not_after`.
pub(super) fn ca_params(
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

/// A DER certificate as PEM text.
pub(super) fn pem_of(der: &CertificateDer<'_>) -> String {
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
pub(super) struct Ca {
    pub(super) key: KeyPair,
    pub(super) bundle: Vec<CertificateDer<'static>>,
}

impl Ca {
    pub(super) fn load(dir: &Path) -> Option<Ca> {
        let bundle: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&read_opt(&dir.join(CA_CERT_FILE))?)
                .filter_map(Result::ok)
                .collect();
        let key_pem = String::from_utf8(read_opt(&dir.join(CA_KEY_FILE))?).ok()?;
        let key = KeyPair::from_pem(&key_pem).ok()?;
        (!bundle.is_empty()).then_some(Ca { key, bundle })
    }

    pub(super) fn signing_not_after(&self) -> Option<SystemTime> {
        self.bundle.first().and_then(|c| not_after(c))
    }

    pub(super) fn bundle_pem(&self) -> String {
        self.bundle.iter().map(pem_of).collect()
    }
}

/// Whether `leaf` is signed by `ca` and valid for every name at `at`.
pub(super) fn serving_valid(
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
