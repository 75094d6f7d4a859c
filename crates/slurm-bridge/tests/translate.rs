//! `slurm-bridge translate` run as a process on the fixtures in tests/fixtures/translate.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fixture(name: &str) -> String {
    let p: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "fixtures",
        "translate",
        name,
    ]
    .iter()
    .collect();
    p.display().to_string()
}

fn translate(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"));
    cmd.arg("translate")
        .args(args)
        .arg("--config")
        .arg(fixture("config.yaml"));
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run slurm-bridge");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    } else {
        drop(child.stdin.take());
    }
    child.wait_with_output().unwrap()
}

/// Run on fixture files; expect success; return the JSON objects printed.
fn groups(files: &[&str]) -> Vec<Value> {
    let mut args = Vec::new();
    let paths: Vec<String> = files.iter().map(|f| fixture(f)).collect();
    for p in &paths {
        args.push("-f");
        args.push(p.as_str());
    }
    let out = translate(&args, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "translate {files:?} failed: {stderr}");
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .map(|v| v.unwrap())
        .collect()
}

fn job(g: &Value) -> &Value {
    &g["job"]
}

fn assert_common(g: &Value) {
    let j = job(g);
    assert_eq!(j["flags"], serde_json::json!(["EXTERNAL_JOB"]));
    assert_eq!(j["current_working_directory"], "/tmp");
    assert_eq!(j["mcs_label"], "kubernetes");
    let comment: Value = serde_json::from_str(j["admin_comment"].as_str().unwrap()).unwrap();
    assert_eq!(
        comment["pods"], g["pods"],
        "admin_comment lists the group's pods"
    );
    assert_eq!(comment["group"], g["group"]);
    assert_eq!(j["nodes"], g["pods"].as_array().unwrap().len().to_string());
}

#[test]
fn bare_pod() {
    let gs = groups(&["bare-pod.yaml"]);
    assert_eq!(gs.len(), 1);
    let g = &gs[0];
    assert_common(g);
    assert_eq!(g["group"], "pod/slurm-bridge/pod-single");
    assert_eq!(g["complete"], true);
    let j = job(g);
    assert_eq!(j["name"], "pod-single");
    assert_eq!(j["partition"], "slurm-bridge");
    assert_eq!(j["cpus_per_task"], 1);
    assert_eq!(
        j["memory_per_node"],
        serde_json::json!({"set": true, "infinite": false, "number": 100})
    );
    assert_eq!(j["time_limit"]["number"], 1);
    assert_eq!(j["maximum_nodes"], 1);
    assert_eq!(j["tasks_per_node"], 1);
    assert_eq!(j["shared"], serde_json::json!(["none"]));
}

#[test]
fn single_job() {
    let gs = groups(&["job-single.yaml"]);
    assert_eq!(gs.len(), 1);
    assert_common(&gs[0]);
    assert!(
        gs[0]["group"]
            .as_str()
            .unwrap()
            .starts_with("job/slurm-bridge/job-sleep-single/job-sleep-single-")
    );
    let j = job(&gs[0]);
    assert_eq!(
        (j["account"].as_str(), j["qos"].as_str()),
        (Some("physics"), Some("normal"))
    );
    assert_eq!(
        j["time_limit"]["number"], 10,
        "activeDeadlineSeconds 600 = 10 minutes"
    );
    assert_eq!(j["minimum_nodes"], 1);
    assert_eq!(j["memory_per_node"]["number"], 256);
    assert_eq!(
        j["name"], "slurm-bridge/job-sleep-single",
        "no job-name annotation: the Job's namespace/name"
    );
}

#[test]
fn large_job_is_one_external_job_per_pod() {
    let gs = groups(&["job-large.yaml"]);
    assert_eq!(gs.len(), 8);
    for (i, g) in gs.iter().enumerate() {
        assert_common(g);
        let pod = g["pods"][0].as_str().unwrap();
        assert!(
            pod.starts_with(&format!("slurm-bridge/job-sleep-large-{i}-")),
            "{pod}"
        );
        assert_eq!(job(g)["shared"], serde_json::json!([]), "exclusive=false");
        assert_eq!(job(g)["cpus_per_task"], 2);
        assert_eq!(job(g)["name"], "slurm-bridge/job-sleep-large");
    }
}

#[test]
fn single_jobset() {
    let gs = groups(&["jobset-single.yaml"]);
    assert_eq!(gs.len(), 1);
    assert_common(&gs[0]);
    assert!(
        gs[0]["group"]
            .as_str()
            .unwrap()
            .starts_with("job/slurm-bridge/jobset-single-worker-0/")
    );
    assert_eq!(job(&gs[0])["partition"], "debug");
    assert_eq!(job(&gs[0])["time_limit"]["number"], 5);
    assert_eq!(
        job(&gs[0])["name"],
        "slurm-bridge/jobset-single",
        "no job-name annotation: the JobSet's namespace/name"
    );
}

