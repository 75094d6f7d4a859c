//! IR → slurmrestd v0.0.44 job description (reference §5.9.3), the body of
//! `POST /slurm/v0.0.44/job/submit` (wrapped in `{"job": ...}`) and of job updates.

use slurm_rest::models::{JobDescMsg, JobFlag, NoVal, Shared};

use super::Translation;
use super::admin_comment::AdminComment;
use super::ir::{SlurmJobIr, pod_key};
use crate::config::{Config, PriorityMapping};
use crate::tenancy::{Asked, Granted};

/// Working directory of every external job (slurmctld wants one; nothing runs there).
pub const WORKING_DIRECTORY: &str = "/tmp";

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The admin_comment of the group's external job: sorted pods, their uids, the group key, and
/// the config's `clusterName`.
pub fn admin_comment(ir: &SlurmJobIr, group_key: &str, cfg: &Config) -> AdminComment {
    AdminComment::new(
        Some(group_key.to_string()),
        ir.pods.iter().map(|p| (pod_key(p), p.metadata.uid.clone())),
    )
    .with_cluster(Some(&cfg.cluster_name))
}

/// The job name when neither the `job-name` annotation nor the kind (PodGroup, LeaderWorkerSet)
/// gives one: the scheduling root's `namespace/name` (the bare pod, the Job, the JobSet, the
/// coscheduling PodGroup, the Deployment, ...), so `squeue` never shows `(null)`.
pub fn default_job_name(ir: &SlurmJobIr) -> String {
    format!("{}/{}", ir.root.namespace, ir.root.name)
}

/// The config's Slurm settings for the group's PriorityClass, with the class's name: that of its
/// pod with the highest `spec.priority` (the first such pod in name order on a tie), when the
/// config maps the class.
pub fn priority_mapping<'a>(
    ir: &'a SlurmJobIr,
    cfg: &'a Config,
) -> Option<(&'a str, &'a PriorityMapping)> {
    if cfg.priority_classes.is_empty() {
        return None;
    }
    let top = ir
        .pods
        .iter()
        .filter_map(|p| p.spec.as_ref())
        .filter_map(|s| Some((s.priority.unwrap_or(0), s.priority_class_name.as_deref()?)))
        .reduce(|best, next| if next.0 > best.0 { next } else { best })?;
    cfg.priority_class(top.1).map(|m| (top.1, m))
}

/// What the group's authors asked of the policy fields: its annotations, and where they give
/// none its mapped PriorityClass's QoS, partition and priority.
pub fn asked(ir: &SlurmJobIr, cfg: &Config) -> Asked {
    Asked::new(&ir.job, priority_mapping(ir, cfg))
}

/// Build the job description.
///
/// Always: `EXTERNAL_JOB`, the admin_comment, `/tmp` as working directory, a name (else
/// [`default_job_name`]), `nodes` = the number of pods (over `pods-per-node`), `shared` (`["none"]` unless `exclusive=false`). From the config: the
/// default partition and `mcs_label` (each left out when empty, so Slurm's defaults
/// apply). `excluded_nodes` keeps Slurm off nodes Kubernetes cannot use for these pods.
/// Unset IR fields are left out. Who the job runs as, its account, QoS, partition, priority,
/// reservation and wckey are `granted`: the tenant's decision on what the authors [`asked`]
/// ([`crate::tenancy`]), the partition falling back to the config's.
pub fn build(
    ir: &SlurmJobIr,
    group_key: &str,
    cfg: &Config,
    granted: &Granted,
    excluded_nodes: &[String],
) -> JobDescMsg {
    let j = &ir.job;
    JobDescMsg {
        flags: Some(vec![JobFlag::ExternalJob]),
        admin_comment: Some(admin_comment(ir, group_key, cfg).encode()),
        current_working_directory: Some(WORKING_DIRECTORY.to_string()),
        name: Some(j.job_name.clone().unwrap_or_else(|| default_job_name(ir))),
        partition: granted
            .partition
            .clone()
            .or_else(|| non_empty(&cfg.partition)),
        mcs_label: non_empty(&cfg.mcs_label),
        account: granted.account.clone(),
        qos: granted.qos.clone(),
        reservation: granted.reservation.clone(),
        constraints: j.constraints.clone(),
        licenses: j.licenses.clone(),
        wckey: granted.wckey.clone(),
        user_id: granted.user.clone(),
        group_id: granted.group.clone(),
        nodes: Some(ir.node_count().to_string()),
        minimum_nodes: j.min_nodes,
        maximum_nodes: j.max_nodes,
        tasks_per_node: j.tasks_per_node,
        cpus_per_task: j.cpus_per_task,
        memory_per_node: j.mem_per_node_mib.map(NoVal::Set),
        // Pods that set no memory would otherwise get the node's whole memory from Slurm.
        memory_per_cpu: match j.mem_per_node_mib {
            None => cfg.default_mem_per_cpu_mib.map(NoVal::Set),
            Some(_) => None,
        },
        tres_per_node: j.gres.clone(),
        time_limit: j.time_limit_minutes.map(NoVal::Set),
        priority: granted.priority.map(NoVal::Set),
        shared: Some(if j.exclusive.unwrap_or(true) {
            vec![Shared::None]
        } else {
            Vec::new()
        }),
        excluded_nodes: (!excluded_nodes.is_empty()).then(|| excluded_nodes.to_vec()),
        ..Default::default()
    }
}

