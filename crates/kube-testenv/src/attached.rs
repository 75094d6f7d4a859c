//! A handle on an instance another process runs (the CLI's `env`, `exec`, `down`).

use crate::error::{Error, Result};
use crate::instance::{Meta, env_lines, read_meta, reap, validate_name};
use crate::paths::run_dir;
use slurm_testenv::process::kill;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// An instance started by another process (the CLI's `env`, `exec`, `down`).
pub struct Attached {
    dir: PathBuf,
    meta: Meta,
}

impl Attached {
    /// Finds the running instance `name`.
    pub fn find(name: &str) -> Result<Attached> {
        validate_name(name)?;
        let dir = run_dir().join(name);
        match read_meta(&dir) {
            Some(meta) if meta.owner.is_alive() => Ok(Attached { dir, meta }),
            _ => Err(Error::NoSuchInstance { name: name.into() }),
        }
    }

    /// `KUBECONFIG=...`.
    pub fn env_lines(&self) -> String {
        env_lines(&self.dir)
    }

    /// Runs `command` with this instance's KUBECONFIG and `kubectl` first on PATH.
    pub fn exec(&self, command: &[String]) -> Result<std::process::ExitStatus> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| Error::Invalid("exec needs a command after --".into()))?;
        let path = std::env::var("PATH").unwrap_or_default();
        Command::new(program)
            .args(args)
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .env("PATH", format!("{}:{path}", self.meta.bin_dir.display()))
            .status()
            .map_err(Error::io(format!("run {program}")))
    }

    /// Imports an image archive into every kubelet node of the instance.
    pub fn load_image(&self, archive: &std::path::Path) -> Result<()> {
        crate::instance::load_image(&self.dir, self.meta.kubelet.as_ref(), archive)
    }

    /// Stops the owner (`kube-testenv run`), which stops the daemons; forces it after 10 s.
    pub fn stop(self) -> Result<()> {
        kill(self.meta.owner.pid, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.meta.owner.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.meta.owner.is_alive() {
            kill(self.meta.owner.pid, libc::SIGKILL);
        }
        reap(&self.dir, Some(&self.meta));
        // The log of `kube-testenv run` (kept while it runs, for `up`'s error messages).
        let _ = fs::remove_file(self.dir.with_extension("run.log"));
        Ok(())
    }
}
