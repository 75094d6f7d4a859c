//! slurm-testenv with accounting (MariaDB + slurmdbd) against the real Slurm it builds: jobs
//! recorded with their account, associations and QoS limits enforced, QoS preemption, tenants'
//! Unix users. These tests need root and run in CI.

mod common;

use common::{job_field, wait_for};
use slurm_testenv::conf::{Policy, PreemptMode, PreemptType};
use slurm_testenv::{Instance, InstanceOptions, http};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn start(opts: InstanceOptions) -> Instance {
    Instance::start(InstanceOptions {
        accounting: true,
        ..opts
    })
    .expect("start a Slurm instance with accounting")
}

/// The tenants the tenancy suites use: Unix users alice (2001) and bob (2002), groups team-a and
/// team-b, accounts team-a and team-b, QoS normal and high.
fn add_tenants(inst: &Instance) {
    inst.add_unix_user("alice", 2001).unwrap();
    inst.add_unix_user("bob", 2002).unwrap();
    inst.add_unix_group("team-a", 3001, &["alice"]).unwrap();
    inst.add_unix_group("team-b", 3002, &["bob"]).unwrap();
    inst.sacctmgr(&["add", "qos", "high", "Priority=1000"])
        .unwrap();
    inst.sacctmgr(&["add", "account", "team-a", "Fairshare=10"])
        .unwrap();
    inst.sacctmgr(&["add", "account", "team-b", "Fairshare=10"])
        .unwrap();
    inst.sacctmgr(&[
        "add",
        "user",
        "alice",
        "Account=team-a",
        "QOS=normal,high",
        "DefaultQOS=normal",
    ])
    .unwrap();
    inst.sacctmgr(&["add", "user", "bob", "Account=team-b"])
        .unwrap();
}

/// POST `body` to slurmrestd with the instance's root token; returns the status and JSON answer
/// (`Null` when the answer is not JSON).
fn post(inst: &Instance, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let addr = inst
        .rest_url()
        .trim_start_matches("http://")
        .parse()
        .expect("HOST:PORT");
    let headers = [
        ("X-SLURM-USER-TOKEN", inst.token()),
        ("Content-Type", "application/json"),
    ];
    let r = http::post(addr, path, &headers, body.to_string().as_bytes()).unwrap();
    let json = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
    (r.status, json)
}

/// Submits an external job (one whole node) through slurmrestd as root, on behalf of `uid`.
fn submit_external(inst: &Instance, uid: u32, account: &str) -> (u16, serde_json::Value) {
    let job = serde_json::json!({"job": {
        "name": "ext",
        "flags": ["EXTERNAL_JOB"],
        "nodes": "1",
        "partition": "slurm-bridge",
        "current_working_directory": "/tmp",
        "user_id": uid.to_string(),
        "group_id": uid.to_string(),
        "account": account,
        "shared": ["none"],
    }});
    post(inst, "/slurm/v0.0.44/job/submit", &job)
}

fn job_id(answer: &serde_json::Value) -> String {
    answer["job_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job_id in {answer}"))
        .to_string()
}

fn wait_job(inst: &Instance, id: &str, key: &str, value: &str) {
    wait_for(
        &format!("job {id} {key}={value}"),
        Duration::from_secs(30),
        || {
            let now = job_field(inst, id, key);
            (now != value).then_some(now)
        },
    );
}

/// Processes whose command line names `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().to_string();
            pid.parse::<u32>().ok()?;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(needle).then_some(cmd)
        })
        .collect()
}

