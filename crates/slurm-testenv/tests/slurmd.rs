//! slurm-testenv's slurmd-run (hybrid) nodes against the real Slurm it builds: batch work runs,
//! preemption, licenses, a lost slurmd. These tests need root and run in CI.

mod common;

use common::{job_field, submit, wait_for, wait_job_state};
use slurm_testenv::conf::{Partition, Policy, PreemptMode};
use slurm_testenv::{Daemon, Instance, InstanceOptions};
use std::time::Duration;

fn start(slurmd_nodes: u32, nodes: u32, policy: Policy) -> Instance {
    Instance::start(InstanceOptions {
        slurmd_nodes,
        nodes,
        policy,
        ..Default::default()
    })
    .expect("start a Slurm instance with slurmd nodes")
}

fn node_state(inst: &Instance, node: &str) -> String {
    inst.run(&["sinfo", "-h", "-N", "-n", node, "-o", "%T"])
        .unwrap()
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn cmdline(pid: &str) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmd).replace('\0', " ")
}

/// True when `pid` runs inside a sandbox of the instance in `dir` (an ancestor is the `unshare`
/// wrapper naming that folder).
fn in_instance(pid: &str, dir: &str) -> bool {
    let mut pid = pid.to_string();
    for _ in 0..16 {
        if cmdline(&pid).contains(dir) {
            return true;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            return false;
        };
        match rest.split_whitespace().nth(1) {
            Some(ppid) if ppid != "0" && ppid != "1" => pid = ppid.to_string(),
            _ => return false,
        }
    }
    false
}

/// slurmd and slurmstepd processes of the instance in `dir`.
fn slurm_node_processes(dir: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().to_string();
            let cmd = cmdline(&pid);
            ((cmd.starts_with("slurmstepd") || cmd.starts_with("slurmd -D -N node-"))
                && in_instance(&pid, dir))
            .then_some(cmd)
        })
        .collect()
}

#[test]
fn slurmd_nodes_run_batch_jobs_and_srun_beside_external_nodes() {
    let inst = start(2, 1, Policy::default());
    assert_eq!(inst.slurmd_nodes(), ["node-1", "node-2"]);
    let sinfo = inst
        .run(&["sinfo", "-h", "-N", "-o", "%N %T %c %m %f"])
        .unwrap();
    for node in ["node-1", "node-2"] {
        assert!(
            sinfo.contains(&format!("{node} idle 8 16000 slurm-bridge")),
            "{sinfo}"
        );
    }
    let external = inst.run(&["scontrol", "show", "node", "node-3"]).unwrap();
    assert!(
        external.contains("State=IDLE+DYNAMIC_NORM+EXTERNAL"),
        "{external}"
    );

    // A batch job on both slurmd nodes runs a step on each with srun and completes.
    let id = submit(&inst, &["-N", "2", "--wrap", "srun hostname"]);
    wait_job_state(&inst, &id, "COMPLETED", Duration::from_secs(30));
    assert_eq!(job_field(&inst, &id, "NodeList"), "node-[1-2]");
    let out = std::fs::read_to_string(inst.dir().join(format!("work/slurm-{id}.out"))).unwrap();
    assert_eq!(out.lines().count(), 2, "one line per srun task: {out:?}");

    // `sleep` really runs under slurmd: the job is RUNNING until it ends, then COMPLETED.
    let id = submit(&inst, &["--wrap", "sleep 2"]);
    wait_job_state(&inst, &id, "RUNNING", Duration::from_secs(20));
    wait_job_state(&inst, &id, "COMPLETED", Duration::from_secs(30));
    assert_eq!(job_field(&inst, &id, "ExitCode"), "0:0");

    // Dropping the instance stops every slurmd and the job steps they run.
    let long = submit(&inst, &["--wrap", "sleep 300"]);
    wait_job_state(&inst, &long, "RUNNING", Duration::from_secs(20));
    let dir = inst.dir().display().to_string();
    // slurmctld shows the job RUNNING when it sends the launch; slurmd starts the step's
    // slurmstepd a moment later, so wait for it.
    wait_for("a slurmstepd of the job", Duration::from_secs(20), || {
        let running = slurm_node_processes(&dir);
        (!running.iter().any(|c| c.starts_with("slurmstepd"))).then(|| format!("{running:?}"))
    });
    let running = slurm_node_processes(&dir);
    // (A slurmd forks briefly to start a step, so count nodes, not processes.)
    let nodes: std::collections::BTreeSet<&String> =
        running.iter().filter(|c| c.starts_with("slurmd")).collect();
    assert_eq!(nodes.len(), 2, "{running:?}");
    drop(inst);
    let left = slurm_node_processes(&dir);
    assert!(left.is_empty(), "left running: {left:?}");
}

