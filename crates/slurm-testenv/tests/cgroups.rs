//! slurmd confining job steps with Slurm's own cgroups (`--cgroups`, `InstanceOptions::cgroups`)
//! against the real Slurm slurm-testenv builds: CPUs and memory are enforced, and nothing of an
//! instance stays in the host's cgroup hierarchies. These tests need root and cgroup v1.

mod common;

use common::{job_field, submit, wait_for, wait_job_state};
use slurm_testenv::cpus::{HostCpus, cpus_allowed_list};
use slurm_testenv::{Instance, InstanceOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn start(slurmd_nodes: u32) -> Instance {
    Instance::start(InstanceOptions {
        slurmd_nodes,
        cgroups: true,
        ..Default::default()
    })
    .expect("start a Slurm instance whose slurmd use cgroups")
}

/// The `Cpus_allowed_list` a step wrote to `work/<file>`, once it has.
fn wait_cpus_allowed(inst: &Instance, file: &str) -> Vec<u32> {
    let path = inst.dir().join("work").join(file);
    let mut cpus = None;
    wait_for(&format!("{file} written"), Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        cpus = cpus_allowed_list(&text);
        cpus.is_none().then_some(text)
    });
    cpus.unwrap()
}

/// A batch script writing the batch step's and an srun step's `Cpus_allowed_list` to
/// `batch-<job>` and `srun-<job>` in `work/`, then sleeping until cancelled.
const SHOW_CPUS: &str = "grep Cpus_allowed_list /proc/self/status > batch-$SLURM_JOB_ID.tmp && \
     mv batch-$SLURM_JOB_ID.tmp batch-$SLURM_JOB_ID; \
     srun grep Cpus_allowed_list /proc/self/status > srun-$SLURM_JOB_ID.tmp && \
     mv srun-$SLURM_JOB_ID.tmp srun-$SLURM_JOB_ID; sleep 300";

/// The machine CPUs job `id` got on its one node.
fn job_cpus(inst: &Instance, id: &str) -> Vec<u32> {
    let ids = inst.job_cpu_ids(id).unwrap();
    assert_eq!(ids.len(), 1, "job {id} on one node: {ids:?}");
    ids[0].1.clone()
}

fn existing(dirs: &[PathBuf]) -> Vec<&PathBuf> {
    dirs.iter().filter(|d| d.exists()).collect()
}

#[test]
fn one_node_owns_the_host_cpus_and_each_step_runs_on_its_job_cpus() {
    let inst = start(1);
    let host = HostCpus::detect().unwrap();
    assert!(inst.cgroups());
    // The node is the host's real CPUs, all of them usable by jobs (no CpuSpecList).
    let mut all = host.machine.clone();
    all.sort_unstable();
    assert_eq!(inst.machine_cpus("node-1"), Some(all));
    assert_eq!(inst.machine_cpus("node-9"), None);
    let node = inst.run(&["scontrol", "show", "node", "node-1"]).unwrap();
    assert!(
        node.contains(&format!("CPUTot={} ", host.count()))
            && node.contains(&format!("CPUEfctv={} ", host.count())),
        "{node}"
    );
    let conf = std::fs::read_to_string(inst.slurm_conf()).unwrap();
    assert!(!conf.contains("CpuSpecList"), "{conf}");

    // Two 1-CPU jobs at once (DefMemPerCPU lets them share the node) get disjoint CPUs, and
    // each of their steps (batch and srun) may run on its job's CPUs only.
    let a = submit(&inst, &["-n", "1", "--wrap", SHOW_CPUS]);
    let b = submit(&inst, &["-n", "1", "--wrap", SHOW_CPUS]);
    wait_job_state(&inst, &a, "RUNNING", Duration::from_secs(20));
    wait_job_state(&inst, &b, "RUNNING", Duration::from_secs(20));
    let (cpus_a, cpus_b) = (job_cpus(&inst, &a), job_cpus(&inst, &b));
    assert_eq!(cpus_a.len(), host.threads_per_core as usize, "{cpus_a:?}");
    assert!(
        cpus_a.iter().all(|c| !cpus_b.contains(c)),
        "CPU_IDs overlap: {cpus_a:?} {cpus_b:?}"
    );
    for (id, cpus) in [(&a, &cpus_a), (&b, &cpus_b)] {
        assert_eq!(&wait_cpus_allowed(&inst, &format!("batch-{id}")), cpus);
        assert_eq!(&wait_cpus_allowed(&inst, &format!("srun-{id}")), cpus);
    }
    // Both still ran side by side.
    assert_eq!(job_field(&inst, &a, "JobState"), "RUNNING");
    assert_eq!(job_field(&inst, &b, "JobState"), "RUNNING");

    // The steps live under the instance's own cgroup folders.
    let dirs = inst.cgroup_dirs();
    let job_dir = dirs[0].join(format!("node-1/slurm_node-1/uid_0/job_{a}/step_batch"));
    assert!(job_dir.is_dir(), "{}", job_dir.display());
    drop(inst);
    assert!(existing(&dirs).is_empty(), "left: {:?}", existing(&dirs));
}

