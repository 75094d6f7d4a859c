//! Certificates and keys of one instance: a CA, the API server's serving certificate, the
//! admin's client certificate (group `system:masters`) and the service-account signing key.

use crate::error::{Error, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// Names the serving certificate is valid for: loopback, and the in-cluster service names.
const SERVING_NAMES: &[&str] = &[
    "127.0.0.1",
    "localhost",
    "10.0.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// PEM texts written into the instance folder.
pub struct Pki {
    pub ca_cert: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    /// Service-account token signing key (ECDSA P-256, PKCS#8) and its public half.
    pub sa_key: String,
    pub sa_pub: String,
    /// Client certificates of kubelets, `(node, certificate, key)`: CN `system:node:<node>`,
    /// O `system:nodes`, as the Node authorizer expects.
    pub nodes: Vec<(String, String, String)>,
}

fn pki_err(what: &'static str) -> impl Fn(rcgen::Error) -> Error {
    move |e| Error::Pki {
        what,
        message: e.to_string(),
    }
}

fn dn(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

/// Generates a fresh CA and everything signed by it, with a kubelet client certificate for
/// each of `nodes`; the serving certificate is also valid for `extra_names` (the `kubernetes`
/// Service's ClusterIP of an instance with its own service CIDR).
pub fn generate(nodes: &[String], extra_names: &[String]) -> Result<Pki> {
    let ca_key = KeyPair::generate().map_err(pki_err("CA key"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(pki_err("CA"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = dn("kube-testenv-ca", None);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(pki_err("CA"))?;
    let issuer = Issuer::new(ca_params, ca_key);

    let serving_key = KeyPair::generate().map_err(pki_err("serving key"))?;
    let mut serving = CertificateParams::new(
        SERVING_NAMES
            .iter()
            .map(|s| s.to_string())
            .chain(extra_names.iter().cloned())
            .collect::<Vec<_>>(),
    )
    .map_err(pki_err("serving certificate"))?;
    serving.distinguished_name = dn("kube-apiserver", None);
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let serving_cert = serving
        .signed_by(&serving_key, &issuer)
        .map_err(pki_err("serving certificate"))?;

    let admin_key = KeyPair::generate().map_err(pki_err("admin key"))?;
    let mut admin = CertificateParams::new(Vec::<String>::new()).map_err(pki_err("admin"))?;
    admin.distinguished_name = dn("kube-testenv-admin", Some("system:masters"));
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    admin.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let admin_cert = admin
        .signed_by(&admin_key, &issuer)
        .map_err(pki_err("admin certificate"))?;

    let mut node_certs = Vec::new();
    for node in nodes {
        let key = KeyPair::generate().map_err(pki_err("kubelet key"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(pki_err("kubelet"))?;
        params.distinguished_name = dn(&format!("system:node:{node}"), Some("system:nodes"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(pki_err("kubelet certificate"))?;
        node_certs.push((node.clone(), cert.pem(), key.serialize_pem()));
    }

    let sa = KeyPair::generate().map_err(pki_err("service-account key"))?;
    Ok(Pki {
        ca_cert: ca_cert.pem(),
        serving_cert: serving_cert.pem(),
        serving_key: serving_key.serialize_pem(),
        admin_cert: admin_cert.pem(),
        admin_key: admin_key.serialize_pem(),
        sa_key: sa.serialize_pem(),
        sa_pub: sa.public_key_pem(),
        nodes: node_certs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_distinct_pem_material() {
        let pki = generate(&["node-1".to_string()], &["10.96.3.1".to_string()]).unwrap();
        assert_eq!(pki.nodes.len(), 1);
        assert_ne!(pki.nodes[0].1, pki.admin_cert);
        assert!(pki.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.admin_key.contains("PRIVATE KEY"));
        assert!(pki.sa_pub.contains("PUBLIC KEY"));
        assert_ne!(pki.serving_cert, pki.admin_cert);
    }
}