#[test]
fn accounting_records_jobs_and_enforces_associations_and_qos_limits() {
    let inst = start(InstanceOptions {
        nodes: 3,
        ..Default::default()
    });
    assert!(inst.has_accounting());
    let cluster = inst.cluster_name();
    // Registered at start: the cluster, account root, user root.
    let assocs = inst
        .run(&[
            "sacctmgr",
            "-nP",
            "show",
            "assoc",
            "format=cluster,account,user",
        ])
        .unwrap();
    assert!(
        assocs.lines().any(|l| l == format!("{cluster}|root|root")),
        "{assocs}"
    );
    add_tenants(&inst);
    // The users exist in this instance (and only there).
    let id = inst.run(&["id", "alice"]).unwrap();
    assert!(
        id.contains("uid=2001(alice)") && id.contains("3001(team-a)"),
        "{id}"
    );
    assert!(
        !std::fs::read_to_string(
            slurm_testenv::rootfs::ensure()
                .unwrap()
                .path
                .join("etc/passwd")
        )
        .unwrap()
        .contains("alice:")
    );

    // A job submitted through slurmrestd for alice runs, charged to her account, and sacct lists it.
    let (status, answer) = submit_external(&inst, 2001, "team-a");
    assert_eq!(status, 200, "{answer}");
    let first = job_id(&answer);
    wait_job(&inst, &first, "JobState", "RUNNING");
    assert_eq!(job_field(&inst, &first, "Account"), "team-a");
    wait_for("sacct lists the job", Duration::from_secs(30), || {
        let out = inst
            .run(&[
                "sacct",
                "-X",
                "-n",
                "-P",
                "-j",
                &first,
                "-o",
                "jobid,user,account,state",
            ])
            .unwrap();
        (out.trim() != format!("{first}|alice|team-a|RUNNING")).then_some(out)
    });

    // An account alice has no association with is refused, with Slurm's error.
    let (status, answer) = submit_external(&inst, 2001, "team-b");
    assert_ne!(status, 200, "{answer}");
    assert!(
        answer.to_string().contains("Invalid account"),
        "{status} {answer}"
    );

    // A QoS limit holds alice's second job back while her first runs, though nodes are free.
    inst.sacctmgr(&["modify", "qos", "normal", "set", "MaxJobsPerUser=1"])
        .unwrap();
    let (status, answer) = submit_external(&inst, 2001, "team-a");
    assert_eq!(status, 200, "{answer}");
    let second = job_id(&answer);
    wait_job(&inst, &second, "Reason", "QOSMaxJobsPerUserLimit");
    assert_eq!(job_field(&inst, &second, "JobState"), "PENDING");
    // bob is not limited by alice's jobs.
    let (status, answer) = submit_external(&inst, 2002, "team-b");
    assert_eq!(status, 200, "{answer}");
    wait_job(&inst, &job_id(&answer), "JobState", "RUNNING");

    // sshare lists the accounts and their users.
    let sshare = inst.run(&["sshare", "-a", "-n", "-P"]).unwrap();
    for (account, user) in [("team-a", "alice"), ("team-b", "bob"), ("root", "root")] {
        assert!(
            sshare
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{account}|{user}|"))),
            "{sshare}"
        );
    }
    let sprio = inst.run(&["sprio", "-n", "-j", &second]).unwrap();
    assert!(sprio.contains(&second), "{sprio}");

    // Dropping the instance stops mariadbd and slurmdbd too, and removes their state.
    let dir = inst.dir().to_path_buf();
    let wrappers = inst.daemon_wrappers();
    assert_eq!(
        wrappers.len(),
        4,
        "slurmctld, slurmrestd, slurmdbd, mariadbd"
    );
    drop(inst);
    assert!(wrappers.iter().all(|w| !w.is_alive()));
    assert!(processes_naming(&dir.display().to_string()).is_empty());
    assert!(!dir.exists());
}

#[test]
fn qos_preemption_requeues_the_lower_qos_job() {
    let inst = start(InstanceOptions {
        slurmd_nodes: 1,
        policy: Policy {
            preempt: Some(PreemptMode::Requeue),
            preempt_type: PreemptType::Qos,
            ..Default::default()
        },
        ..Default::default()
    });
    inst.sacctmgr(&["add", "qos", "high", "Preempt=normal", "Priority=1000"])
        .unwrap();
    inst.sacctmgr(&["modify", "user", "root", "set", "QOS+=high"])
        .unwrap();
    let submit = |qos: &str| {
        inst.run(&[
            "sbatch",
            "--parsable",
            "--exclusive",
            &format!("--qos={qos}"),
            "--wrap",
            "sleep 300",
        ])
        .unwrap()
        .trim()
        .to_string()
    };
    let low = submit("normal");
    wait_job(&inst, &low, "JobState", "RUNNING");
    let high = submit("high");
    wait_job(&inst, &high, "JobState", "RUNNING");
    wait_job(&inst, &low, "JobState", "PENDING");
    assert_eq!(job_field(&inst, &low, "Restarts"), "1");
}

