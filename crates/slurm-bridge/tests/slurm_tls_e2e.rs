//! slurmrestd over TLS with a site's private CA: a TLS endpoint (the fault proxy terminating
//! TLS with a certificate of a CA made here) in front of real slurmrestd; `slurm-bridge run`
//! with `slurmRestApi: https://...` and `SLURM_CA_FILE` schedules a pod through it, and a client
//! without the CA is refused by the certificate check.

mod e2e;

use e2e::*;
use fault_proxy::{FaultProxy, ProxyOptions, ServerTls, Upstream};
use serde_json::json;
use slurm_bridge::admission::certs::SelfManaged;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

/// A CA of our own and a certificate for `localhost` from it: (ca, cert, key) PEM.
fn private_ca(dir: &std::path::Path) -> (String, String, String) {
    let certs = SelfManaged::new(dir.to_path_buf(), vec!["localhost".into()], vec![]);
    certs.ensure_files(SystemTime::now()).expect("certificates");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    (
        certs.ca_bundle().expect("CA"),
        read("tls.crt"),
        read("tls.key"),
    )
}

fn bridge(env: &Env, dir: &std::path::Path, url: &str, ca: Option<&std::path::Path>) -> Command {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!("schedulerName: {SCHEDULER}\nslurmRestApi: {url}\npartition: slurm-bridge\n"),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"));
    cmd.arg("--config")
        .arg(&config)
        .env("KUBECONFIG", env.kube_env.kubeconfig())
        .env("SLURM_JWT_FILE", env.slurm.token_file())
        .env_remove("SLURM_JWT")
        .env_remove("SLURM_CA_FILE");
    if let Some(ca) = ca {
        cmd.env("SLURM_CA_FILE", ca);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_reaches_slurmrestd_over_tls_with_a_private_ca() {
    let env = Env::start(2).await;
    let dir = temp_dir("slurm-tls");
    let (ca, cert, key) = private_ca(&dir.join("certs"));
    let ca_file = dir.join("slurm-ca.crt");
    std::fs::write(&ca_file, &ca).unwrap();
    let proxy = FaultProxy::start(ProxyOptions {
        serve_tls: Some(ServerTls {
            cert_pem: cert,
            key_pem: key,
        }),
        ..ProxyOptions::new(Upstream::plain(env.slurm.rest_url()).unwrap())
    })
    .await
    .expect("TLS endpoint");
    let url = format!("https://localhost:{}", proxy.addr().port());

    // Without the CA, the certificate is refused (status reads Slurm through the same client).
    let out = bridge(&env, &dir, &url, None)
        .args(["status"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "trusted an unknown CA: {stderr}");
    assert!(
        stderr.to_lowercase().contains("certificate"),
        "the error says why: {stderr}"
    );
    // With it, status works, and `run` schedules a pod through the TLS endpoint.
    let out = bridge(&env, &dir, &url, Some(&ca_file))
        .args(["status"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::File::create(dir.join("run.log")).unwrap();
    let mut run = bridge(&env, &dir, &url, Some(&ca_file))
        .args([
            "run",
            "--leader-elect=false",
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--slurm-poll-interval",
            "200ms",
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    env.create_pod(pod("over-tls", json!({}), json!({}))).await;
    let bound = env
        .wait_bound(&["over-tls".into()], Duration::from_secs(60))
        .await;
    assert!(env.active_job_ids().contains(&job_id_of(&bound[0])));
    assert!(
        proxy.stats().forwarded > 0,
        "the bridge's requests went through the TLS endpoint"
    );
    env.pods()
        .delete("over-tls", &Default::default())
        .await
        .unwrap();
    env.wait_job_ended(job_id_of(&bound[0]), Duration::from_secs(60))
        .await;
    env.wait_pod_gone(NS, "over-tls", Duration::from_secs(60))
        .await;
    env.assert_invariants().await;
    terminate(&mut run).await;
}
