//! Real nodes beside simulated ones: `kubelet_nodes: 1` of 2 nodes. node-1 is a real kubelet
//! with containerd and runc (pods' containers run, log, exit with their codes and get SIGTERM
//! on deletion); node-2 stays the agent's. Dropping the instance leaves no process, cgroup or
//! bridge behind. Needs root, the cached (or buildable) binaries, and apt for runc, the CNI
//! plugins and busybox-static.

mod common;

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use kube_testenv::{Instance, InstanceOptions};
use serde_json::json;
use std::future::Future;
use std::time::{Duration, Instant};

/// Waits until `check` returns `Some`, for at most `limit`.
async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {} s waiting for {what}",
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn pod(name: &str, node: &str, image: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "main",
                "image": image,
                "command": ["sh", "-c", script],
            }],
        },
    }))
    .expect("pod")
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn exit_code(p: &Pod) -> Option<i32> {
    kube_testenv::pod_state::first_termination(p).map(|t| t.exit_code)
}

fn internal_ip(n: &Node) -> String {
    n.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_default()
}

async fn ended(pods: &Api<Pod>, name: &str) -> Pod {
    eventually(&format!("pod {name} to end"), common::TIMEOUT, || async {
        let p = pods.get(name).await.ok()?;
        matches!(phase(&p).as_str(), "Succeeded" | "Failed").then_some(p)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_node_runs_containers_beside_a_simulated_node() {
    let inst = Instance::start(InstanceOptions {
        kubelet_nodes: 1,
        ..InstanceOptions::with_nodes(2)
    })
    .await
    .unwrap_or_else(|e| panic!("start an instance with a kubelet node: {e}"));
    eprintln!("instance ready in {:.1} s", inst.startup().as_secs_f64());
    let image = inst
        .image()
        .expect("an instance with kubelet nodes has an image");
    assert_eq!(image, kube_testenv::IMAGE);
    assert_eq!(inst.kubelet_nodes(), ["node-1"]);
    assert!(
        inst.env_lines()
            .contains(&format!("KUBE_TESTENV_IMAGE={image}\n")),
        "{}",
        inst.env_lines()
    );
    let client = inst.client();

    // node-1 is the kubelet's (its node IP on the instance's bridge, containerd 2.4.2); node-2
    // the agent's.
    let nodes: Api<Node> = Api::all(client.clone());
    let real = nodes.get("node-1").await.expect("node-1");
    let ip = internal_ip(&real);
    assert!(ip.starts_with("10.199."), "node-1's InternalIP {ip}");
    let runtime = real
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| {
            (
                i.container_runtime_version.clone(),
                i.kubelet_version.clone(),
            )
        })
        .unwrap_or_default();
    assert_eq!(
        runtime,
        ("containerd://2.4.2".to_string(), "v1.36.3".to_string())
    );
    let simulated = nodes.get("node-2").await.expect("node-2");
    assert!(internal_ip(&simulated).starts_with("172.18."));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let trap = "trap 'echo got TERM; exit 0' TERM; echo started; sleep 3600 & wait";
    for p in [
        pod("answer", "node-1", image, "echo answer=42"),
        pod("exit-three", "node-1", image, "exit 3"),
        pod("trap", "node-1", image, trap),
        pod("simulated", "node-2", image, "sleep 1"),
    ] {
        pods.create(&pp, &p).await.expect("create pod");
    }

    let answer = ended(&pods, "answer").await;
    assert_eq!(phase(&answer), "Succeeded");
    assert_eq!(exit_code(&answer), Some(0));
    let logs = pods
        .logs("answer", &LogParams::default())
        .await
        .expect("logs of answer through the API server");
    assert_eq!(logs.trim(), "answer=42");
    let out = inst
        .kubectl(&["logs", "answer"])
        .expect("kubectl logs answer");
    assert_eq!(out.trim(), "answer=42");

    let failed = ended(&pods, "exit-three").await;
    assert_eq!(phase(&failed), "Failed");
    assert_eq!(exit_code(&failed), Some(3));

    let simulated = ended(&pods, "simulated").await;
    assert_eq!(phase(&simulated), "Succeeded");

    // containerd's NRI socket and CDI folder where a site has them: a DaemonSet-style pod's
    // hostPath volumes of /var/run/nri and /var/run/cdi find the socket and the specs a driver
    // on the host wrote into `kubelet_dirs(node).cdi`; a plugin on the host connects through
    // KUBE_TESTENV_NRI_DIR/<node>.sock.
    let nri = inst.nri_socket("node-1").expect("node-1's NRI socket");
    assert!(
        inst.env_lines().contains(&format!(
            "KUBE_TESTENV_NRI_DIR={}\n",
            nri.parent().unwrap().display()
        )),
        "{}",
        inst.env_lines()
    );
    std::os::unix::net::UnixStream::connect(&nri)
        .unwrap_or_else(|e| panic!("connect {}: {e}", nri.display()));
    let cdi = inst.kubelet_dirs("node-1").expect("kubelet node-1").cdi;
    std::fs::write(cdi.join("from-the-host.json"), "{}").unwrap();
    let mut host_paths = pod(
        "host-paths",
        "node-1",
        image,
        "test -S /nri/nri.sock && echo nri=socket; ls /cdi",
    );
    let spec = host_paths.spec.as_mut().unwrap();
    spec.volumes = Some(
        serde_json::from_value(json!([
            {"name": "nri", "hostPath": {"path": "/var/run/nri", "type": "Directory"}},
            {"name": "cdi", "hostPath": {"path": "/var/run/cdi", "type": "Directory"}},
        ]))
        .unwrap(),
    );
    spec.containers[0].volume_mounts = Some(
        serde_json::from_value(json!([
            {"name": "nri", "mountPath": "/nri"},
            {"name": "cdi", "mountPath": "/cdi"},
        ]))
        .unwrap(),
    );
    pods.create(&pp, &host_paths)
        .await
        .expect("create host-paths");
    let seen = ended(&pods, "host-paths").await;
    let logs = pods
        .logs("host-paths", &LogParams::default())
        .await
        .unwrap_or_default();
    assert_eq!(phase(&seen), "Succeeded", "{logs}");
    assert_eq!(
        logs.lines().collect::<Vec<_>>(),
        ["nri=socket", "from-the-host.json"]
    );

    // The trapping pod runs; deleting it sends SIGTERM, which it answers at once, well within
    // its 30 s grace period.
    eventually("pod trap to print started", common::TIMEOUT, || async {
        let logs = pods.logs("trap", &LogParams::default()).await.ok()?;
        logs.contains("started").then_some(())
    })
    .await;
    let stream = pods
        .log_stream(
            "trap",
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("follow the trap pod's log");
    let deleted_at = Instant::now();
    pods.delete("trap", &DeleteParams::default())
        .await
        .expect("delete pod trap");
    let lines: Vec<String> = tokio::time::timeout(
        Duration::from_secs(30),
        stream.lines().filter_map(|l| async { l.ok() }).collect(),
    )
    .await
    .expect("the trap pod's log ends within its grace period");
    assert_eq!(lines, ["started", "got TERM"]);
    eventually("pod trap to be gone", Duration::from_secs(30), || async {
        pods.get_opt("trap").await.ok()?.is_none().then_some(())
    })
    .await;
    let took = deleted_at.elapsed();
    assert!(
        took < Duration::from_secs(25),
        "pod trap took {took:?} to go"
    );

    // Dropped: no kubelet, containerd, shim or container, cgroup or bridge remains.
    let dir = inst.dir().to_path_buf();
    let name = inst.name().to_string();
    let slot: u8 = ip.split('.').nth(2).unwrap().parse().unwrap();
    drop(inst);
    let left = common::processes_naming(&dir);
    assert!(left.is_empty(), "processes left: {left:?}");
    assert!(!dir.exists(), "{} remains", dir.display());
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let cg = h.path().join("kube-testenv").join(&name);
        assert!(!cg.exists(), "{} remains", cg.display());
    }
    let links: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|l| *l == format!("kt{slot}") || l.starts_with(&format!("kt{slot}n")))
        .collect();
    assert!(links.is_empty(), "links left: {links:?}");
}

/// In-cluster pods: a pod on a kubelet node reaches the API server through the `kubernetes`
/// Service (the `KUBERNETES_SERVICE_HOST`/`_PORT` kubelet sets) with its ServiceAccount token,
/// and a loopback port of the host exposed to the pods; the API server's certificate is valid
/// for the Service's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_reach_the_api_server_as_their_service_account() {
    let mut inst = Instance::start(InstanceOptions {
        kubelet_nodes: 1,
        ..InstanceOptions::with_nodes(1)
    })
    .await
    .unwrap_or_else(|e| panic!("start an instance with a kubelet node: {e}"));
    let image = inst.image().expect("kubelet nodes").to_string();
    let client = inst.client();

    // The `kubernetes` Service's ClusterIP is the instance's own, and the serving certificate
    // names it: a client verifying the certificate reaches the API server there (from the host,
    // through the same forwarder as pods).
    let svc: k8s_openapi::api::core::v1::Service = Api::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .expect("the kubernetes Service");
    let cluster_ip = svc.spec.and_then(|s| s.cluster_ip).expect("a ClusterIP");
    assert!(cluster_ip.starts_with("10.96."), "{cluster_ip}");
    let kubeconfig = kube::config::Kubeconfig::read_from(inst.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.cluster_url = format!("https://{cluster_ip}:443").parse().unwrap();
    let through_service = kube::Client::try_from(config).unwrap();
    let version = through_service
        .apiserver_version()
        .await
        .expect("the API server through the kubernetes Service, its certificate verified");
    assert_eq!(version.git_version, "v1.36.3");

    // A loopback port of the host, exposed to the pods.
    let host = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = host.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut s, _)) = host.accept().await {
            let _ = s.write_all(b"hello-from-host\n").await;
        }
    });
    let exposed = inst.expose_host_port(port).await.expect("expose the port");
    let (exposed_ip, exposed_port) = exposed.rsplit_once(':').unwrap();

    // busybox's TLS client shares no cipher suite with Go's server, so the pod speaks plain
    // HTTP to the Service address (kube-apiserver answers that it serves HTTPS: the server is
    // reached from the pod's network namespace), prints its ServiceAccount token, which the
    // test presents to the API server, and reads the exposed port.
    let script = format!(
        "set -e; echo \"service=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT\"; \
         printf 'GET /version HTTP/1.0\\r\\n\\r\\n' | nc $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT; echo; \
         echo \"token=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token)\"; \
         nc {exposed_ip} {exposed_port} </dev/null"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("in-cluster", "node-1", &image, &script),
    )
    .await
    .expect("create pod");
    let done = ended(&pods, "in-cluster").await;
    let logs = pods
        .logs("in-cluster", &LogParams::default())
        .await
        .unwrap_or_default();
    assert_eq!(phase(&done), "Succeeded", "logs:\n{logs}");
    assert!(
        logs.contains(&format!("service={cluster_ip}:443")),
        "{logs}"
    );
    assert!(
        logs.contains("Client sent an HTTP request to an HTTPS server"),
        "{logs}"
    );
    assert!(logs.contains("hello-from-host"), "{logs}");

    // The pod's projected token authenticates it as its ServiceAccount.
    let token = logs
        .lines()
        .find_map(|l| l.strip_prefix("token="))
        .expect("the pod printed its token")
        .trim()
        .to_string();
    let kubeconfig = kube::config::Kubeconfig::read_from(inst.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.cluster_url = format!("https://{cluster_ip}:443").parse().unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let as_pod = kube::Client::try_from(config).unwrap();
    let review: serde_json::Value = as_pod
        .request(
            http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
                .header("Content-Type", "application/json")
                .body(
                    serde_json::to_vec(&json!({
                        "apiVersion": "authentication.k8s.io/v1",
                        "kind": "SelfSubjectReview",
                    }))
                    .unwrap(),
                )
                .unwrap(),
        )
        .await
        .expect("SelfSubjectReview with the pod's token");
    assert_eq!(
        review["status"]["userInfo"]["username"], "system:serviceaccount:default:default",
        "{review}"
    );
}
