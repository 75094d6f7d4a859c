//! Accounting: the instance's MariaDB server and slurmdbd, the cluster's registration, and the
//! helpers tests use to set up tenants (Unix users and groups, `sacctmgr`).

use super::{Instance, START_TIMEOUT, STOP_TIMEOUT, locked, random_bytes, write_secret};
use crate::accounting::{self, DB_TEMPLATE};
use crate::error::{Error, Result};
use crate::process::{self, ProcId};
use crate::rootfs::tail_of;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

impl Instance {
    /// Starts mariadbd (from a copy of the pristine data folder) and slurmdbd, waits until both
    /// answer, and registers the cluster (which makes account `root` with user root).
    pub(super) fn start_accounting(&self) -> Result<()> {
        let (dbd_port, db_port, cluster) = {
            let meta = locked(&self.meta);
            (
                meta.slurmdbd_port.unwrap_or_default(),
                meta.mariadb_port.unwrap_or_default(),
                meta.cluster_name.clone().unwrap_or_default(),
            )
        };
        let password: String = random_bytes(16)?
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let datadir = self.dir.join("mysql");
        let template = self.rootfs.path.join(DB_TEMPLATE.trim_start_matches('/'));
        let status = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(&datadir)
            .status()
            .map_err(Error::io("run cp"))?;
        if !status.success() {
            return Err(Error::Io {
                context: format!("copy {} to {}", template.display(), datadir.display()),
                source: std::io::Error::other(status.to_string()),
            });
        }
        fs::create_dir_all(self.dir.join("mysql-tmp")).map_err(Error::io("create mysql-tmp"))?;
        write_secret(
            &self.dir.join("mysql-init.sql"),
            accounting::init_sql(&password).as_bytes(),
        )?;
        write_secret(
            &self.dir.join("slurmdbd.conf"),
            accounting::render_slurmdbd_conf(dbd_port, db_port, &password).as_bytes(),
        )?;
        self.spawn_mariadbd(db_port)?;
        self.spawn_slurmdbd(dbd_port)?;
        self.sacctmgr(&["add", "cluster", &cluster]).map(|_| ())
    }

    fn spawn_mariadbd(&self, port: u16) -> Result<()> {
        let argv = accounting::mariadbd_argv(port);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = self.dir.join("mariadbd.out");
        let child = self.spawn_daemon(&argv, &out, &[])?;
        let id = ProcId::of(child.id() as i32);
        locked(&self.children).mariadbd = Some(child);
        locked(&self.meta).mariadbd = id;
        self.save_meta()?;
        let log = self.dir.join("mariadbd.log");
        self.wait_listening("mariadbd", port, &log, |c| &mut c.mariadbd, true)
    }

    /// Starts slurmdbd (again, after [`Instance::stop_slurmdbd`]) and waits until it listens.
    pub fn start_slurmdbd(&self) -> Result<()> {
        let port = locked(&self.meta)
            .slurmdbd_port
            .ok_or(Error::NeedsAccounting { what: "slurmdbd" })?;
        self.spawn_slurmdbd(port)
    }

    fn spawn_slurmdbd(&self, port: u16) -> Result<()> {
        let out = self.dir.join("slurmdbd.out");
        // Its own /run: like slurmctld, it binds /run/slurm/sack.socket.
        let child = self.spawn_daemon(
            &["slurmdbd", "-D"],
            &out,
            &[("SLURM_TESTENV_RUN", "run-slurmdbd")],
        )?;
        let id = ProcId::of(child.id() as i32);
        locked(&self.children).slurmdbd = Some(child);
        locked(&self.meta).slurmdbd = id;
        self.save_meta()?;
        self.wait_listening(
            "slurmdbd",
            port,
            &self.slurmdbd_log(),
            |c| &mut c.slurmdbd,
            false,
        )
    }

    /// Stops slurmdbd only (slurmctld keeps running and queues its accounting messages), to test
    /// a client against an accounting outage.
    pub fn stop_slurmdbd(&self) -> Result<()> {
        self.stop_child(|c| &mut c.slurmdbd);
        let id = locked(&self.meta).slurmdbd.take();
        if let Some(id) = id {
            process::stop_sandbox(id, STOP_TIMEOUT);
        }
        self.save_meta()
    }

