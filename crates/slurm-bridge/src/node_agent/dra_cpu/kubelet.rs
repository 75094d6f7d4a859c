//! The kubelet plugin of the `dra.cpu` driver: a registration socket in the kubelet's
//! `plugins_registry` folder (the kubelet's plugin watcher finds it and asks `GetInfo`) and the
//! DRA service socket under `plugins/dra.cpu/`, where the kubelet calls NodePrepareResources
//! before a pod's containers are created and NodeUnprepareResources after they are gone.
//!
//! Prepare reads each claim from the API server, checks it ([`super::claim::prepare`]), writes
//! its CDI spec ([`super::cdi`]) and remembers it in [`Prepared`] for the NRI pin; unprepare
//! undoes both. Both are idempotent: the kubelet retries.

use super::cdi;
use super::claim::{self, PreparedClaim};
use super::slice::{self, NodeRef};
use super::{DRIVER, Prepared};
use crate::node_agent::Topology;
use crate::node_agent::grpc::{self, Socket, Status};
use crate::node_agent::health::Health;
use crate::node_agent::kubelet_api::*;
use bytes::Bytes;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::Api;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How often the slices are checked against the topology besides the kubelet's
/// registrations (the kubelet wipes them at its start and when the plugin was gone 30 s).
pub const SLICE_CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// Where the plugin listens and what it serves.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// This node's Kubernetes name (the slices' `nodeName` and pool, the claims' node).
    pub node: String,
    /// The kubelet's plugin registration folder (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: PathBuf,
    /// The kubelet's plugins folder (`/var/lib/kubelet/plugins`); the DRA socket is
    /// `<dir>/dra.cpu/dra.sock`.
    pub plugins_dir: PathBuf,
    /// The DRA socket's path as the kubelet sees it, when it differs from the agent's view (a
    /// kubelet in another mount namespace); default the agent's path.
    pub kubelet_endpoint: Option<PathBuf>,
    /// containerd's CDI spec folder.
    pub cdi_dir: PathBuf,
}

impl DriverConfig {
    /// The DRA service socket.
    pub fn dra_socket(&self) -> PathBuf {
        self.plugins_dir.join(DRIVER).join("dra.sock")
    }

    /// The registration socket.
    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir.join(format!("{DRIVER}-reg.sock"))
    }
}

/// Why the plugin could not start.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Socket(#[from] grpc::ServeError),
}

/// The plugin's state: what it needs to prepare claims.
struct Driver {
    client: kube::Client,
    node: String,
    topology: Topology,
    cdi_dir: PathBuf,
    prepared: Prepared,
}

/// A claim uid as the API server makes them (it names the claim's CDI spec file).
fn check_uid(uid: &str) -> Result<(), String> {
    if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(format!("claim uid {uid:?} is not a Kubernetes uid"));
    }
    Ok(())
}

impl Driver {
    async fn prepare(&self, c: &Claim) -> Result<PreparedClaim, String> {
        check_uid(&c.uid)?;
        let key = format!("{}/{}", c.namespace, c.name);
        let rc = Api::<ResourceClaim>::namespaced(self.client.clone(), &c.namespace)
            .get(&c.name)
            .await
            .map_err(|e| format!("reading ResourceClaim {key}: {e}"))?;
        let p =
            claim::prepare(&rc, &c.uid, &self.node, &self.topology).map_err(|e| e.to_string())?;
        cdi::write(&self.cdi_dir, &p).map_err(|e| e.to_string())?;
        self.prepared.insert(p.clone());
        Ok(p)
    }

    async fn prepare_all(&self, req: NodePrepareResourcesRequest) -> NodePrepareResourcesResponse {
        let mut out = NodePrepareResourcesResponse::default();
        for c in &req.claims {
            let answer = match self.prepare(c).await {
                Ok(p) => {
                    tracing::info!(claim = %format!("{}/{}", c.namespace, c.name), uid = %c.uid, cpus = ?p.cpus, pods = ?p.pod_uids, "prepared a dra.cpu claim");
                    NodePrepareResourceResponse {
                        devices: devices(&p),
                        error: String::new(),
                    }
                }
                Err(error) => {
                    tracing::warn!(claim = %format!("{}/{}", c.namespace, c.name), uid = %c.uid, %error, "dra.cpu claim not prepared");
                    NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error,
                    }
                }
            };
            out.claims.insert(c.uid.clone(), answer);
        }
        out
    }

    fn unprepare_all(&self, req: NodeUnprepareResourcesRequest) -> NodeUnprepareResourcesResponse {
        let mut out = NodeUnprepareResourcesResponse::default();
        for c in &req.claims {
            let removed = check_uid(&c.uid)
                .and_then(|()| cdi::remove(&self.cdi_dir, &c.uid).map_err(|e| e.to_string()));
            let error = match removed {
                Ok(()) => {
                    let was = self.prepared.remove(&c.uid);
                    tracing::info!(claim = %format!("{}/{}", c.namespace, c.name), uid = %c.uid, cpus = ?was.map(|p| p.cpus), "unprepared a dra.cpu claim");
                    String::new()
                }
                Err(e) => e,
            };
            out.claims
                .insert(c.uid.clone(), NodeUnprepareResourceResponse { error });
        }
        out
    }
}

