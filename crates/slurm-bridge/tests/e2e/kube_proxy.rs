//! A fault proxy in front of the test's kube-apiserver (`fault-proxy`), serving its TLS
//! identity, and a kubeconfig or a client that talks through it: what the bridge under test then
//! sends passes the proxy's faults.

use super::{Env, temp_dir};
use fault_proxy::{FaultProxy, Faults, ProxyOptions, ServerTls};
use std::path::PathBuf;

/// Starts a proxy in front of `env`'s kube-apiserver, its options (faults, seed) changed by
/// `configure`; returns it with a kubeconfig pointed at it (for a bridge process).
pub async fn start(env: &Env, configure: impl FnOnce(&mut ProxyOptions)) -> (FaultProxy, PathBuf) {
    let kubeconfig = env.kube_env.kubeconfig();
    let pki = env.kube_env.dir().join("pki");
    let mut options = ProxyOptions {
        serve_tls: Some(ServerTls {
            cert_pem: std::fs::read_to_string(pki.join("serving.crt")).unwrap(),
            key_pem: std::fs::read_to_string(pki.join("serving.key")).unwrap(),
        }),
        ..ProxyOptions::new(fault_proxy::kubeconfig::upstream(&kubeconfig).unwrap())
    };
    configure(&mut options);
    let proxy = FaultProxy::start(options).await.unwrap();
    let proxied = temp_dir("kube-proxy").join("kubeconfig");
    fault_proxy::kubeconfig::write_pointed_at(&kubeconfig, proxy.url(), &proxied).unwrap();
    (proxy, proxied)
}

/// Starts a proxy injecting `faults` in front of `env`'s kube-apiserver; returns it with a
/// client through it.
pub async fn through_proxy(env: &Env, faults: Faults) -> (FaultProxy, kube::Client) {
    let (proxy, proxied) = start(env, |o| o.faults = faults).await;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&proxied).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    (proxy, kube::Client::try_from(config).unwrap())
}
