//! `slurmjob.slinky.slurm.net/*` annotations: each parsed with its type and unit
//! (reference §1.3). A bad value is an error naming the key, the value and the accepted
//! form; every bad key is reported, in key order.

use std::collections::BTreeMap;

use super::ir::JobInfo;
use crate::resources::pod_resources::bytes_to_mib_ceil;
use crate::resources::quantity::Quantity;
use crate::wellknown::{SLURMJOB_PREFIX, slurmjob as key};

/// One annotation with a bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {key}: {value:?} is not valid; expected {expected}")]
pub struct AnnotationError {
    /// Full annotation key.
    pub key: String,
    /// The value given.
    pub value: String,
    /// The accepted form.
    pub expected: &'static str,
}

const EXPECT_CPU: &str =
    "a positive Kubernetes CPU quantity such as 2 or 1500m (rounded up to whole CPUs)";
const EXPECT_MEM: &str =
    "a positive Kubernetes memory quantity such as 4Gi or 512Mi (rounded up to whole MiB)";
const EXPECT_BOOL: &str = "true or false";
const EXPECT_NODES: &str = "a whole number of nodes from 1 to 2147483647";
const EXPECT_PODS: &str = "a whole number of pods per node from 1 to 2147483647";
const EXPECT_MINUTES: &str = "a whole number of minutes from 1 to 2147483647";
const EXPECT_PRIORITY: &str = "a whole number from 0 to 4294967293";
const EXPECT_STRING: &str = "a non-empty string";
const EXPECT_MIN_LE_MAX: &str =
    "a minimum node count not above slurmjob.slinky.slurm.net/max-nodes";

/// CPUs per task from a quantity, rounded up.
pub fn parse_cpu(value: &str) -> Result<u32, &'static str> {
    let q = Quantity::parse(value.trim()).map_err(|_| EXPECT_CPU)?;
    let cpus = q.ceil_units();
    if cpus < 1 {
        return Err(EXPECT_CPU);
    }
    u32::try_from(cpus).map_err(|_| EXPECT_CPU)
}

/// Memory in MiB from a quantity of bytes, rounded up (so `1k` asks for 1 MiB, never 0,
/// which Slurm reads as "all the node's memory": fix of quirk 14).
pub fn parse_mem_mib(value: &str) -> Result<u64, &'static str> {
    let q = Quantity::parse(value.trim()).map_err(|_| EXPECT_MEM)?;
    if q.nanos() <= 0 {
        return Err(EXPECT_MEM);
    }
    Ok(bytes_to_mib_ceil(&q))
}

/// `true` / `false`, case-insensitive, surrounding spaces ignored.
pub fn parse_bool(value: &str) -> Result<bool, &'static str> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(EXPECT_BOOL),
    }
}

fn parse_positive(value: &str, expected: &'static str) -> Result<u32, &'static str> {
    match value.trim().parse::<u32>() {
        Ok(n) if (1..=i32::MAX as u32).contains(&n) => Ok(n),
        _ => Err(expected),
    }
}

/// A node count.
pub fn parse_nodes(value: &str) -> Result<u32, &'static str> {
    parse_positive(value, EXPECT_NODES)
}

/// A pod count per node.
pub fn parse_pods(value: &str) -> Result<u32, &'static str> {
    parse_positive(value, EXPECT_PODS)
}

/// A time limit in minutes.
pub fn parse_minutes(value: &str) -> Result<u32, &'static str> {
    parse_positive(value, EXPECT_MINUTES)
}

/// A Slurm priority (below Slurm's NO_VAL and INFINITE markers).
pub fn parse_priority(value: &str) -> Result<u32, &'static str> {
    match value.trim().parse::<u32>() {
        Ok(n) if n <= u32::MAX - 2 => Ok(n),
        _ => Err(EXPECT_PRIORITY),
    }
}

fn parse_string(value: &str) -> Result<String, &'static str> {
    let v = value.trim();
    if v.is_empty() {
        Err(EXPECT_STRING)
    } else {
        Ok(v.to_string())
    }
}

