//! Resources in translation: CPU, memory and gres from the pods, pods per node, device classes,
//! unknown annotation keys, job ids.

use super::podgroup::podgroup;
use super::*;

#[test]
fn resources_feed_cpu_memory_and_gres_and_annotations_win() {
    let spec = "    resources: {limits: {cpu: 1500m, memory: 1Gi, deviceclass.resource.kubernetes.io/gpu.nvidia.com: \"2\"}}\n";
    let t = run(&reader(&pod("p", "", spec)), "p").unwrap();
    assert_eq!(t.ir.job.cpus_per_task, Some(2));
    assert_eq!(t.ir.job.mem_per_node_mib, Some(1024));
    assert_eq!(t.ir.job.gres.as_deref(), Some("gres/gpu:gpu.nvidia.com=2"));
    let t = run(
        &reader(&pod(
            "p",
            &annotate(&[(key::CPU_PER_TASK, "8"), (key::GRES, "gres/gpu=1")]),
            spec,
        )),
        "p",
    )
    .unwrap();
    assert_eq!(t.ir.job.cpus_per_task, Some(8));
    assert_eq!(t.ir.job.gres.as_deref(), Some("gres/gpu=1"));
}

#[test]
fn pods_per_node_packs_the_group_and_scales_per_node_resources() {
    let member = |name: &str| {
        pod(
            name,
            "",
            "    resources: {limits: {cpu: \"2\", memory: 1Gi, deviceclass.resource.kubernetes.io/gpu.example.com: \"2\"}}\n  schedulingGroup: {podGroupName: pg}\n",
        )
    };
    let group = |ann: &[(&str, &str)]| {
        member("a")
            + &member("b")
            + &member("c")
            + &podgroup("pg", &annotate(ann), "{gang: {minCount: 3}}", None)
    };
    let t = run(&reader(&group(&[(key::PODS_PER_NODE, "2")])), "a").unwrap();
    let j = &t.ir.job;
    // 3 pods, 2 per node: 2 nodes of 2 tasks, 2 CPUs per task, per-node memory and GPUs doubled.
    assert_eq!(
        (j.min_nodes, j.max_nodes, j.tasks_per_node),
        (Some(2), Some(2), Some(2))
    );
    assert_eq!(j.cpus_per_task, Some(2));
    assert_eq!(j.mem_per_node_mib, Some(2048));
    assert_eq!(j.gres.as_deref(), Some("gres/gpu:gpu.example.com=4"));
    assert_eq!(t.ir.node_count(), 2);
    assert_eq!(t.nodes_needed(), 2);
    let desc = t.to_job_desc(&Default::default(), &Default::default(), &[]);
    assert_eq!(desc.nodes.as_deref(), Some("2"));
    // A pod the allocation leaves out gets a job for one pod: one task, its own memory and GPUs.
    let alone = t.alone(&t.ir.pods[2]);
    let j = &alone.ir.job;
    assert_eq!(
        (j.min_nodes, j.max_nodes, j.tasks_per_node),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(j.mem_per_node_mib, Some(1024));
    assert_eq!(j.gres.as_deref(), Some("gres/gpu:gpu.example.com=2"));
    assert_eq!(alone.ir.node_count(), 1);
    // More per node than the group has: all on one node, scaled by the group's size only.
    let t = run(&reader(&group(&[(key::PODS_PER_NODE, "8")])), "a").unwrap();
    let j = &t.ir.job;
    assert_eq!(
        (j.min_nodes, j.max_nodes, j.tasks_per_node),
        (Some(1), Some(1), Some(3))
    );
    assert_eq!(j.mem_per_node_mib, Some(3072));
    assert_eq!(t.ir.node_count(), 1);
    // Values the annotations give are per node already and stay as given.
    let t = run(
        &reader(&group(&[
            (key::PODS_PER_NODE, "3"),
            (key::MEM_PER_NODE, "5Gi"),
            (key::GRES, "gres/gpu=1"),
            (key::MAX_NODES, "2"),
        ])),
        "a",
    )
    .unwrap();
    let j = &t.ir.job;
    assert_eq!(
        (j.min_nodes, j.max_nodes, j.tasks_per_node),
        (Some(1), Some(2), Some(3))
    );
    assert_eq!(j.mem_per_node_mib, Some(5120));
    assert_eq!(j.gres.as_deref(), Some("gres/gpu=1"));
    assert_eq!(t.ir.node_count(), 1);
    // A bad count names the key and what is accepted.
    let e = run(&reader(&group(&[(key::PODS_PER_NODE, "0")])), "a")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pods-per-node") && e.contains("a whole number of pods per node"),
        "{e}"
    );
}

#[test]
fn unsupported_device_class_names_the_pod() {
    let spec =
        "    resources: {limits: {deviceclass.resource.kubernetes.io/fpga.acme.com: \"1\"}}\n";
    let e = run(&reader(&pod("p", "", spec)), "p")
        .unwrap_err()
        .to_string();
    assert!(e.contains("pod ns/p") && e.contains("fpga.acme.com"), "{e}");
}

#[test]
fn unknown_annotation_keys_are_warnings() {
    let t = run(
        &reader(&pod(
            "p",
            &annotate(&[("slurmjob.slinky.slurm.net/timelimt", "5")]),
            "",
        )),
        "p",
    )
    .unwrap();
    assert_eq!(t.warnings.len(), 1);
    assert!(t.warnings[0].contains("timelimt"));
}

#[test]
fn job_ids_parse_as_u32_without_wrapping() {
    use crate::workload::kinds::parse_job_id;
    assert_eq!(parse_job_id("1234"), Some(1234));
    assert_eq!(parse_job_id("3000000000"), Some(3_000_000_000)); // quirk 16 fixed
    assert_eq!(parse_job_id("-1234"), None);
    assert_eq!(parse_job_id("asdf"), None);
    assert_eq!(parse_job_id(""), None);
    assert_eq!(parse_job_id("0"), None);
}
