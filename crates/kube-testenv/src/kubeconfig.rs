//! The admin kubeconfig an instance writes for its clients.

use crate::pki;
use base64::Engine;

pub(crate) fn kubeconfig_yaml(server: &str, pki: &pki::Pki) -> String {
    client_kubeconfig(server, &pki.ca_cert, &pki.admin_cert, &pki.admin_key)
}

/// A kubeconfig for the client certificate `cert` (PEM) with `key`.
pub(crate) fn client_kubeconfig(server: &str, ca: &str, cert: &str, key: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-testenv
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: kube-testenv
  context:
    cluster: kube-testenv
    user: admin
    namespace: default
current-context: kube-testenv
",
        ca = b64(ca),
        cert = b64(cert),
        key = b64(key),
    )
}