/// The devices of a prepared claim as the kubelet wants them; the claim's one CDI device goes
/// with its first device only, so a container gets it once.
pub fn devices(p: &PreparedClaim) -> Vec<Device> {
    p.devices
        .iter()
        .enumerate()
        .map(|(i, d)| Device {
            request_names: vec![d.request.clone()],
            pool_name: d.pool.clone(),
            device_name: d.device.clone(),
            cdi_device_ids: if i == 0 {
                vec![cdi::device_id(&p.uid)]
            } else {
                Vec::new()
            },
            share_id: None,
        })
        .collect()
}

struct DraService(Arc<Driver>);

impl grpc::Service for DraService {
    async fn call(&self, method: &str, request: Bytes) -> Result<Bytes, Status> {
        let name = method
            .strip_prefix(DRA_V1)
            .or_else(|| method.strip_prefix(DRA_V1BETA1))
            .ok_or_else(|| Status::unimplemented(method))?;
        match name {
            "NodePrepareResources" => {
                let req = grpc::decode(request)?;
                Ok(grpc::encode(&self.0.prepare_all(req).await))
            }
            "NodeUnprepareResources" => {
                let req = grpc::decode(request)?;
                Ok(grpc::encode(&self.0.unprepare_all(req)))
            }
            _ => Err(Status::unimplemented(method)),
        }
    }

    fn is_silent_stream(&self, method: &str) -> bool {
        method == DRA_HEALTH_WATCH
    }
}

/// The registration service: tells the kubelet who the plugin is, and hears its verdict.
pub struct RegistrationService {
    /// The DRA socket as the kubelet dials it.
    pub endpoint: String,
    /// Notified on each successful registration (the kubelet restarted, or found us).
    pub registered: Arc<Notify>,
    /// Told of the registration (readiness).
    pub health: Health,
}

impl grpc::Service for RegistrationService {
    async fn call(&self, method: &str, request: Bytes) -> Result<Bytes, Status> {
        match method {
            REGISTRATION_GET_INFO => Ok(grpc::encode(&PluginInfo {
                r#type: DRA_PLUGIN_TYPE.into(),
                name: DRIVER.into(),
                endpoint: self.endpoint.clone(),
                supported_versions: DRA_SERVICES.iter().map(|s| s.to_string()).collect(),
            })),
            REGISTRATION_NOTIFY => {
                let status: RegistrationStatus = grpc::decode(request)?;
                if status.plugin_registered {
                    tracing::info!(endpoint = %self.endpoint, "the kubelet registered the dra.cpu plugin");
                    self.registered.notify_one();
                    self.health.set_kubelet_registered();
                } else {
                    tracing::error!(endpoint = %self.endpoint, error = %status.error, "the kubelet refused the dra.cpu plugin");
                }
                Ok(grpc::encode(&RegistrationStatusResponse {}))
            }
            _ => Err(Status::unimplemented(method)),
        }
    }
}

/// Runs the plugin for good: the DRA socket, then the registration socket (the kubelet dials
/// the former as soon as it reads the latter), and the slices kept up to date. The sockets are
/// removed when the returned future is dropped; the slices are left (see [`slice`]). `health`
/// hears of the kubelet's registration and of each check of the slices.
pub async fn run(
    client: kube::Client,
    config: DriverConfig,
    topology: Topology,
    prepared: Prepared,
    health: Health,
) -> Result<(), DriverError> {
    let dra_socket = Socket::bind(&config.dra_socket())?;
    let endpoint = config
        .kubelet_endpoint
        .clone()
        .unwrap_or_else(|| dra_socket.path().to_path_buf());
    let driver = Arc::new(Driver {
        client: client.clone(),
        node: config.node.clone(),
        topology: topology.clone(),
        cdi_dir: config.cdi_dir.clone(),
        prepared,
    });
    let registered = Arc::new(Notify::new());
    let registration = RegistrationService {
        endpoint: endpoint.display().to_string(),
        registered: registered.clone(),
        health: health.clone(),
    };
    let reg_socket = Socket::bind(&config.registration_socket())?;
    tracing::info!(registration = %reg_socket.path().display(), dra = %dra_socket.path().display(), endpoint = %endpoint.display(), cdi = %config.cdi_dir.display(), "dra.cpu kubelet plugin listening");
    tokio::select! {
        () = dra_socket.serve(Arc::new(DraService(driver))) => Ok(()),
        () = reg_socket.serve(Arc::new(registration)) => Ok(()),
        () = keep_slices(client, &config.node, &topology, &registered, &health) => Ok(()),
    }
}

