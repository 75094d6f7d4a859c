//! The plugin against a scripted runtime on a real unix socket: registration, Configure, a
//! split Synchronize, CreateContainer (adjusted and refused), an unknown method, an unsolicited
//! UpdateContainers, and the runtime closing the connection.

use crate::api::*;
use crate::frame::{
    self, Demux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, TYPE_REQUEST, TYPE_RESPONSE,
    TtrpcMessage,
};
use crate::{Error, Handler, Runtime, run_with};
use prost::Message;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

struct Pinner;

impl Handler for Pinner {
    async fn synchronize(
        &self,
        _: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Vec<ContainerUpdate> {
        containers
            .iter()
            .map(|c| ContainerUpdate::cpuset(&c.id, "0"))
            .collect()
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        c: Container,
    ) -> Result<ContainerAdjustment, String> {
        match c.name.as_str() {
            "refuse" => Err(format!("no CPUs left for {}/{}", pod.namespace, pod.name)),
            _ => Ok(ContainerAdjustment::cpuset("1")),
        }
    }
}

/// The runtime's end: a ttrpc client on connection 1, a server on connection 2.
struct FakeRuntime {
    sock: UnixStream,
    demux: Demux,
    queue: VecDeque<(u32, TtrpcMessage)>,
    next_stream: u32,
}

impl FakeRuntime {
    async fn recv(&mut self) -> (u32, TtrpcMessage) {
        loop {
            if let Some(m) = self.queue.pop_front() {
                return m;
            }
            let mut buf = [0u8; 1024];
            let n = self.sock.read(&mut buf).await.unwrap();
            assert!(n > 0, "plugin closed the connection");
            self.queue.extend(self.demux.push(&buf[..n]).unwrap());
        }
    }

    /// Writes a message as two frames, in two writes with a pause: the plugin must reassemble.
    async fn send(&mut self, conn: u32, msg: TtrpcMessage) {
        let bytes = msg.encode().unwrap();
        let cut = bytes.len() / 2;
        for part in [&bytes[..cut], &bytes[cut..]] {
            let mut wire = Vec::new();
            frame::mux_encode(conn, part, &mut wire);
            self.sock.write_all(&wire).await.unwrap();
            tokio::task::yield_now().await;
        }
    }

    async fn call(&mut self, method: &str, payload: Vec<u8>) -> frame::Response {
        let stream = self.next_stream;
        self.next_stream += 2;
        let req = frame::Request {
            service: "nri.pkg.api.v1alpha1.Plugin".into(),
            method: method.into(),
            payload,
            timeout_nano: 2_000_000_000,
            metadata: vec![],
        };
        let msg = TtrpcMessage {
            stream,
            kind: TYPE_REQUEST,
            flags: 0,
            data: req.encode_to_vec(),
        };
        self.send(PLUGIN_SERVICE_CONN, msg).await;
        let (conn, m) = self.recv().await;
        assert_eq!(
            (conn, m.kind, m.stream),
            (PLUGIN_SERVICE_CONN, TYPE_RESPONSE, stream)
        );
        frame::Response::decode(m.data.as_slice()).unwrap()
    }

    async fn ok<M: Message + Default>(&mut self, method: &str, payload: Vec<u8>) -> M {
        let r = self.call(method, payload).await;
        assert_eq!(
            r.status.as_ref().map_or(0, |s| s.code),
            0,
            "{method}: {:?}",
            r.status
        );
        M::decode(r.payload.as_slice()).unwrap()
    }

    /// The plugin's next call of the runtime service: (stream, method, payload).
    async fn served(&mut self) -> (u32, String, Vec<u8>) {
        let (conn, m) = self.recv().await;
        assert_eq!(
            (conn, m.kind, m.flags),
            (RUNTIME_SERVICE_CONN, TYPE_REQUEST, 0)
        );
        assert_eq!(m.stream % 2, 1, "client streams are odd");
        let req = frame::Request::decode(m.data.as_slice()).unwrap();
        assert_eq!(req.service, "nri.pkg.api.v1alpha1.Runtime");
        (m.stream, req.method, req.payload)
    }