#[test]
fn a_batch_step_over_its_memory_ends_out_of_memory_beside_a_job_that_completes() {
    let inst = start(1);
    // The hog marks that it started, then reads 200 MB into one buffer with 50 MB allowed.
    let hog = submit(
        &inst,
        &[
            "-n",
            "1",
            "--mem=50",
            "--wrap",
            "touch hog-started; dd if=/dev/zero of=/dev/null bs=200M count=1",
        ],
    );
    // Its neighbour runs until the hog has started, then ends well.
    let calm = submit(
        &inst,
        &[
            "-n",
            "1",
            "--mem=50",
            "--wrap",
            "while [ ! -e hog-started ]; do sleep 0.1; done; echo calm",
        ],
    );
    wait_job_state(&inst, &hog, "OUT_OF_MEMORY", Duration::from_secs(60));
    wait_job_state(&inst, &calm, "COMPLETED", Duration::from_secs(60));
    assert_eq!(job_field(&inst, &calm, "ExitCode"), "0:0");
    assert_eq!(job_field(&inst, &hog, "NodeList"), "node-1");
    assert_eq!(job_field(&inst, &calm, "NodeList"), "node-1");
    let log = std::fs::read_to_string(inst.slurmd_log("node-1")).unwrap();
    assert!(
        log.contains(&format!("oom_kill event in StepId={hog}.batch")),
        "{log}"
    );
}

/// `up --slurmd-nodes 2 --cgroups`: each node gets a share of the host's CPUs (by
/// `CpuSpecList`), its jobs run there; a killed slurmd leaves no `slurm_<node>` folder, `down`
/// no folder of the instance, and the sweep removes folders whose instance is gone.
#[test]
fn cli_two_nodes_split_the_cpus_and_down_leaves_no_cgroup() {
    let bin = env!("CARGO_BIN_EXE_slurm-testenv");
    let name = format!("cg-cli-{}", std::process::id());
    let up = Command::new(bin)
        .args(["up", "--name", &name, "--slurmd-nodes", "2", "--cgroups"])
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let inst = Instance::attach(&name).unwrap();
    let host = HostCpus::detect().unwrap();
    let one = inst.machine_cpus("node-1").unwrap();
    let two = inst.machine_cpus("node-2").unwrap();
    assert!(!one.is_empty() && !two.is_empty());
    if host.count() / host.threads_per_core >= 2 {
        assert!(one.iter().all(|c| !two.contains(c)), "{one:?} {two:?}");
    }
    for (node, cpus) in [("node-1", &one), ("node-2", &two)] {
        let id = submit(&inst, &["-w", node, "-n", "1", "--wrap", SHOW_CPUS]);
        wait_job_state(&inst, &id, "RUNNING", Duration::from_secs(20));
        let allowed = wait_cpus_allowed(&inst, &format!("batch-{id}"));
        assert_eq!(job_cpus(&inst, &id), allowed);
        assert!(
            allowed.iter().all(|c| cpus.contains(c)),
            "{allowed:?} {cpus:?}"
        );
    }

    // A killed slurmd (with a running job) leaves nothing in its node's folders.
    let dirs = inst.cgroup_dirs();
    assert!(dirs.iter().all(|d| d.join("node-1/slurm_node-1").is_dir()));
    inst.kill_slurmd("node-1").unwrap();
    assert!(dirs.iter().all(|d| !d.join("node-1").exists()));
    assert!(dirs.iter().all(|d| d.join("node-2/slurm_node-2").is_dir()));

    let down = Command::new(bin)
        .args(["down", "--name", &name])
        .output()
        .unwrap();
    assert!(down.status.success());
    assert!(existing(&dirs).is_empty(), "left: {:?}", existing(&dirs));

    // Folders of an instance whose own folder is gone are swept.
    let orphan = dirs[0].with_file_name(format!("cg-orphan-{}", std::process::id()));
    std::fs::create_dir_all(orphan.join("node-1")).unwrap();
    slurm_testenv::sweep_stale();
    assert!(!orphan.exists());
}

/// A process owning a `--cgroups` instance killed with SIGKILL: its watchdog removes the
/// instance's cgroup folders (a running job's included) with the rest.
#[test]
fn killed_owner_leaves_no_cgroup() {
    let name = format!("cg-killed-{}", std::process::id());
    let mut child = Command::new(env!("CARGO_BIN_EXE_slurm-testenv"))
        .args(["run", "--name", &name, "--slurmd-nodes", "1", "--cgroups"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("SLURM_REST_URL="), "{first:?}");
    let inst = Instance::attach(&name).unwrap();
    let id = submit(&inst, &["--wrap", "sleep 300"]);
    wait_job_state(&inst, &id, "RUNNING", Duration::from_secs(20));
    let dirs = inst.cgroup_dirs();
    let step = dirs[2].join(format!("node-1/slurm_node-1/uid_0/job_{id}"));
    wait_for("the job's freezer folder", Duration::from_secs(20), || {
        (!step.is_dir()).then(|| step.display().to_string())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for("the instance removed", Duration::from_secs(30), || {
        let left = existing(&dirs);
        (!left.is_empty() || inst.dir().exists()).then(|| format!("{left:?}"))
    });
    assert!(!Path::new(&inst.dir()).exists());
}

#[test]
fn cgroups_need_slurmd_nodes() {
    let err = Instance::start(InstanceOptions {
        cgroups: true,
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(err, slurm_testenv::Error::NeedsSlurmdNodes { .. }),
        "{err}"
    );
}