/// Apply every `slurmjob.slinky.slurm.net/*` annotation to `job` (annotations override
/// values derived from the workload). Fields of valid keys are applied even when other
/// keys are bad; all bad keys are returned.
pub fn apply(
    annotations: &BTreeMap<String, String>,
    job: &mut JobInfo,
) -> Result<(), Vec<AnnotationError>> {
    let mut errors = Vec::new();
    for (k, v) in annotations {
        if !k.starts_with(SLURMJOB_PREFIX) {
            continue;
        }
        let result: Result<(), &'static str> = match k.as_str() {
            key::ACCOUNT => parse_string(v).map(|s| job.account = Some(s)),
            key::CONSTRAINTS => parse_string(v).map(|s| job.constraints = Some(s)),
            key::CPU_PER_TASK => parse_cpu(v).map(|n| job.cpus_per_task = Some(n)),
            key::EXCLUSIVE => parse_bool(v).map(|b| job.exclusive = Some(b)),
            key::GRES => parse_string(v).map(|s| job.gres = Some(s)),
            key::GROUP_ID => parse_string(v).map(|s| job.group_id = Some(s)),
            key::JOB_NAME => parse_string(v).map(|s| job.job_name = Some(s)),
            key::LICENSES => parse_string(v).map(|s| job.licenses = Some(s)),
            key::MAX_NODES => parse_nodes(v).map(|n| job.max_nodes = Some(n)),
            key::MEM_PER_NODE => parse_mem_mib(v).map(|n| job.mem_per_node_mib = Some(n)),
            key::MIN_NODES => parse_nodes(v).map(|n| job.min_nodes = Some(n)),
            key::PARTITION => parse_string(v).map(|s| job.partition = Some(s)),
            key::PODS_PER_NODE => parse_pods(v).map(|n| job.pods_per_node = Some(n)),
            key::PRIORITY => parse_priority(v).map(|n| job.priority = Some(n)),
            key::QOS => parse_string(v).map(|s| job.qos = Some(s)),
            key::RESERVATION => parse_string(v).map(|s| job.reservation = Some(s)),
            key::TIMELIMIT => parse_minutes(v).map(|n| job.time_limit_minutes = Some(n)),
            key::USER_ID => parse_string(v).map(|s| job.user_id = Some(s)),
            key::WCKEY => parse_string(v).map(|s| job.wckey = Some(s)),
            _ => Ok(()), // unknown keys are ignored (see `unknown_keys`)
        };
        if let Err(expected) = result {
            errors.push(AnnotationError {
                key: k.clone(),
                value: v.clone(),
                expected,
            });
        }
    }
    if let (Some(min), Some(max)) = (
        annotations.get(key::MIN_NODES),
        annotations.get(key::MAX_NODES),
    ) && let (Ok(lo), Ok(hi)) = (parse_nodes(min), parse_nodes(max))
        && lo > hi
    {
        errors.push(AnnotationError {
            key: key::MIN_NODES.to_string(),
            value: min.clone(),
            expected: EXPECT_MIN_LE_MAX,
        });
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Keys that look like bridge job annotations but are not understood: unknown
/// `slurmjob.slinky.slurm.net/` suffixes and the obsolete `slinky.slurm.net/job-name` form.
/// They are ignored as in the original; `translate` warns about them.
pub fn unknown_keys(annotations: &BTreeMap<String, String>) -> Vec<String> {
    annotations
        .keys()
        .filter(|k| {
            (k.starts_with(SLURMJOB_PREFIX) && !key::ALL.contains(&k.as_str()))
                || k.as_str() == "slinky.slurm.net/job-name"
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_is_noop() {
        let mut job = JobInfo::default();
        apply(&BTreeMap::new(), &mut job).unwrap();
        assert_eq!(job, JobInfo::default());
    }

    #[test]
    fn all_keys_parsed() {
        let mut job = JobInfo::default();
        apply(
            &ann(&[
                (key::ACCOUNT, "acct"),
                (key::CONSTRAINTS, "feat"),
                (key::CPU_PER_TASK, "200m"),
                (key::EXCLUSIVE, "false"),
                (key::GRES, "gres/gpu=2"),
                (key::GROUP_ID, "1000"),
                (key::JOB_NAME, "name"),
                (key::LICENSES, "lic:1"),
                (key::MAX_NODES, "4"),
                (key::MEM_PER_NODE, "1Gi"),
                (key::MIN_NODES, "2"),
                (key::PARTITION, "debug"),
                (key::PODS_PER_NODE, "2"),
                (key::PRIORITY, "10"),
                (key::QOS, "high"),
                (key::RESERVATION, "resv"),
                (key::TIMELIMIT, "30"),
                (key::USER_ID, "1001"),
                (key::WCKEY, "wc"),
            ]),
            &mut job,
        )
        .unwrap();
        assert_eq!(
            job,
            JobInfo {
                account: Some("acct".into()),
                constraints: Some("feat".into()),
                cpus_per_task: Some(1),
                exclusive: Some(false),
                gres: Some("gres/gpu=2".into()),
                group_id: Some("1000".into()),
                job_name: Some("name".into()),
                licenses: Some("lic:1".into()),
                max_nodes: Some(4),
                mem_per_node_mib: Some(1024),
                min_nodes: Some(2),
                partition: Some("debug".into()),
                pods_per_node: Some(2),
                unpacked: None,
                priority: Some(10),
                qos: Some("high".into()),
                reservation: Some("resv".into()),
                tasks_per_node: None,
                time_limit_minutes: Some(30),
                user_id: Some("1001".into()),
                wckey: Some("wc".into()),
            }
        );
    }

    #[test]
    fn bad_values_are_errors_naming_key_value_and_form() {
        for (k, v) in [
            (key::CPU_PER_TASK, "NaN"),
            (key::CPU_PER_TASK, "0"),
            (key::CPU_PER_TASK, "-1"),
            (key::MAX_NODES, "many"),
            (key::MAX_NODES, "0"),
            (key::MEM_PER_NODE, "lots"),
            (key::MEM_PER_NODE, "0"),
            (key::TIMELIMIT, "1h"),
            (key::TIMELIMIT, "-5"),
            (key::PRIORITY, "-1"),
            (key::PRIORITY, "4294967295"),
            (key::MIN_NODES, "1.5"),
            (key::EXCLUSIVE, "yes"),
            (key::EXCLUSIVE, ""),
            (key::ACCOUNT, "  "),
        ] {
            let mut job = JobInfo::default();
            let errs = apply(&ann(&[(k, v)]), &mut job).unwrap_err();
            assert_eq!(errs.len(), 1, "{k}={v}");
            let text = errs[0].to_string();
            assert!(
                text.contains(k) && text.contains(&format!("{v:?}")) && text.contains("expected"),
                "{text}"
            );
        }
    }

    #[test]
    fn all_bad_keys_reported_and_good_ones_applied() {
        let mut job = JobInfo::default();
        let errs = apply(
            &ann(&[(key::TIMELIMIT, "x"), (key::PRIORITY, "y"), (key::QOS, "q")]),
            &mut job,
        )
        .unwrap_err();
        assert_eq!(
            errs.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
            vec![key::PRIORITY, key::TIMELIMIT]
        );
        assert_eq!(job.qos.as_deref(), Some("q"));
    }

    #[test]
    fn exclusive_is_case_insensitive_and_trimmed() {
        for (v, want) in [
            ("false", false),
            ("true", true),
            (" TRUE ", true),
            ("False", false),
        ] {
            assert_eq!(parse_bool(v), Ok(want), "{v}");
        }
    }

    #[test]
    fn small_memory_rounds_up_to_one_mib() {
        assert_eq!(parse_mem_mib("1"), Ok(1));
        assert_eq!(parse_mem_mib("1k"), Ok(1));
        assert_eq!(parse_mem_mib("1Mi"), Ok(1));
        assert_eq!(parse_mem_mib("1.5Mi"), Ok(2));
        assert_eq!(parse_mem_mib("1G"), Ok(954));
    }

    #[test]
    fn min_above_max_is_an_error() {
        let mut job = JobInfo::default();
        let errs = apply(
            &ann(&[(key::MIN_NODES, "3"), (key::MAX_NODES, "2")]),
            &mut job,
        )
        .unwrap_err();
        assert_eq!(errs[0].key, key::MIN_NODES);
    }

    #[test]
    fn unknown_and_obsolete_keys_are_listed() {
        let a = ann(&[
            ("slurmjob.slinky.slurm.net/timelimt", "5"),
            ("slinky.slurm.net/job-name", "x"),
            (key::QOS, "q"),
            ("other/key", "v"),
        ]);
        assert_eq!(
            unknown_keys(&a),
            vec![
                "slinky.slurm.net/job-name",
                "slurmjob.slinky.slurm.net/timelimt"
            ]
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC*") {
            let _ = parse_cpu(&s);
            let _ = parse_mem_mib(&s);
            let _ = parse_bool(&s);
            let _ = parse_nodes(&s);
            let _ = parse_minutes(&s);
            let _ = parse_priority(&s);
            let mut job = JobInfo::default();
            let all: BTreeMap<String, String> = key::ALL.iter().map(|k| (k.to_string(), s.clone())).collect();
            let _ = apply(&all, &mut job);
        }

        #[test]
        fn integers_round_trip(n in 1u32..=i32::MAX as u32) {
            prop_assert_eq!(parse_nodes(&n.to_string()), Ok(n));
            prop_assert_eq!(parse_minutes(&n.to_string()), Ok(n));
            prop_assert_eq!(parse_cpu(&n.to_string()), Ok(n));
            prop_assert_eq!(parse_cpu(&format!("{}m", u64::from(n) * 1000)), Ok(n));
        }

        #[test]
        fn memory_round_trips(n in 1u64..(1u64 << 40)) {
            prop_assert_eq!(parse_mem_mib(&format!("{n}Mi")), Ok(n));
        }
    }
}