#[test]
fn higher_tier_partition_preempts_and_requeues() {
    let inst = start(
        1,
        0,
        Policy {
            preempt: Some(PreemptMode::Requeue),
            partitions: vec![Partition::new("high", 10)],
            ..Default::default()
        },
    );
    let low = submit(
        &inst,
        &["-p", "slurm-bridge", "--exclusive", "--wrap", "sleep 300"],
    );
    wait_job_state(&inst, &low, "RUNNING", Duration::from_secs(20));
    let high = submit(&inst, &["-p", "high", "--exclusive", "--wrap", "sleep 300"]);
    wait_job_state(&inst, &high, "RUNNING", Duration::from_secs(30));
    // The low job was requeued (pending again, restarted once, held back by Slurm's requeue
    // delay), not cancelled.
    wait_job_state(&inst, &low, "PENDING", Duration::from_secs(30));
    assert_eq!(job_field(&inst, &low, "Restarts"), "1");
    assert_eq!(job_field(&inst, &low, "Reason"), "BeginTime");
}

#[test]
fn licenses_and_core_sharing() {
    let inst = start(
        1,
        0,
        Policy {
            licenses: vec![("lic".into(), 2)],
            def_mem_per_cpu_mb: Some(1000),
            ..Default::default()
        },
    );
    let a = submit(&inst, &["-n", "2", "-L", "lic:1", "--wrap", "sleep 300"]);
    let b = submit(&inst, &["-n", "6", "-L", "lic:1", "--wrap", "sleep 300"]);
    let c = submit(&inst, &["-n", "1", "-L", "lic:1", "--wrap", "sleep 300"]);
    wait_job_state(&inst, &a, "RUNNING", Duration::from_secs(20));
    wait_job_state(&inst, &b, "RUNNING", Duration::from_secs(20));
    // Both share node-1's 8 cores; the third waits for a license, not for cores.
    assert_eq!(job_field(&inst, &a, "NodeList"), "node-1");
    assert_eq!(job_field(&inst, &b, "NodeList"), "node-1");
    wait_for(
        "job c pending for licenses",
        Duration::from_secs(10),
        || {
            let r = job_field(&inst, &c, "Reason");
            (r != "Licenses").then_some(r)
        },
    );
    inst.run(&["scancel", &a]).unwrap();
    wait_job_state(&inst, &c, "RUNNING", Duration::from_secs(30));
}

#[test]
fn a_killed_slurmd_takes_its_node_down_and_a_restart_brings_it_back() {
    let inst = start(2, 0, Policy::default());
    assert!(matches!(
        inst.kill_slurmd("node-9"),
        Ok(()) // an unknown name has nothing to kill
    ));
    let err = inst.start_slurmd("node-9").unwrap_err().to_string();
    assert!(err.contains("node-9") && err.contains("node-1"), "{err}");
    inst.kill_slurmd("node-2").unwrap();
    wait_for("node-2 DOWN", Duration::from_secs(60), || {
        let s = node_state(&inst, "node-2");
        (!s.starts_with("down")).then_some(s)
    });
    assert_eq!(node_state(&inst, "node-1"), "idle");
    inst.start_slurmd("node-2").unwrap();
    assert_eq!(node_state(&inst, "node-2"), "idle");
}

#[test]
fn slurmctld_restarts_with_its_state_and_daemons_pause_and_resume() {
    let inst = start(1, 1, Policy::default());
    let id = submit(&inst, &["--mem=100", "--wrap", "sleep 300"]);
    wait_job_state(&inst, &id, "RUNNING", Duration::from_secs(20));

    // A restart of slurmctld keeps the running job and the dynamic external node.
    inst.restart(&Daemon::Slurmctld).unwrap();
    assert_eq!(job_field(&inst, &id, "JobState"), "RUNNING");
    let nodes = inst.run(&["sinfo", "-h", "-N", "-o", "%N"]).unwrap();
    assert!(nodes.contains("node-2"), "{nodes}");
    let next = submit(&inst, &["--mem=100", "--wrap", "true"]);
    wait_job_state(&inst, &next, "COMPLETED", Duration::from_secs(30));

    // A paused slurmctld answers nothing; resumed, it does again.
    inst.pause(&Daemon::Slurmctld).unwrap();
    let out = inst.exec(&["timeout", "3", "scontrol", "ping"]).unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("is UP"),
        "a paused slurmctld answered: {out:?}"
    );
    inst.resume(&Daemon::Slurmctld).unwrap();
    wait_for("slurmctld UP again", Duration::from_secs(30), || {
        let out = inst.exec(&["scontrol", "ping"]).unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (!text.contains("is UP")).then_some(text)
    });

    // slurmrestd and slurmd restart too; an unknown daemon is a clear error.
    inst.restart(&Daemon::Slurmrestd).unwrap();
    inst.restart(&Daemon::Slurmd("node-1".into())).unwrap();
    let err = inst.pause(&Daemon::Slurmd("node-7".into())).unwrap_err();
    assert!(err.to_string().contains("node-7"), "{err}");
    assert!("slurmd:".parse::<Daemon>().is_err());
    assert_eq!(
        "slurmd:node-1".parse::<Daemon>(),
        Ok(Daemon::Slurmd("node-1".into()))
    );
}
