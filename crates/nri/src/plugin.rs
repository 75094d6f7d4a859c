//! The plugin's connection: register with the runtime, answer the runtime's calls on the plugin
//! service, and call the runtime service (RegisterPlugin, UpdateContainers).

use crate::api::{
    ConfigureRequest, ConfigureResponse, Container, ContainerAdjustment, ContainerUpdate,
    CreateContainerRequest, CreateContainerResponse, Empty, Event, LinuxResources, PodSandbox,
    RegisterPluginRequest, StateChangeEvent, SynchronizeRequest, SynchronizeResponse,
    UpdateContainerRequest, UpdateContainersRequest, UpdateContainersResponse, UpdatesResponse,
};
use crate::frame::{
    self, CODE_INVALID_ARGUMENT, CODE_UNIMPLEMENTED, CODE_UNKNOWN, Demux, FrameError,
    PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, TYPE_REQUEST, TYPE_RESPONSE, TtrpcMessage,
};
use prost::Message;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

/// The service the plugin serves (the runtime calls it on connection 1).
const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// The service the runtime serves (the plugin calls it on connection 2).
const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// The NRI release whose api.proto these messages follow; sent at registration.
pub const NRI_VERSION: &str = "v0.12.3";
/// How long registration may take; the runtime's own default is 5 s.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an UpdateContainers call may take (the runtime updates each container with runc).
const UPDATE_TIMEOUT: Duration = Duration::from_secs(30);

/// The events this plugin subscribes to: creation (to pin), update (to keep the pin), stop and
/// removal (to free the CPUs).
const EVENTS: [Event; 4] = [
    Event::CreateContainer,
    Event::UpdateContainer,
    Event::StopContainer,
    Event::RemoveContainer,
];

/// What can end [`run`] or fail a call to the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin name or index does not satisfy the runtime's rules.
    #[error("invalid NRI plugin identity: {0}")]
    Identity(String),
    /// The runtime's NRI socket could not be reached.
    #[error("connect to the NRI socket {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Reading or writing the socket failed.
    #[error("NRI connection: {0}")]
    Io(#[from] std::io::Error),
    /// The runtime sent bytes that are not NRI's framing.
    #[error("NRI protocol: {0}")]
    Protocol(String),
    /// The runtime answered a call with an error status.
    #[error("the runtime refused {method}: {message} (code {code})")]
    Refused {
        /// The method called.
        method: &'static str,
        /// gRPC status code.
        code: i32,
        /// The runtime's message.
        message: String,
    },
    /// A call to the runtime got no answer in time.
    #[error("the runtime did not answer {0} in time")]
    Timeout(&'static str),
    /// No connection to the runtime (never connected, or it closed).
    #[error("not connected to the runtime's NRI socket")]
    NotConnected,
    /// The runtime closed the connection before the plugin was registered.
    #[error("the runtime closed the NRI connection before registration")]
    ClosedBeforeRegistration,
}

impl From<FrameError> for Error {
    fn from(e: FrameError) -> Self {
        Error::Protocol(e.to_string())
    }
}

/// The node agent's side of NRI: called by the runtime for each subscribed event. A handler
/// must answer within the runtime's request timeout (containerd's default: 2 s), or the runtime
/// drops the plugin's connection and goes on without it (a container being created then starts
/// unadjusted); [`run`] then returns and the caller reconnects.
pub trait Handler: Send + Sync + 'static {
    /// The pods and containers the runtime has when the plugin connects (after a restart of
    /// either side; stopped containers left out); returns updates to apply to them, such as
    /// re-pinning their cpusets. containerd creates no container meanwhile.
    fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> impl Future<Output = Vec<ContainerUpdate>> + Send;

    /// A container is being created; returns how to adjust it (e.g.
    /// [`ContainerAdjustment::cpuset`]). An `Err` fails the container's creation with that
    /// message (kubelet retries it).
    fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = Result<ContainerAdjustment, String>> + Send;

    /// kubelet updates a container's resources to `resources`; returns updates to apply
    /// instead or besides (one for this container supersedes kubelet's). Default: none.
    fn update_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
        _resources: Option<LinuxResources>,
    ) -> impl Future<Output = Vec<ContainerUpdate>> + Send {
        async { Vec::new() }
    }

    /// A container stops; returns updates of other containers (e.g. to widen their cpusets
    /// over the CPUs it frees). Default: none.
    fn stop_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
    ) -> impl Future<Output = Vec<ContainerUpdate>> + Send {
        async { Vec::new() }
    }

    /// A container was removed. Default: nothing.
    fn remove_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A handle to the runtime for calls outside the runtime's events (re-pinning running