#[test]
fn qos_preemption_needs_accounting() {
    let name = format!("qos-unaccounted-{}", std::process::id());
    let err = Instance::start(InstanceOptions {
        name: Some(name.clone()),
        policy: Policy {
            preempt: Some(PreemptMode::Requeue),
            preempt_type: PreemptType::Qos,
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("needs an instance with accounting"),
        "{err}"
    );
    let dir = slurm_testenv::paths::run_dir().join(&name);
    assert!(!dir.exists(), "a refused start left {}", dir.display());
}

#[test]
fn cli_up_with_accounting_serves_sacctmgr_sacct_sshare_sprio_and_down_stops_it_all() {
    let bin = env!("CARGO_BIN_EXE_slurm-testenv");
    let name = format!("acct-cli-{}", std::process::id());
    let up = Command::new(bin)
        .args(["up", "--name", &name, "--accounting", "--preempt", "qos"])
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let exec = |args: &[&str]| {
        let out = Command::new(bin)
            .args(["exec", "--name", &name, "--"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let conf = exec(&["scontrol", "show", "config"]);
    assert!(conf.contains("preempt/qos"), "{conf}");
    assert!(conf.contains("priority/multifactor"), "{conf}");
    exec(&["sacctmgr", "-i", "add", "account", "team-a"]);
    assert!(exec(&["sacctmgr", "-nP", "show", "account", "format=account"]).contains("team-a"));
    exec(&["sacct", "-a"]);
    assert!(exec(&["sshare", "-a"]).contains("team-a"));
    exec(&["sprio", "-w"]);
    // slurmdbd restarts from the same database.
    let restart = Command::new(bin)
        .args(["restart", "--name", &name, "slurmdbd"])
        .output()
        .unwrap();
    assert!(
        restart.status.success(),
        "{}",
        String::from_utf8_lossy(&restart.stderr)
    );
    assert!(exec(&["sacctmgr", "-nP", "show", "account", "format=account"]).contains("team-a"));
    let dir = slurm_testenv::paths::run_dir().join(&name);
    let wrappers = Instance::attach(&name).unwrap().daemon_wrappers();
    assert_eq!(wrappers.len(), 4);
    let down = Command::new(bin)
        .args(["down", "--name", &name])
        .output()
        .unwrap();
    assert!(down.status.success());
    assert!(wrappers.iter().all(|w| !w.is_alive()));
    assert!(processes_naming(&dir.display().to_string()).is_empty());
    assert!(!dir.exists());
}

/// A process that owns an accounting instance and is killed with SIGKILL leaves no mariadbd or
/// slurmdbd behind: its watchdog stops them with the other daemons and removes the database.
#[test]
fn killed_owner_leaves_no_database_or_slurmdbd() {
    let name = format!("acct-killed-{}", std::process::id());
    let mut child = Command::new(env!("CARGO_BIN_EXE_slurm-testenv"))
        .args(["run", "--name", &name, "--accounting"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("SLURM_REST_URL="), "{first}");
    let dir = slurm_testenv::paths::run_dir().join(&name);
    let wrappers = Instance::attach(&name).unwrap().daemon_wrappers();
    assert_eq!(
        wrappers.len(),
        4,
        "slurmctld, slurmrestd, slurmdbd, mariadbd"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for(
        "the watchdog stops every daemon and removes the folder",
        Duration::from_secs(20),
        || {
            let alive: Vec<i32> = wrappers
                .iter()
                .filter(|w| w.is_alive())
                .map(|w| w.pid)
                .collect();
            // (The watchdog itself names the folder until it exits, right after removing it.)
            let left = processes_naming(&dir.display().to_string());
            (!alive.is_empty() || dir.exists() || !left.is_empty())
                .then(|| format!("alive {alive:?}, processes {left:?}"))
        },
    );
}