    async fn answer(&mut self, stream: u32, payload: Vec<u8>) {
        let resp = frame::Response {
            status: Some(frame::Status::default()),
            payload,
        };
        let msg = TtrpcMessage {
            stream,
            kind: TYPE_RESPONSE,
            flags: 0,
            data: resp.encode_to_vec(),
        };
        self.send(RUNTIME_SERVICE_CONN, msg).await;
    }
}

fn container(id: &str, name: &str) -> Container {
    Container {
        id: id.into(),
        pod_sandbox_id: "pod-1".into(),
        name: name.into(),
        state: ContainerState::ContainerRunning as i32,
        pid: 42,
        ..Default::default()
    }
}

fn pod() -> PodSandbox {
    PodSandbox {
        id: "pod-1".into(),
        name: "p".into(),
        namespace: "ns".into(),
        uid: "u".into(),
        ..Default::default()
    }
}

fn cpus_of(u: &ContainerUpdate) -> &str {
    &u.linux
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap()
        .cpu
        .as_ref()
        .unwrap()
        .cpus
}

#[tokio::test]
async fn a_whole_session_against_a_scripted_runtime() {
    let dir = std::env::temp_dir().join(format!("nri-plugin-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nri.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let runtime = Runtime::new();
    let mut registered = runtime.registered();
    let mut synchronized = runtime.synchronized();
    let plugin = tokio::spawn({
        let (path, runtime) = (path.clone(), runtime.clone());
        async move { run_with(&path, "test-pinner", "10", Arc::new(Pinner), &runtime).await }
    });
    let (sock, _) = listener.accept().await.unwrap();
    let mut rt = FakeRuntime {
        sock,
        demux: Demux::default(),
        queue: VecDeque::new(),
        next_stream: 1,
    };

    // Registration.
    let (stream, method, payload) = rt.served().await;
    assert_eq!(method, "RegisterPlugin");
    let reg = RegisterPluginRequest::decode(payload.as_slice()).unwrap();
    assert_eq!(
        (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
        ("test-pinner", "10")
    );
    assert_eq!(reg.nri_version, crate::NRI_VERSION);
    // Connected, not registered until the runtime answers.
    assert!(!runtime.is_registered());
    rt.answer(stream, Empty {}.encode_to_vec()).await;
    tokio::time::timeout(Duration::from_secs(5), registered.wait_for(|r| *r))
        .await
        .expect("registered after the runtime's answer")
        .unwrap();

    // Configure: the subscription.
    let cfg = ConfigureRequest {
        runtime_name: "containerd".into(),
        request_timeout: 2000,
        ..Default::default()
    };
    let r: ConfigureResponse = rt.ok("Configure", cfg.encode_to_vec()).await;
    assert_eq!(
        r.events, 0x688,
        "CreateContainer, UpdateContainer, StopContainer, RemoveContainer"
    );

    // A split Synchronize: the first part is acknowledged, the updates come with the last.
    let part1 = SynchronizeRequest {
        pods: vec![pod()],
        containers: vec![container("c1", "a")],
        more: true,
    };
    let r: SynchronizeResponse = rt.ok("Synchronize", part1.encode_to_vec()).await;
    assert!(r.more && r.update.is_empty());
    assert!(
        runtime.is_registered() && !runtime.is_synchronized(),
        "registered, not synchronized before the last part's answer"
    );
    let part2 = SynchronizeRequest {
        pods: vec![],
        containers: vec![container("c2", "b")],
        more: false,
    };
    let r: SynchronizeResponse = rt.ok("Synchronize", part2.encode_to_vec()).await;
    assert!(!r.more);
    let ids: Vec<_> = r
        .update
        .iter()
        .map(|u| (u.container_id.as_str(), cpus_of(u)))
        .collect();
    assert_eq!(ids, [("c1", "0"), ("c2", "0")]);
    tokio::time::timeout(Duration::from_secs(5), synchronized.wait_for(|s| *s))
        .await
        .expect("synchronized once the last part was answered")
        .unwrap();

    // CreateContainer: adjusted, then refused with the handler's message.
    let req = CreateContainerRequest {
        pod: Some(pod()),
        container: Some(container("c3", "main")),
    };
    let r: CreateContainerResponse = rt.ok("CreateContainer", req.encode_to_vec()).await;
    let adj = r.adjust.unwrap();
    let res = adj.linux.unwrap().resources.unwrap();
    assert_eq!(res.cpu.unwrap().cpus, "1");
    assert!(res.memory.is_none(), "only the cpuset is adjusted");
    let req = CreateContainerRequest {
        pod: Some(pod()),
        container: Some(container("c4", "refuse")),
    };
    let s = rt
        .call("CreateContainer", req.encode_to_vec())
        .await
        .status
        .unwrap();
    assert_eq!(
        (s.code, s.message.as_str()),
        (frame::CODE_UNKNOWN, "no CPUs left for ns/p")
    );

    // Defaults and the unknown.
    let req = CreateContainerRequest {
        pod: Some(pod()),
        container: Some(container("c1", "a")),
    };
    let r: UpdatesResponse = rt.ok("StopContainer", req.encode_to_vec()).await;
    assert!(r.update.is_empty());
    let _: Empty = rt.ok("RemoveContainer", req.encode_to_vec()).await;
    let s = rt.call("RunPodSandbox", vec![]).await.status.unwrap();
    assert_eq!(s.code, frame::CODE_UNIMPLEMENTED);

    // An unsolicited update from the node agent.
    assert!(runtime.is_connected());
    let update = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .update_containers(vec![ContainerUpdate::cpuset("c2", "1")])
                .await
        }
    });
    let (stream, method, payload) = rt.served().await;
    assert_eq!(method, "UpdateContainers");
    let req = UpdateContainersRequest::decode(payload.as_slice()).unwrap();
    assert_eq!(req.update.len(), 1);
    assert_eq!(
        (req.update[0].container_id.as_str(), cpus_of(&req.update[0])),
        ("c2", "1")
    );
    let failed = UpdateContainersResponse {
        failed: req.update.clone(),
    };
    rt.answer(stream, failed.encode_to_vec()).await;
    let failed = update.await.unwrap().unwrap();
    assert_eq!(failed.len(), 1, "the runtime's failures come back");

    // The runtime goes away: run returns Ok, the handle is disconnected.
    drop(rt);
    let ended = tokio::time::timeout(Duration::from_secs(10), plugin)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_ok(), "{ended:?}");
    assert!(!runtime.is_connected());
    assert!(
        !runtime.is_registered(),
        "not registered once the connection ended"
    );
    assert!(
        !runtime.is_synchronized(),
        "not synchronized once the connection ended"
    );
    let err = runtime.update_containers(vec![]).await.unwrap_err();
    assert!(matches!(err, Error::NotConnected), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn closed_before_registration_and_bad_identity() {
    let dir = std::env::temp_dir().join(format!("nri-plugin-test2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nri.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let plugin = tokio::spawn({
        let path = path.clone();
        async move { crate::run(&path, "x", "10", Arc::new(Pinner)).await }
    });
    drop(listener.accept().await.unwrap());
    let err = plugin.await.unwrap().unwrap_err();
    // Seen as the end of the stream or as a broken pipe when writing RegisterPlugin.
    assert!(
        matches!(err, Error::ClosedBeforeRegistration | Error::Io(_)),
        "{err}"
    );
    let err = crate::run(&path, "bad name", "10", Arc::new(Pinner))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Identity(_)), "{err}");
    let err = crate::run(&dir.join("missing.sock"), "x", "10", Arc::new(Pinner))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