/// containers). Clone it freely; it serves whichever connection [`run_with`] holds, and fails
/// with [`Error::NotConnected`] between connections.
#[derive(Clone)]
pub struct Runtime {
    conn: Arc<Mutex<Option<Arc<Conn>>>>,
    /// True from the runtime's answer to RegisterPlugin until that connection ends.
    registered: Arc<watch::Sender<bool>>,
    /// True from the plugin's answer to that connection's Synchronize until it ends.
    synchronized: Arc<watch::Sender<bool>>,
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime {
            conn: Arc::default(),
            registered: Arc::new(watch::Sender::new(false)),
            synchronized: Arc::new(watch::Sender::new(false)),
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("connected", &self.is_connected())
            .field("registered", &self.is_registered())
            .field("synchronized", &self.is_synchronized())
            .finish()
    }
}

impl Runtime {
    /// A handle not yet connected; pass it to [`run_with`].
    pub fn new() -> Self {
        Runtime::default()
    }

    /// True while a connection to the runtime is open.
    pub fn is_connected(&self) -> bool {
        self.current().is_some()
    }

    /// True while the plugin is registered: from the runtime's answer to RegisterPlugin until
    /// that connection ends (the runtime restarted, or dropped the plugin).
    pub fn is_registered(&self) -> bool {
        *self.registered.borrow()
    }

    /// [`Runtime::is_registered`], as a watch that sees each change.
    pub fn registered(&self) -> watch::Receiver<bool> {
        self.registered.subscribe()
    }

    /// True from the plugin's answer to the connection's Synchronize (its last part) until the
    /// connection ends: the runtime passes its container events to the plugin only from then on.
    pub fn is_synchronized(&self) -> bool {
        *self.synchronized.borrow()
    }

    /// [`Runtime::is_synchronized`], as a watch that sees each change.
    pub fn synchronized(&self) -> watch::Receiver<bool> {
        self.synchronized.subscribe()
    }

    /// Asks the runtime to update running containers (e.g. [`ContainerUpdate::cpuset`] to
    /// re-pin them); returns the updates it failed to apply. containerd 2.4 skips ids it does
    /// not know, and when an update fails it answers with an error alone:
    /// [`Error::Refused`], the others applied. Do not await it from inside a
    /// [`Handler`] method: containerd runs its NRI calls and this one under one lock, so it would
    /// wait until the runtime's request timeout drops the plugin; return updates instead.
    pub async fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> Result<Vec<ContainerUpdate>, Error> {
        let conn = self.current().ok_or(Error::NotConnected)?;
        let reply: UpdateContainersResponse = conn
            .call(
                "UpdateContainers",
                &UpdateContainersRequest { update: updates },
                UPDATE_TIMEOUT,
            )
            .await?;
        Ok(reply.failed)
    }

    fn current(&self) -> Option<Arc<Conn>> {
        self.conn
            .lock()
            .expect("runtime handle lock")
            .clone()
            .filter(|c| !c.closed())
    }

    fn attach(&self, conn: Arc<Conn>) {
        *self.conn.lock().expect("runtime handle lock") = Some(conn);
    }

    fn detach(&self, conn: &Arc<Conn>) {
        let mut cur = self.conn.lock().expect("runtime handle lock");
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *cur = None;
            self.registered.send_replace(false);
            self.synchronized.send_replace(false);
        }
    }

    /// `conn` was registered (`registered`) or answered its Synchronize (`synchronized`): `flag`
    /// is set while it is the current connection (under the lock [`Runtime::detach`] takes, so
    /// an ended connection never reads as registered or synchronized).
    fn mark(&self, conn: &Arc<Conn>, flag: &watch::Sender<bool>) {
        let cur = self.conn.lock().expect("runtime handle lock");
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            flag.send_replace(true);
        }
    }
}

