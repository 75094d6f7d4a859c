//! Kubernetes' own DRA test driver (tool `dra-test-driver`, [`crate::binaries::DRA_TEST_DRIVER`])
//! as the DRA driver of one kubelet node: its `kubelet-plugin` subcommand run on the host with
//! the node's folders ([`crate::Instance::kubelet_dirs`]).
//!
//! What the driver does (its source, `test/e2e/dra/test-driver/app/` of k8s.io/kubernetes
//! v1.36.3): it publishes one ResourceSlice for the node, pool named after the node, devices
//! `device-00` .. without attributes; for a claim's allocation results of its driver it writes a
//! CDI spec `<cdi>/<driver>-<claim uid>-<request>.json` whose container edits set
//! `claim_<claim name>_<request>=true` (non-alphanumerics as `_`) and answers the kubelet with
//! its CDI device; unprepare removes the spec. It names its DRA socket to the kubelet by its
//! host path, which the kubelet's mount namespace sees too (the instance's folder is not under
//! a bound path).

use crate::error::{Error, Result, tail_of};
use crate::instance::Instance;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The driver's default name (`--drivername`).
pub const TEST_DRIVER: &str = "test-driver.cdi.k8s.io";

/// The line the driver logs (at `-v=6`, every gRPC call) once the kubelet registered it.
const REGISTERED: &str = "NotifyRegistrationStatus\" request=\"plugin_registered:true\"";

/// How long [`DraTestDriver::start`] waits for the kubelet to register the plugin.
const REGISTER_WITHIN: Duration = Duration::from_secs(60);

/// A running `dra-test-driver kubelet-plugin` for one kubelet node; killed when dropped. Its
/// log (`-v=6`: every gRPC call with its request and answer) is
/// `<instance>/logs/dra-test-driver-<node>.log`, appended to across restarts.
pub struct DraTestDriver {
    child: Child,
    log: PathBuf,
    driver: String,
    cdi: PathBuf,
}

impl DraTestDriver {
    /// Starts the driver `driver` with `devices` devices as kubelet node `node`'s plugin
    /// (building the tool first if the cache lacks it), with the instance's admin kubeconfig,
    /// and returns once the kubelet has registered it (within 60 s). The node's slice is
    /// published right after; wait for it through the API.
    pub async fn start(
        env: &Instance,
        node: &str,
        driver: &str,
        devices: usize,
    ) -> Result<DraTestDriver> {
        let dirs = env
            .kubelet_dirs(node)
            .ok_or_else(|| Error::Invalid(format!("{node} is not a kubelet node")))?;
        let bin = tokio::task::spawn_blocking(crate::binaries::dra_test_driver)
            .await
            .map_err(|e| Error::Invalid(format!("building dra-test-driver: {e}")))??;
        // The driver creates the plugins folder, not its socket's folder in it.
        let socket_dir = dirs.plugins.join(driver);
        std::fs::create_dir_all(&socket_dir)
            .map_err(Error::io(format!("create {}", socket_dir.display())))?;
        let log = env
            .dir()
            .join("logs")
            .join(format!("dra-test-driver-{node}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(Error::io(format!("open {}", log.display())))?;
        let already = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let child = Command::new(&bin)
            .arg("kubelet-plugin")
            .arg(format!("--node-name={node}"))
            .arg(format!("--drivername={driver}"))
            .arg(format!("--num-devices={devices}"))
            .arg(format!(
                "--plugin-registration-path={}",
                dirs.plugins_registry.display()
            ))
            .arg(format!("--datadir={}", dirs.plugins.display()))
            .arg(format!("--cdi-dir={}", dirs.cdi.display()))
            .arg("-v=6")
            .env("KUBECONFIG", env.kubeconfig())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .map_err(Error::io(format!("start {}", bin.display())))?;
        let mut d = DraTestDriver {
            child,
            log,
            driver: driver.to_string(),
            cdi: dirs.cdi,
        };
        let started = Instant::now();
        loop {
            let text = std::fs::read(&d.log).unwrap_or_default();
            let new = String::from_utf8_lossy(text.get(already as usize..).unwrap_or_default());
            if new.contains(REGISTERED) {
                return Ok(d);
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                return Err(Error::Exited {
                    component: "dra-test-driver",
                    status: status.to_string(),
                    tail: tail_of(&d.log, 20),
                    log: d.log.clone(),
                });
            }
            if started.elapsed() > REGISTER_WITHIN {
                return Err(Error::NotReady {
                    component: "dra-test-driver",
                    seconds: REGISTER_WITHIN.as_secs(),
                    detail: format!("the kubelet of {node} did not register it"),
                    tail: tail_of(&d.log, 20),
                    log: d.log.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The driver's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The driver's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The CDI spec the driver writes when it prepares request `request` of the claim of uid
    /// `claim_uid` (gone once unprepared).
    pub fn cdi_spec(&self, claim_uid: &str, request: &str) -> PathBuf {
        self.cdi
            .join(format!("{}-{claim_uid}-{request}.json", self.driver))
    }

    /// Stops the driver as its DaemonSet pod would be stopped (SIGTERM; SIGKILL after 30 s),
    /// and returns its exit status. The kubelet unregisters it; its slice stays until the
    /// kubelet wipes it 30 s later.
    pub async fn stop(mut self) -> Result<ExitStatus> {
        slurm_testenv::process::kill(self.child.id() as i32, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .map_err(Error::io("wait for dra-test-driver"))?
            {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return self
                    .child
                    .wait()
                    .map_err(Error::io("wait for dra-test-driver"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for DraTestDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