#[test]
fn large_jobset() {
    let gs = groups(&["jobset-large.yaml"]);
    assert_eq!(gs.len(), 9);
    let workers: Vec<&Value> = gs
        .iter()
        .filter(|g| g["group"].as_str().unwrap().contains("-workers-"))
        .collect();
    assert_eq!(workers.len(), 8);
    for g in &gs {
        assert_common(g);
        assert_eq!(job(g)["account"], "ml");
    }
    for g in workers {
        assert_eq!(job(g)["tres_per_node"], "gres/gpu=1");
        assert_eq!(job(g)["memory_per_node"]["number"], 8192);
    }
}

#[test]
fn coscheduling_podgroup() {
    let gs = groups(&["coscheduling.yaml"]);
    assert_eq!(gs.len(), 1);
    let g = &gs[0];
    assert_common(g);
    assert_eq!(g["group"], "coscheduling/slurm-bridge/pg-mpi");
    assert_eq!(
        g["pods"],
        serde_json::json!([
            "slurm-bridge/mpi-0",
            "slurm-bridge/mpi-1",
            "slurm-bridge/mpi-2"
        ])
    );
    let j = job(g);
    assert_eq!(
        (j["minimum_nodes"].as_u64(), j["maximum_nodes"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(j["name"], "mpi");
    assert_eq!(j["cpus_per_task"], 2);
    assert_eq!(j["memory_per_node"]["number"], 2048);
}

#[test]
fn incomplete_gang_is_reported_not_dropped() {
    let out = translate(&["-f", &fixture("coscheduling-incomplete.yaml")], None);
    assert!(out.status.success());
    let gs: Vec<Value> = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .map(|v| v.unwrap())
        .collect();
    assert_eq!(gs.len(), 1);
    assert_eq!(gs[0]["complete"], false);
    assert_eq!(gs[0]["incomplete"]["ready"], 2);
    assert_eq!(gs[0]["incomplete"]["required"], 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("coscheduling/slurm-bridge/pg-short is not complete"),
        "{stderr}"
    );
}

#[test]
fn workload_podgroup_gang() {
    let gs = groups(&["workload-podgroup.yaml"]);
    assert_eq!(gs.len(), 1);
    let g = &gs[0];
    assert_common(g);
    assert_eq!(g["group"], "podgroup/slurm-bridge/training-workers");
    let j = job(g);
    assert_eq!(j["time_limit"]["number"], 30, "Workload wins over PodGroup");
    assert_eq!(j["qos"], "high", "PodGroup keys combine");
    assert_eq!(j["name"], "training-workers");
    assert_eq!(j["tres_per_node"], "gres/gpu=2");
    assert_eq!(
        (j["minimum_nodes"].as_u64(), j["maximum_nodes"].as_u64()),
        (Some(2), Some(2))
    );
}

#[test]
fn leaderworkerset_one_job_per_group() {
    let gs = groups(&["lws.yaml"]);
    assert_eq!(gs.len(), 2);
    for (i, g) in gs.iter().enumerate() {
        assert_common(g);
        assert_eq!(g["group"], format!("lws/slurm-bridge/vllm/{i}"));
        assert_eq!(
            g["pods"],
            serde_json::json!([
                format!("slurm-bridge/vllm-{i}"),
                format!("slurm-bridge/vllm-{i}-1"),
                format!("slurm-bridge/vllm-{i}-2")
            ])
        );
        let j = job(g);
        assert_eq!(j["name"], format!("vllm-{i}"));
        assert_eq!(j["reservation"], "inference");
        assert_eq!(j["tres_per_node"], "gres/gpu=1");
        assert_eq!(
            (j["minimum_nodes"].as_u64(), j["maximum_nodes"].as_u64()),
            (Some(3), Some(3))
        );
    }
}

#[test]
fn gpus_and_dra_extended_resources() {
    let gs = groups(&["gpu.yaml"]);
    assert_eq!(gs.len(), 2);
    let by_group = |k: &str| gs.iter().find(|g| g["group"] == k).unwrap();
    assert_eq!(
        job(by_group("pod/slurm-bridge/cuda"))["tres_per_node"],
        "gres/gpu=2"
    );
    assert_eq!(
        job(by_group("pod/slurm-bridge/cuda"))["name"],
        "slurm-bridge/cuda",
        "no job-name annotation: the bare pod's namespace/name"
    );
    let dra = job(by_group("pod/slurm-bridge/dra-gpu"));
    assert_eq!(dra["tres_per_node"], "gres/gpu:gpu.example.com=1");
    assert_eq!(dra["cpus_per_task"], 4, "dra.cpu counts as CPUs");
    assert_eq!(
        dra["memory_per_node"]["number"],
        2048 + 64,
        "sidecar memory adds up"
    );
}

#[test]
fn deployment_pods() {
    let gs = groups(&["deployment.yaml"]);
    assert_eq!(gs.len(), 2);
    for g in &gs {
        assert_common(g);
        assert_eq!(
            job(g)["wckey"],
            "web",
            "annotations of the controller, not of the pod"
        );
        assert_eq!(job(g)["cpus_per_task"], 1);
        assert_eq!(
            job(g)["name"],
            "slurm-bridge/web",
            "no job-name annotation: the root (the Deployment)"
        );
    }
}

#[test]
fn several_files_and_stdin() {
    let text = std::fs::read_to_string(fixture("bare-pod.yaml")).unwrap();
    let out = translate(&["-f", "-", "-f", &fixture("gpu.yaml")], Some(&text));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .count();
    assert_eq!(n, 3);
}

#[test]
fn yaml_output_matches_json_output() {
    let json = groups(&["coscheduling.yaml", "lws.yaml"]);
    let out = translate(
        &[
            "-f",
            &fixture("coscheduling.yaml"),
            "-f",
            &fixture("lws.yaml"),
            "-o",
            "yaml",
        ],
        None,
    );
    assert!(out.status.success());
    let yaml: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(yaml, json);
}

#[test]
fn invalid_inputs_fail_naming_object_and_problem() {
    let cases = [
        (
            "invalid-annotation.yaml",
            vec![
                "pod slurm-bridge/bad",
                "slurmjob.slinky.slurm.net/timelimit",
                "\"1h\"",
                "slurmjob.slinky.slurm.net/exclusive",
            ],
        ),
        (
            "unknown-owner.yaml",
            vec![
                "pod slurm-bridge/orphan",
                "Job slurm-bridge/missing-job",
                "not found",
            ],
        ),
        ("malformed.yaml", vec!["malformed.yaml", "not valid YAML"]),
    ];
    for (file, needles) in cases {
        let out = translate(&["-f", &fixture(file)], None);
        assert!(!out.status.success(), "{file} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for n in needles {
            assert!(stderr.contains(n), "{file}: {n:?} not in {stderr}");
        }
    }
    let out = translate(&["-f", &fixture("invalid-annotation.yaml")], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    assert_eq!(
        error.matches("slurm-bridge/bad").count(),
        1,
        "the pod is named once: {error}"
    );
    let out = translate(&["-f", "/nonexistent/x.yaml"], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read /nonexistent/x.yaml"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("error:").count(),
        1,
        "one error, no \"no pods found\" after it: {stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
        .args([
            "--config",
            &fixture("bad-config.yaml"),
            "translate",
            "-f",
            &fixture("bare-pod.yaml"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a bad config fails");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("slurmRestApi") && stderr.contains("expected"),
        "{stderr}"
    );
}

#[test]
fn a_tenant_decides_what_the_job_gets_and_refusals_are_errors() {
    let dir = std::env::temp_dir().join(format!("translate-tenants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |tenants: &str| {
        let cfg = dir.join("config.yaml");
        std::fs::write(
            &cfg,
            format!("schedulerName: slurm-bridge-scheduler\npartition: slurm-bridge\n{tenants}"),
        )
        .unwrap();
        Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
            .args(["translate", "-f", &fixture("job-single.yaml"), "--config"])
            .arg(&cfg)
            .output()
            .unwrap()
    };
    // The Job asks for account physics and QoS normal: within this tenant, which adds its user.
    let out = run(
        "tenants: [{name: physics, namespaces: [slurm-bridge], account: physics, user: phys, qos: [normal, high]}]\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let g: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(job(&g)["account"], "physics");
    assert_eq!(job(&g)["qos"], "normal");
    assert_eq!(job(&g)["user_id"], "phys");
    // Another account: refused, named, nothing printed for the group.
    let out = run("tenants: [{name: bio, namespaces: [slurm-bridge], account: bio}]\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("error: group job/slurm-bridge/job-sleep-single")
            && stderr.contains(": in namespace \"slurm-bridge\" (tenant \"bio\") annotation slurmjob.slinky.slurm.net/account=\"physics\" is not allowed (accepted: only \"bio\", the tenant's own)")
            && stderr.contains("the scheduler would not submit it"),
        "{stderr}"
    );
    // No tenants at all: the implicit tenant refuses every policy key.
    let out = run("");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("(tenant \"(default)\")"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