/// Publishes the slices and keeps them: at start, after each registration by the kubelet, and
/// every [`SLICE_CHECK_INTERVAL`]; failures are retried (1 s, doubling up to 30 s).
async fn keep_slices(
    client: kube::Client,
    node: &str,
    topology: &Topology,
    registered: &Notify,
    health: &Health,
) {
    let mut owner: Option<NodeRef> = None;
    let mut retry = Duration::from_secs(1);
    let mut first = true;
    loop {
        let outcome = match &owner {
            Some(o) => slice::sync(&client, o, topology).await.map(|wrote| {
                if !wrote && std::mem::take(&mut first) {
                    tracing::info!(node = %o.name, "the dra.cpu ResourceSlices are up to date");
                }
                first = false;
            }),
            None => match slice::node_ref(&client, node).await {
                Ok(o) => {
                    owner = Some(o);
                    continue;
                }
                Err(e) => Err(e),
            },
        };
        health.set_slices(outcome.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        let wait = match outcome {
            Ok(()) => {
                retry = Duration::from_secs(1);
                SLICE_CHECK_INTERVAL
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?retry, "dra.cpu ResourceSlices not published");
                let w = retry;
                retry = (retry * 2).min(Duration::from_secs(30));
                w
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = registered.notified() => {}
        }
    }
}

/// Reads back the claims prepared before a restart from `cdi_dir`.
pub fn load_prepared(cdi_dir: &Path) -> Result<Prepared, cdi::CdiError> {
    let claims = cdi::load(cdi_dir)?;
    if !claims.is_empty() {
        tracing::info!(claims = claims.len(), cdi = %cdi_dir.display(), "dra.cpu claims prepared before a restart");
    }
    Ok(Prepared::with(claims))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_agent::dra_cpu::PreparedDevice;
    use grpc::Service;
    use prost::Message;

    #[tokio::test]
    async fn get_info_names_the_driver_its_endpoint_and_both_dra_versions() {
        let r = RegistrationService {
            endpoint: "/var/lib/kubelet/plugins/dra.cpu/dra.sock".into(),
            registered: Arc::new(Notify::new()),
            health: Health::new(true),
        };
        let info = PluginInfo::decode(
            r.call(REGISTRATION_GET_INFO, InfoRequest {}.encode_to_vec().into())
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(info.r#type, "DRAPlugin");
        assert_eq!(info.name, "dra.cpu");
        assert_eq!(info.endpoint, "/var/lib/kubelet/plugins/dra.cpu/dra.sock");
        assert_eq!(
            info.supported_versions,
            ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        );
        let ok = RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        };
        r.call(REGISTRATION_NOTIFY, ok.encode_to_vec().into())
            .await
            .unwrap();
        // The notification was stored for the slice keeper, and readiness heard of it.
        tokio::time::timeout(Duration::from_secs(1), r.registered.notified())
            .await
            .unwrap();
        r.health
            .set_nri(crate::node_agent::health::Nri::Synchronized);
        let why = r.health.not_ready().borrow().clone().unwrap();
        assert!(why.contains("ResourceSlices"), "past the kubelet: {why}");
        let e = r.call("/x.Y/Z", Bytes::new()).await.unwrap_err();
        assert_eq!(e.code, grpc::Code::Unimplemented);
    }

    #[test]
    fn a_uid_that_could_name_another_file_is_refused() {
        assert!(check_uid("0f8c2a1e-7d3b-4c1a-9e2f-1a2b3c4d5e6f").is_ok());
        for bad in ["", "../x", "a/b", "a b"] {
            assert!(check_uid(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_claims_cdi_device_goes_with_its_first_device_only() {
        let d = |n: &str| PreparedDevice {
            request: "cpu".into(),
            pool: "node-1".into(),
            device: n.into(),
        };
        let p = PreparedClaim {
            namespace: "ns".into(),
            name: "c".into(),
            uid: "u".into(),
            pod_uids: Default::default(),
            cpus: [0, 1].into(),
            devices: vec![d("cpu0"), d("cpu1")],
        };
        let ds = devices(&p);
        assert_eq!(ds[0].cdi_device_ids, ["dra.cpu/claim=u"]);
        assert!(ds[1].cdi_device_ids.is_empty());
        assert_eq!(ds[1].device_name, "cpu1");
        assert_eq!(ds[1].request_names, ["cpu"]);
    }
}