/// Connects to the runtime's NRI socket, registers as `plugin_idx`-`plugin_name` (name
/// `[a-zA-Z0-9_.+-]+`, index two digits; lower indexes are called first), and serves
/// `handler` until the runtime closes the connection: `Ok(())` then, so the caller can
/// reconnect (the runtime re-synchronizes on every connection).
pub async fn run<H: Handler>(
    socket: &Path,
    plugin_name: &str,
    plugin_idx: &str,
    handler: Arc<H>,
) -> Result<(), Error> {
    run_with(socket, plugin_name, plugin_idx, handler, &Runtime::new()).await
}

/// [`run`], with `runtime` connected for the duration: calls on it reach this connection.
/// Dropping the future (e.g. aborting its task) closes the connection.
pub async fn run_with<H: Handler>(
    socket: &Path,
    plugin_name: &str,
    plugin_idx: &str,
    handler: Arc<H>,
    runtime: &Runtime,
) -> Result<(), Error> {
    check_identity(plugin_name, plugin_idx)?;
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|source| Error::Connect {
            path: socket.to_path_buf(),
            source,
        })?;
    let (read, write) = stream.into_split();
    let conn = Arc::new(Conn::new(write));
    runtime.attach(conn.clone());
    // Detached and closed also when this future is dropped, so the socket closes then too.
    let _attached = Attached {
        runtime,
        conn: conn.clone(),
    };
    let synchronized: OnSynchronized = {
        let (runtime, conn) = (runtime.clone(), Arc::downgrade(&conn));
        Arc::new(move || {
            if let Some(conn) = conn.upgrade() {
                runtime.mark(&conn, &runtime.synchronized);
            }
        })
    };
    session(
        read,
        &conn,
        (plugin_name, plugin_idx),
        handler,
        || runtime.mark(&conn, &runtime.registered),
        synchronized,
    )
    .await
}

/// Called once the plugin's answer to the last part of a Synchronize has been sent.
type OnSynchronized = Arc<dyn Fn() + Send + Sync>;

/// Detaches a connection from its [`Runtime`] handle and fails its calls in flight when the
/// connection ends, however it ends; the socket closes once the last task using it is gone.
struct Attached<'a> {
    runtime: &'a Runtime,
    conn: Arc<Conn>,
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.runtime.detach(&self.conn);
        self.conn.close();
    }
}

async fn session<H: Handler>(
    read: OwnedReadHalf,
    conn: &Arc<Conn>,
    (plugin_name, plugin_idx): (&str, &str),
    handler: Arc<H>,
    on_registered: impl FnOnce(),
    on_synchronized: OnSynchronized,
) -> Result<(), Error> {
    let serve = serve(read, conn.clone(), handler, on_synchronized);
    tokio::pin!(serve);
    let request = RegisterPluginRequest {
        plugin_name: plugin_name.to_string(),
        plugin_idx: plugin_idx.to_string(),
        nri_version: NRI_VERSION.to_string(),
    };
    let register = conn.call::<_, Empty>("RegisterPlugin", &request, REGISTRATION_TIMEOUT);
    tokio::select! {
        served = &mut serve => {
            served?;
            return Err(Error::ClosedBeforeRegistration);
        }
        registered = register => { let Empty {} = registered?; }
    }
    on_registered();
    tracing::info!(plugin = %format!("{plugin_idx}-{plugin_name}"), "NRI: registered with the runtime");
    let served = serve.await;
    match &served {
        Ok(()) => tracing::info!("NRI: the runtime closed the connection"),
        Err(e) => tracing::warn!(error = %e, "NRI: connection failed"),
    }
    served
}

/// The runtime's rules for a plugin's name and index (api.CheckPluginName, CheckPluginIndex).
fn check_identity(name: &str, idx: &str) -> Result<(), Error> {
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
    if !name_ok {
        return Err(Error::Identity(format!(
            "name {name:?}: not empty, only [a-zA-Z0-9_.+-]"
        )));
    }
    if idx.len() != 2 || !idx.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::Identity(format!("index {idx:?}: two digits")));
    }
    Ok(())
}