impl Translation {
    /// What this group's authors asked of the policy fields ([`asked`]).
    pub fn asked(&self, cfg: &Config) -> Asked {
        asked(&self.ir, cfg)
    }

    /// The job description for this translation's group, with what its tenant `granted`.
    pub fn to_job_desc(
        &self,
        cfg: &Config,
        granted: &Granted,
        excluded_nodes: &[String],
    ) -> JobDescMsg {
        build(&self.ir, &self.group_key, cfg, granted, excluded_nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::slim_pod::Pod;
    use crate::workload::GangStatus;
    use crate::workload::ir::JobInfo;
    use crate::workload::reader::ObjectRef;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("slurm-bridge".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn cfg() -> Config {
        Config {
            mcs_label: "kubernetes".into(),
            partition: "slurm-bridge".into(),
            ..Default::default()
        }
    }

    #[test]
    fn matches_the_reference_example_with_excluded_nodes() {
        let t = Translation {
            gang_timeout: None,
            group_key: "pod/slurm-bridge/pod-single".into(),
            ir: SlurmJobIr {
                root: ObjectRef::new("v1", "Pod", "slurm-bridge", "pod-single"),
                pods: vec![pod("pod-single")],
                job: JobInfo {
                    cpus_per_task: Some(1),
                    mem_per_node_mib: Some(100),
                    job_name: Some("pod-single".into()),
                    time_limit_minutes: Some(1),
                    tasks_per_node: Some(1),
                    max_nodes: Some(1),
                    ..Default::default()
                },
            },
            gang: GangStatus::Complete,
            warnings: vec![],
        };
        let v = serde_json::to_value(t.to_job_desc(
            &cfg(),
            &Granted::as_asked(&t.asked(&cfg())),
            &["n3".to_string()],
        ))
        .unwrap();
        assert_eq!(
            v,
            json!({
                "admin_comment": "{\"pods\":[\"slurm-bridge/pod-single\"],\"group\":\"pod/slurm-bridge/pod-single\"}",
                "cpus_per_task": 1,
                "current_working_directory": "/tmp",
                "flags": ["EXTERNAL_JOB"],
                "maximum_nodes": 1,
                "mcs_label": "kubernetes",
                "memory_per_node": {"infinite": false, "number": 100, "set": true},
                "name": "pod-single",
                "nodes": "1",
                "excluded_nodes": ["n3"],
                "partition": "slurm-bridge",
                "shared": ["none"],
                "tasks_per_node": 1,
                "time_limit": {"infinite": false, "number": 1, "set": true}
            })
        );
    }

    #[test]
    fn annotation_partition_wins_and_shared_when_not_exclusive() {
        let ir = SlurmJobIr {
            root: ObjectRef::new("v1", "Pod", "ns", "p"),
            pods: vec![pod("b"), pod("a")],
            job: JobInfo {
                partition: Some("debug".into()),
                exclusive: Some(false),
                priority: Some(5),
                ..Default::default()
            },
        };
        let d = build(
            &ir,
            "g",
            &cfg(),
            &Granted::as_asked(&asked(&ir, &cfg())),
            &[],
        );
        assert_eq!(d.partition.as_deref(), Some("debug"));
        assert_eq!(d.name.as_deref(), Some("ns/p"));
        assert_eq!(d.shared, Some(vec![]));
        assert_eq!(d.nodes.as_deref(), Some("2"));
        assert_eq!(d.priority, Some(NoVal::Set(5)));
        assert_eq!(d.excluded_nodes, None);
        assert!(d.required_nodes.is_none());
    }

    #[test]
    fn the_default_memory_per_cpu_applies_only_when_the_pods_set_no_memory() {
        let cfg = Config {
            default_mem_per_cpu_mib: Some(512),
            ..cfg()
        };
        let ir = |mem: Option<u64>| SlurmJobIr {
            root: ObjectRef::new("v1", "Pod", "ns", "p"),
            pods: vec![pod("p")],
            job: JobInfo {
                cpus_per_task: Some(2),
                mem_per_node_mib: mem,
                ..Default::default()
            },
        };
        let desc = |ir: &SlurmJobIr, cfg: &Config| {
            build(ir, "g", cfg, &Granted::as_asked(&asked(ir, cfg)), &[])
        };
        let none = desc(&ir(None), &cfg);
        assert_eq!(none.memory_per_cpu, Some(NoVal::Set(512)));
        assert_eq!(none.memory_per_node, None);
        let some = desc(&ir(Some(300)), &cfg);
        assert_eq!(some.memory_per_cpu, None);
        assert_eq!(some.memory_per_node, Some(NoVal::Set(300)));
        // Unset in the config: Slurm's own DefMemPerCPU (or the whole node) applies.
        assert_eq!(desc(&ir(None), &super::tests::cfg()).memory_per_cpu, None);
    }

    fn pod_of_class(name: &str, class: &str, priority: i32) -> Pod {
        let mut p = pod(name);
        p.spec = Some(crate::k8s::slim_pod::PodSpec {
            priority_class_name: Some(class.into()),
            priority: Some(priority),
            ..Default::default()
        });
        p
    }

    #[test]
    fn a_mapped_priority_class_gives_qos_partition_and_priority_unless_annotated() {
        let cfg = Config::from_yaml(
            "partition: slurm-bridge\npriorityClasses:\n  high: {qos: urgent, partition: fast, priority: 900}\n  low: {qos: scavenger}\n",
        )
        .unwrap();
        let ir = |pods: Vec<Pod>, job: JobInfo| SlurmJobIr {
            root: ObjectRef::new("v1", "Pod", "ns", "p"),
            pods,
            job,
        };
        // Every ask granted, as under a tenant allowing all: this checks what is asked.
        let build = |ir: &SlurmJobIr, g: &str, cfg: &Config, ex: &[String]| {
            build(ir, g, cfg, &Granted::as_asked(&asked(ir, cfg)), ex)
        };
        // The highest-priority pod's class counts.
        let d = build(
            &ir(
                vec![
                    pod_of_class("a", "low", 10),
                    pod_of_class("b", "high", 1000),
                ],
                JobInfo::default(),
            ),
            "g",
            &cfg,
            &[],
        );
        assert_eq!(d.qos.as_deref(), Some("urgent"));
        assert_eq!(d.partition.as_deref(), Some("fast"));
        assert_eq!(d.priority, Some(NoVal::Set(900)));
        // A class mapping only a QoS keeps the config's partition and no priority.
        let d = build(
            &ir(vec![pod_of_class("a", "low", 10)], JobInfo::default()),
            "g",
            &cfg,
            &[],
        );
        assert_eq!(d.qos.as_deref(), Some("scavenger"));
        assert_eq!(d.partition.as_deref(), Some("slurm-bridge"));
        assert_eq!(d.priority, None);
        // Annotations win field by field.
        let annotated = JobInfo {
            qos: Some("normal".into()),
            priority: Some(5),
            ..Default::default()
        };
        let d = build(
            &ir(vec![pod_of_class("b", "high", 1000)], annotated),
            "g",
            &cfg,
            &[],
        );
        assert_eq!(d.qos.as_deref(), Some("normal"));
        assert_eq!(d.priority, Some(NoVal::Set(5)));
        assert_eq!(d.partition.as_deref(), Some("fast"));
        // An unmapped class, or none, changes nothing.
        for p in [pod_of_class("c", "other", 50), pod("d")] {
            let d = build(&ir(vec![p], JobInfo::default()), "g", &cfg, &[]);
            assert_eq!((d.qos, d.priority), (None, None));
            assert_eq!(d.partition.as_deref(), Some("slurm-bridge"));
        }
    }

    #[test]
    fn empty_config_values_are_left_out() {
        let ir = SlurmJobIr {
            root: ObjectRef::new("v1", "Pod", "ns", "p"),
            pods: vec![pod("p")],
            job: JobInfo::default(),
        };
        let d = build(&ir, "g", &Config::default(), &Granted::default(), &[]);
        assert_eq!(d.partition, None);
        assert_eq!(d.name.as_deref(), Some("ns/p"), "the root's namespace/name");
        assert_eq!(d.mcs_label, None);
        assert_eq!(d.shared, Some(vec![Shared::None]));
    }
}
