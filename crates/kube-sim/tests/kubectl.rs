//! kubectl, a real client nobody here wrote, against kube-sim.
//!
//! kubectl is found as: env `KUBECTL` (a path run as is); else `kubectl` inside the
//! slurm-testenv root file system (run with chroot, the kubeconfig copied into it); else the
//! host's `/usr/bin/kubectl` when it answers `kubectl version --client`. When none is found
//! the test fails with a message saying so: it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube_sim::{KubeSim, Options};

/// How to run kubectl.
struct Kubectl {
    /// Root file system to chroot into, if any.
    root: Option<PathBuf>,
    /// The kubectl program (inside `root` when set).
    program: String,
    /// Kubeconfig path as kubectl sees it.
    kubeconfig: String,
    /// Files written for kubectl (removed at the end).
    files: std::sync::Mutex<Vec<PathBuf>>,
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        for f in self.files.lock().map(|f| f.clone()).unwrap_or_default() {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn answers(cmd: &mut Command) -> bool {
    cmd.output().map(|o| o.status.success()).unwrap_or(false)
}

fn find_kubectl(kubeconfig_host: &Path) -> Result<Kubectl, String> {
    let mut tried = Vec::new();
    if let Some(k) = std::env::var_os("KUBECTL") {
        let k = k.to_string_lossy().to_string();
        if answers(Command::new(&k).args(["version", "--client"])) {
            return Ok(Kubectl {
                root: None,
                program: k,
                kubeconfig: kubeconfig_host.display().to_string(),
                files: Default::default(),
            });
        }
        return Err(format!("KUBECTL={k} does not answer `version --client`"));
    }
    let mut roots = Vec::new();
    match slurm_testenv::rootfs::ensure() {
        Ok(r) => roots.push(r.path),
        Err(e) => tried.push(format!("slurm-testenv root file system: {e}")),
    }
    roots.push(PathBuf::from("/tmp/sidroot"));
    for root in roots {
        if !root.join("usr/bin/kubectl").exists() {
            tried.push(format!("{}: no usr/bin/kubectl", root.display()));
            continue;
        }
        if !answers(
            Command::new("chroot")
                .arg(&root)
                .args(["kubectl", "version", "--client"]),
        ) {
            tried.push(format!(
                "{}: kubectl does not run under chroot",
                root.display()
            ));
            continue;
        }
        let inside = format!(
            "/tmp/kube-sim-test-{}-{}.kubeconfig",
            std::process::id(),
            rand_suffix()
        );
        let dest = root.join(inside.trim_start_matches('/'));
        std::fs::copy(kubeconfig_host, &dest)
            .map_err(|e| format!("copying kubeconfig into {}: {e}", root.display()))?;
        return Ok(Kubectl {
            root: Some(root),
            program: "kubectl".into(),
            kubeconfig: inside,
            files: std::sync::Mutex::new(vec![dest]),
        });
    }
    if answers(Command::new("/usr/bin/kubectl").args(["version", "--client"])) {
        return Ok(Kubectl {
            root: None,
            program: "/usr/bin/kubectl".into(),
            kubeconfig: kubeconfig_host.display().to_string(),
            files: Default::default(),
        });
    }
    tried.push("/usr/bin/kubectl: missing or does not answer `version --client`".into());
    Err(format!(
        "no kubectl found; set KUBECTL or install the slurm-testenv root file system. Tried: {}",
        tried.join("; ")
    ))
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = match &self.root {
            Some(r) => {
                let mut c = Command::new("chroot");
                c.arg(r).arg(&self.program);
                c
            }
            None => Command::new(&self.program),
        };
        c.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        c
    }

    /// Run kubectl, returning stdout; panics with stderr on failure.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.command(args).output().expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Write a file where kubectl can read it; returns kubectl's path for it.
    fn file(&self, name: &str, text: &str) -> String {
        let inside = format!(
            "/tmp/kube-sim-test-{}-{}-{name}",
            std::process::id(),
            rand_suffix()
        );
        let host = match &self.root {
            Some(r) => r.join(inside.trim_start_matches('/')),
            None => PathBuf::from(&inside),
        };
        std::fs::write(&host, text).expect("write manifest");
        if let Ok(mut f) = self.files.lock() {
            f.push(host);
        }
        inside
    }
}

const MANIFEST: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: kp
  labels: {app: demo}
spec:
  containers:
  - name: c
    image: busybox
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: kcm
data: {a: "1"}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: kj
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_works_against_kube_sim() {
    let sim = KubeSim::start(Options::default())
        .await
        .expect("kube-sim starts");
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc).unwrap();
    let k = match find_kubectl(&kc) {
        Ok(k) => k,
        Err(msg) => panic!("{msg}"),
    };
    let manifest = k.file("m.yaml", MANIFEST);
    let k = std::sync::Arc::new(k);
    let kk = k.clone();
    tokio::task::spawn_blocking(move || {
        let k = kk;
        let out = k.ok(&["create", "-f", &manifest]);
        assert!(
            out.contains("pod/kp created")
                && out.contains("configmap/kcm created")
                && out.contains("job.batch/kj created"),
            "{out}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&k.ok(&["get", "pods", "-o", "json"])).unwrap();
        assert_eq!(json["items"][0]["metadata"]["name"], "kp");
        let yaml = k.ok(&["get", "pod", "kp", "-o", "yaml"]);
        assert!(
            yaml.contains("name: kp") && yaml.contains("schedulerName: default-scheduler"),
            "{yaml}"
        );
        assert!(
            k.ok(&["get", "pods", "-l", "app=demo", "-o", "name"])
                .contains("pod/kp")
        );
        assert!(
            !k.ok(&["get", "pods", "-l", "app=other", "-o", "name"])
                .contains("pod/kp")
        );
        assert!(k.ok(&["label", "pod", "kp", "tier=fe"]).contains("labeled"));
        assert!(
            k.ok(&["annotate", "pod", "kp", "note=hi"])
                .contains("annotated")
        );
        k.ok(&[
            "patch",
            "configmap",
            "kcm",
            "--type=merge",
            "-p",
            r#"{"data":{"b":"2"}}"#,
        ]);
        let cm: serde_json::Value =
            serde_json::from_str(&k.ok(&["get", "configmap", "kcm", "-o", "json"])).unwrap();
        assert_eq!(cm["data"], serde_json::json!({"a": "1", "b": "2"}));
        let p: serde_json::Value =
            serde_json::from_str(&k.ok(&["get", "pod", "kp", "-o", "json"])).unwrap();
        assert_eq!(p["metadata"]["labels"]["tier"], "fe");
        assert_eq!(p["metadata"]["annotations"]["note"], "hi");
        assert!(k.ok(&["get", "jobs"]).contains("kj"));
        assert!(k.ok(&["get", "namespaces"]).contains("kube-system"));
    })
    .await
    .unwrap();

    // get --watch sees a later change, then delete.
    let mut watch = k.command(&[
        "get",
        "configmaps",
        "--watch",
        "-o",
        "name",
        "--request-timeout=20s",
    ]);
    watch
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = watch.spawn().expect("kubectl get --watch starts");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let late = k.file(
        "late.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: late\ndata: {x: y}\n",
    );
    let kk = k.clone();
    tokio::task::spawn_blocking(move || {
        kk.ok(&["create", "-f", &late]);
        assert!(kk.ok(&["delete", "pod", "kp"]).contains("deleted"));
        assert!(kk.ok(&["delete", "configmap", "kcm"]).contains("deleted"));
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // End the watch we started, by its own pid.
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("configmap/kcm"), "watch output: {text}");
    assert!(text.contains("configmap/late"), "watch output: {text}");
    let kk = k.clone();
    let m2 = k.file("m2.yaml", MANIFEST);
    tokio::task::spawn_blocking(move || {
        let pods = kk.ok(&["get", "pods", "-o", "name"]);
        assert!(!pods.contains("pod/kp"), "{pods}");
        // Server-side apply creates, then re-applies without conflict.
        for _ in 0..2 {
            let out = kk.ok(&["apply", "--server-side", "-f", &m2]);
            assert!(out.contains("pod/kp serverside-applied"), "{out}");
        }
        // Table output (server-side printing).
        let table = kk.ok(&["get", "pods"]);
        assert!(
            table.contains("STATUS") && table.contains("Pending"),
            "{table}"
        );
    })
    .await
    .unwrap();
    sim.stop().await;
}
