//! HTTPS serving: a certificate signed by a test CA, the kube-rs client and the kubeconfig
//! trusting it.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube_sim::{KubeSim, Options, TlsFiles};

#[tokio::test]
async fn serves_https_with_the_given_certificate() {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("tls.crt");
    let key_path = dir.path().join("tls.key");
    std::fs::write(&cert_path, format!("{}{}", cert.pem(), ca_cert.pem())).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();

    let sim = KubeSim::start(Options {
        tls: Some(TlsFiles {
            cert: cert_path,
            key: key_path,
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    let nss: Api<Namespace> = Api::all(sim.client());
    let l = nss.list(&ListParams::default()).await.unwrap();
    assert!(
        l.items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
    );

    // The kubeconfig carries the certificate authority, so a client built from it works as is.
    let kc_path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc_path).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&kc_path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let nss: Api<Namespace> = Api::all(client);
    nss.get("kube-system").await.unwrap();
    sim.stop().await;
}