/// One connection's shared state: the write half, the calls awaiting an answer, the parts of
/// a split Synchronize.
struct Conn {
    writer: tokio::sync::Mutex<Option<OwnedWriteHalf>>,
    pending: Mutex<Option<HashMap<u32, oneshot::Sender<frame::Response>>>>,
    next_stream: AtomicU32,
    sync_parts: Mutex<Option<(Vec<PodSandbox>, Vec<Container>)>>,
}

impl Conn {
    fn new(write: OwnedWriteHalf) -> Self {
        Conn {
            writer: tokio::sync::Mutex::new(Some(write)),
            pending: Mutex::new(Some(HashMap::new())),
            // ttrpc clients number their streams 1, 3, 5...
            next_stream: AtomicU32::new(1),
            sync_parts: Mutex::new(None),
        }
    }

    fn closed(&self) -> bool {
        self.pending.lock().expect("pending lock").is_none()
    }

    /// Fails every call in flight and refuses new ones.
    fn close(&self) {
        self.pending.lock().expect("pending lock").take();
    }

    /// Writes one ttrpc message on logical connection `conn_id`.
    async fn send(&self, conn_id: u32, msg: &TtrpcMessage) -> Result<(), Error> {
        let mut wire = Vec::new();
        frame::mux_encode(conn_id, &msg.encode()?, &mut wire);
        let mut w = self.writer.lock().await;
        let w = w.as_mut().ok_or(Error::NotConnected)?;
        w.write_all(&wire).await?;
        Ok(())
    }