    /// Waits until `daemon` accepts connections on 127.0.0.1:`port` (and, with `greets`, sends
    /// its first bytes, as MariaDB does once its init file has run).
    fn wait_listening(
        &self,
        daemon: &'static str,
        port: u16,
        log: &std::path::Path,
        pick: impl Fn(&mut super::Children) -> &mut Option<std::process::Child> + Copy,
        greets: bool,
    ) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if !self.child_alive(pick) {
                let tail = tail_of(log, 15);
                if tail.contains("Address already in use") || tail.contains("Bind on TCP/IP port") {
                    return Err(Error::PortInUse { port, what: daemon });
                }
                return Err(Error::DaemonFailed {
                    daemon,
                    reason: "it exited".into(),
                    log: log.to_path_buf(),
                    tail,
                });
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                if !greets {
                    return Ok(());
                }
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut byte = [0u8; 1];
                if matches!(s.read(&mut byte), Ok(1)) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(Error::DaemonFailed {
                    daemon,
                    reason: format!(
                        "it did not answer on port {port} within {} s",
                        START_TIMEOUT.as_secs()
                    ),
                    log: log.to_path_buf(),
                    tail: tail_of(log, 15),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Host path of slurmdbd's log.
    pub fn slurmdbd_log(&self) -> PathBuf {
        self.dir.join("slurmdbd.log")
    }

    /// The instance's ClusterName (the name slurmdbd knows it by: `sacctmgr ... cluster=NAME`).
    pub fn cluster_name(&self) -> String {
        let meta = locked(&self.meta);
        meta.cluster_name
            .clone()
            .unwrap_or_else(|| format!("st{}", meta.slurmctld_port))
    }

    /// True when the instance runs with accounting (slurmdbd and a database).
    pub fn has_accounting(&self) -> bool {
        locked(&self.meta).slurmdbd_port.is_some()
    }

    /// Runs `sacctmgr -i ARGS` (no confirmation prompt) against slurmdbd (slurmctld need not be
    /// up) and returns its output; a non-zero exit is
    /// an error carrying stderr. E.g. `sacctmgr(&["add", "account", "team-a", "Fairshare=10"])`,
    /// `sacctmgr(&["add", "user", "alice", "Account=team-a"])`, `sacctmgr(&["add", "qos", "high"])`.
    /// Unix users must exist first ([`Instance::add_unix_user`]): slurmctld resolves their uid
    /// when the association reaches it.
    pub fn sacctmgr(&self, args: &[&str]) -> Result<String> {
        if !self.has_accounting() {
            return Err(Error::NeedsAccounting { what: "sacctmgr" });
        }
        let mut argv = vec!["sacctmgr", "-i"];
        argv.extend_from_slice(args);
        // Signed through slurmdbd's auth socket (its own /run), so it works while slurmctld,
        // whose socket other clients use, is down or not started yet (at registration).
        let out = self
            .command(&argv)
            .env("SLURM_TESTENV_RUN", "run-slurmdbd")
            .stdin(Stdio::null())
            .output()
            .map_err(Error::io("run sacctmgr"))?;
        if !out.status.success() {
            return Err(Error::CommandFailed {
                command: crate::sandbox::display_argv(&argv),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// Adds a Unix user `name` with `uid` (and a group of the same name with gid `uid`) to this
    /// instance's own `/etc/passwd` and `/etc/group`, which every process of the instance sees
    /// (other instances sharing the root file system do not). Home and working folder:
    /// `/slurm-testenv/work`, writable by all.
    pub fn add_unix_user(&self, name: &str, uid: u32) -> Result<()> {
        valid_unix_name(name)?;
        let passwd = self.dir.join("etc/passwd");
        let text = fs::read_to_string(&passwd).map_err(Error::io("read etc/passwd"))?;
        if text.lines().any(|l| {
            let mut f = l.split(':');
            f.next() == Some(name) || f.nth(1) == Some(uid.to_string().as_str())
        }) {
            return Err(Error::UnixUser {
                what: format!("user {name:?} or uid {uid} already exists"),
            });
        }
        // Appended in place: the file is bind-mounted by inode into running sandboxes.
        append(
            &passwd,
            &format!("{name}:x:{uid}:{uid}:{name}:/slurm-testenv/work:/bin/sh\n"),
        )?;
        self.add_unix_group(name, uid, &[])
    }

    /// Adds a Unix group `name` with `gid` and `members` (supplementary) to this instance's
    /// `/etc/group`.
    pub fn add_unix_group(&self, name: &str, gid: u32, members: &[&str]) -> Result<()> {
        valid_unix_name(name)?;
        let group = self.dir.join("etc/group");
        let text = fs::read_to_string(&group).map_err(Error::io("read etc/group"))?;
        if text.lines().any(|l| {
            let mut f = l.split(':');
            f.next() == Some(name) || f.nth(1) == Some(gid.to_string().as_str())
        }) {
            return Err(Error::UnixUser {
                what: format!("group {name:?} or gid {gid} already exists"),
            });
        }
        append(&group, &format!("{name}:x:{gid}:{}\n", members.join(",")))
    }
}

fn valid_unix_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::UnixUser {
            what: format!("{name:?} is not a valid user or group name"),
        })
    }
}

fn append(path: &std::path::Path, line: &str) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(Error::io(format!("open {}", path.display())))?;
    f.write_all(line.as_bytes())
        .map_err(Error::io(format!("write {}", path.display())))
}
