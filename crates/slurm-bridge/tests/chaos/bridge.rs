//! `slurm-bridge run` as a process the suite kills, restarts, pauses and resumes; it reaches
//! slurmrestd and kube-apiserver through the fault proxies.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Bridge {
    child: Child,
    dir: PathBuf,
    config: PathBuf,
    kubeconfig: PathBuf,
    token_file: PathBuf,
    /// SIGKILLs sent.
    pub kills: usize,
    /// Exits nobody asked for (a crash), found by [`Bridge::check_alive`].
    pub crashes: Vec<String>,
}

impl Bridge {
    /// Writes the config (Slurm at `rest_url`) into `dir` and starts the process.
    pub fn start(dir: &Path, rest_url: &str, kubeconfig: &Path, token_file: &Path) -> Bridge {
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "schedulerName: {}\nslurmRestApi: {rest_url}\npartition: slurm-bridge\n",
                crate::e2e::SCHEDULER
            ),
        )
        .unwrap();
        let mut b = Bridge {
            child: Command::new("true").spawn().unwrap(),
            dir: dir.to_path_buf(),
            config,
            kubeconfig: kubeconfig.to_path_buf(),
            token_file: token_file.to_path_buf(),
            kills: 0,
            crashes: Vec::new(),
        };
        let _ = b.child.wait();
        b.child = b.spawn();
        b
    }

    fn spawn(&self) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
            .args(["run", "--config"])
            .arg(&self.config)
            .args([
                "--leader-elect=false",
                "--health-probe-bind-address",
                "127.0.0.1:0",
                "--slurm-poll-interval",
                "500ms",
                "--shutdown-grace",
                "1s",
            ])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("SLURM_JWT_FILE", &self.token_file)
            .env("RUST_LOG", "info,kube_client=warn,kube_runtime=warn")
            .env_remove("SLURM_JWT")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start slurm-bridge run")
    }

    /// The process's log, every start appended.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("run.log")
    }

    /// SIGKILL, then a new process at once.
    pub fn kill_and_restart(&mut self) {
        self.check_alive();
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.kills += 1;
        self.child = self.spawn();
    }

    /// Records an exit nobody asked for and starts the bridge again.
    pub fn check_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            self.crashes.push(format!("{status}"));
            self.child = self.spawn();
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} of the bridge");
    }

    /// SIGSTOP: the bridge holds its connections and does nothing.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`Bridge::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGTERM and the exit status (a clean shutdown is part of what is checked).
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        self.check_alive();
        crate::e2e::terminate(&mut self.child).await
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