    /// A unary call of the runtime service.
    async fn call<Req: Message, Resp: Message + Default>(
        &self,
        method: &'static str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, Error> {
        let stream = self.next_stream.fetch_add(2, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .expect("pending lock")
            .as_mut()
            .ok_or(Error::NotConnected)?
            .insert(stream, tx);
        let request = frame::Request {
            service: RUNTIME_SERVICE.to_string(),
            method: method.to_string(),
            payload: req.encode_to_vec(),
            timeout_nano: timeout.as_nanos() as i64,
            metadata: Vec::new(),
        };
        let msg = TtrpcMessage {
            stream,
            kind: TYPE_REQUEST,
            flags: 0,
            data: request.encode_to_vec(),
        };
        let answer = async {
            self.send(RUNTIME_SERVICE_CONN, &msg).await?;
            rx.await.map_err(|_| Error::NotConnected)
        };
        let result = tokio::time::timeout(timeout, answer).await;
        if let Some(p) = self.pending.lock().expect("pending lock").as_mut() {
            p.remove(&stream);
        }
        let resp = result.map_err(|_| Error::Timeout(method))??;
        if let Some(s) = resp.status.filter(|s| s.code != 0) {
            return Err(Error::Refused {
                method,
                code: s.code,
                message: s.message,
            });
        }
        Resp::decode(resp.payload.as_slice())
            .map_err(|e| Error::Protocol(format!("{method}'s answer: {e}")))
    }

    /// Hands a response from the runtime to the call awaiting it.
    fn answered(&self, msg: TtrpcMessage) {
        let waiting = self
            .pending
            .lock()
            .expect("pending lock")
            .as_mut()
            .and_then(|p| p.remove(&msg.stream));
        let Some(tx) = waiting else {
            tracing::debug!(
                stream = msg.stream,
                "NRI: answer to no pending call dropped"
            );
            return;
        };
        match frame::Response::decode(msg.data.as_slice()) {
            Ok(resp) => {
                let _ = tx.send(resp);
            }
            Err(e) => tracing::warn!(error = %e, "NRI: undecodable answer from the runtime"),
        }
    }
}

/// Reads the socket until the runtime closes it, answering calls in tasks of their own (the
/// runtime may call concurrently); the tasks are aborted when the connection ends.
async fn serve<H: Handler>(
    mut read: OwnedReadHalf,
    conn: Arc<Conn>,
    handler: Arc<H>,
    on_synchronized: OnSynchronized,
) -> Result<(), Error> {
    let mut demux = Demux::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut tasks = JoinSet::new();
    loop {
        let n = read.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        for (conn_id, msg) in demux.push(&buf[..n])? {
            match (conn_id, msg.kind) {
                (PLUGIN_SERVICE_CONN, TYPE_REQUEST) => {
                    let (conn, handler) = (conn.clone(), handler.clone());
                    let synchronized = on_synchronized.clone();
                    tasks.spawn(async move {
                        if answer(&conn, &*handler, msg).await {
                            synchronized();
                        }
                    });
                }
                (RUNTIME_SERVICE_CONN, TYPE_RESPONSE) => conn.answered(msg),
                (c, kind) => {
                    tracing::debug!(
                        conn = c,
                        kind,
                        stream = msg.stream,
                        "NRI: unexpected message dropped"
                    )
                }
            }
        }
        while tasks.try_join_next().is_some() {}
    }
}

/// Answers one call of the plugin service; true when the answer sent ended a synchronization.
async fn answer<H: Handler>(conn: &Conn, handler: &H, msg: TtrpcMessage) -> bool {
    let started = Instant::now();
    let (method, deadline, result) = match frame::Request::decode(msg.data.as_slice()) {
        Err(e) => (
            String::new(),
            0,
            Err(status(CODE_INVALID_ARGUMENT, format!("request: {e}"))),
        ),
        Ok(req) if msg.flags != 0 => (
            req.method,
            0,
            Err(status(CODE_UNIMPLEMENTED, "streaming calls".into())),
        ),
        Ok(req) if req.service != PLUGIN_SERVICE => (
            req.method,
            0,
            Err(status(
                CODE_UNIMPLEMENTED,
                format!("service {}", req.service),
            )),
        ),
        Ok(req) => {
            let result = dispatch(conn, handler, &req.method, &req.payload).await;
            (req.method, req.timeout_nano, result)
        }
    };
    let took = started.elapsed();
    if deadline > 0 && took > Duration::from_nanos(deadline as u64) {
        tracing::warn!(%method, took_ms = took.as_millis() as u64, "NRI: answered after the runtime's deadline; the runtime drops the plugin");
    }
    let (resp, synchronized) = match result {
        Ok(Answer {
            payload,
            synchronized,
        }) => (
            frame::Response {
                status: Some(frame::Status::default()),
                payload,
            },
            synchronized,
        ),
        Err(s) => {
            tracing::debug!(%method, code = s.code, message = %s.message, "NRI: call failed");
            let resp = frame::Response {
                status: Some(s),
                payload: Vec::new(),
            };
            (resp, false)
        }
    };
    let reply = TtrpcMessage {
        stream: msg.stream,
        kind: TYPE_RESPONSE,
        flags: 0,
        data: resp.encode_to_vec(),
    };
    if let Err(e) = conn.send(PLUGIN_SERVICE_CONN, &reply).await {
        tracing::warn!(%method, error = %e, "NRI: could not answer the runtime");
        return false;
    }
    synchronized
}

fn status(code: i32, message: String) -> frame::Status {
    frame::Status { code, message }
}

fn decode<M: Message + Default>(method: &str, payload: &[u8]) -> Result<M, frame::Status> {
    M::decode(payload).map_err(|e| status(CODE_INVALID_ARGUMENT, format!("{method}: {e}")))
}

/// A call's encoded result, and whether it answers the last part of a Synchronize.
struct Answer {
    payload: Vec<u8>,
    synchronized: bool,
}

/// Runs the handler method behind `method`; the encoded result or an error status.
async fn dispatch<H: Handler>(
    conn: &Conn,
    handler: &H,
    method: &str,
    payload: &[u8],
) -> Result<Answer, frame::Status> {
    let mut synchronized = false;
    let out = match method {
        "Configure" => {
            let req: ConfigureRequest = decode(method, payload)?;
            tracing::info!(
                runtime = %req.runtime_name,
                version = %req.runtime_version,
                nri = %req.nri_version,
                request_timeout_ms = req.request_timeout,
                registration_timeout_ms = req.registration_timeout,
                "NRI: configured by the runtime"
            );
            ConfigureResponse {
                events: EVENTS.iter().fold(0, |m, e| m | e.mask()),
            }
            .encode_to_vec()
        }
        "Synchronize" => {
            let req: SynchronizeRequest = decode(method, payload)?;
            let (pods, containers) = {
                let mut parts = conn.sync_parts.lock().expect("sync lock");
                let (pods, containers) = parts.get_or_insert_with(Default::default);
                pods.extend(req.pods);
                containers.extend(req.containers);
                if req.more {
                    // A part of a split request: acknowledge it, answer after the last one.
                    return Ok(Answer {
                        payload: SynchronizeResponse {
                            update: Vec::new(),
                            more: true,
                        }
                        .encode_to_vec(),
                        synchronized: false,
                    });
                }
                parts.take().unwrap_or_default()
            };
            tracing::info!(
                pods = pods.len(),
                containers = containers.len(),
                "NRI: synchronizing"
            );
            let update = handler.synchronize(pods, containers).await;
            synchronized = true;
            SynchronizeResponse {
                update,
                more: false,
            }
            .encode_to_vec()
        }
        "CreateContainer" => {
            let req: CreateContainerRequest = decode(method, payload)?;
            let (pod, container) = (
                req.pod.unwrap_or_default(),
                req.container.unwrap_or_default(),
            );
            tracing::debug!(pod = %pod.name, namespace = %pod.namespace, container = %container.name, "NRI: CreateContainer");
            let adjust = handler
                .create_container(pod, container)
                .await
                .map_err(|m| status(CODE_UNKNOWN, m))?;
            CreateContainerResponse {
                adjust: Some(adjust),
                update: Vec::new(),
            }
            .encode_to_vec()
        }
        "UpdateContainer" => {
            let req: UpdateContainerRequest = decode(method, payload)?;
            let update = handler
                .update_container(
                    req.pod.unwrap_or_default(),
                    req.container.unwrap_or_default(),
                    req.linux_resources,
                )
                .await;
            UpdatesResponse { update }.encode_to_vec()
        }
        "StopContainer" => {
            let req: CreateContainerRequest = decode(method, payload)?;
            let update = handler
                .stop_container(
                    req.pod.unwrap_or_default(),
                    req.container.unwrap_or_default(),
                )
                .await;
            UpdatesResponse { update }.encode_to_vec()
        }
        "RemoveContainer" => {
            let req: CreateContainerRequest = decode(method, payload)?;
            handler
                .remove_container(
                    req.pod.unwrap_or_default(),
                    req.container.unwrap_or_default(),
                )
                .await;
            Empty {}.encode_to_vec()
        }
        // The older catch-all for events without a reply; only removal matters here.
        "StateChange" => {
            let ev: StateChangeEvent = decode(method, payload)?;
            if ev.event == Event::RemoveContainer as i32 {
                handler
                    .remove_container(ev.pod.unwrap_or_default(), ev.container.unwrap_or_default())
                    .await;
            }
            Empty {}.encode_to_vec()
        }
        "Shutdown" => {
            tracing::info!("NRI: the runtime is shutting down");
            Empty {}.encode_to_vec()
        }
        other => return Err(status(CODE_UNIMPLEMENTED, format!("method {other}"))),
    };
    Ok(Answer {
        payload: out,
        synchronized,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_rules() {
        assert!(check_identity("slurm-bridge", "10").is_ok());
        assert!(check_identity("a.b+c_d", "00").is_ok());
        assert!(check_identity("", "10").is_err());
        assert!(check_identity("has space", "10").is_err());
        assert!(check_identity("x", "1").is_err());
        assert!(check_identity("x", "1a").is_err());
    }

    #[test]
    fn event_mask_bits() {
        // CreateContainer (4) is bit 3; RemoveContainer (11) bit 10.
        assert_eq!(Event::CreateContainer.mask(), 1 << 3);
        assert_eq!(Event::RemoveContainer.mask(), 1 << 10);
        let all = EVENTS.iter().fold(0, |m, e| m | e.mask());
        assert_eq!(all, 0b110_1000_1000);
    }
}
