//! The admin kubeconfig an instance writes for its clients.

use crate::pki;
use base64::Engine;

pub(crate) fn kubeconfig_yaml(server: &str, pki: &pki::Pki) -> String {
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
        ca = b64(&pki.ca_cert),
        cert = b64(&pki.admin_cert),
        key = b64(&pki.admin_key),
    )
}
