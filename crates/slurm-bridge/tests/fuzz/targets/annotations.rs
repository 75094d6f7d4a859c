//! `slurmjob.slinky.slurm.net/*` annotations. A corpus file is one annotation per line,
//! `<suffix>=<value>` (the suffix after `slurmjob.slinky.slurm.net/`; a line with a `/` before
//! its `=` is a full key).

use crate::kit::{self, text};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use slurm_bridge::wellknown::{SLURMJOB_PREFIX, slurmjob};
use slurm_bridge::workload::annotations::{
    self, parse_bool, parse_cpu, parse_mem_mib, parse_minutes, parse_nodes, parse_pods,
    parse_priority, unknown_keys,
};
use slurm_bridge::workload::ir::JobInfo;
use std::collections::BTreeMap;

fn to_map(bytes: &[u8]) -> BTreeMap<String, String> {
    text(bytes)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let key = if k.contains('/') {
                k.to_string()
            } else {
                format!("{SLURMJOB_PREFIX}{k}")
            };
            (key, v.to_string())
        })
        .collect()
}

/// The typed parser of a key, as a yes/no: does the value parse?
fn valid(key: &str, v: &str) -> Option<bool> {
    Some(match key {
        slurmjob::CPU_PER_TASK => parse_cpu(v).is_ok(),
        slurmjob::MEM_PER_NODE => parse_mem_mib(v).is_ok(),
        slurmjob::EXCLUSIVE => parse_bool(v).is_ok(),
        slurmjob::MAX_NODES | slurmjob::MIN_NODES => parse_nodes(v).is_ok(),
        slurmjob::PODS_PER_NODE => parse_pods(v).is_ok(),
        slurmjob::TIMELIMIT => parse_minutes(v).is_ok(),
        slurmjob::PRIORITY => parse_priority(v).is_ok(),
        k if slurmjob::ALL.contains(&k) => !v.trim().is_empty(),
        _ => return None,
    })
}

fn check(map: &BTreeMap<String, String>) -> Result<(), TestCaseError> {
    let mut job = JobInfo::default();
    let errors = annotations::apply(map, &mut job).err().unwrap_or_default();
    // Every error names a known key of the map, with the value given and the accepted form.
    for e in &errors {
        prop_assert!(
            slurmjob::ALL.contains(&e.key.as_str()),
            "error for unknown key {}",
            e.key
        );
        prop_assert_eq!(map.get(&e.key), Some(&e.value));
        let msg = e.to_string();
        prop_assert!(msg.contains(&e.key) && msg.contains(e.expected), "{}", msg);
        prop_assert!(!e.expected.is_empty());
    }
    // A known key is reported exactly when its own parser refuses the value (min-nodes also
    // when it is above max-nodes).
    for (k, v) in map {
        let Some(ok) = valid(k, v) else { continue };
        let reported = errors.iter().any(|e| &e.key == k);
        if k != slurmjob::MIN_NODES {
            prop_assert_eq!(reported, !ok, "{} = {:?}", k, v);
        } else if !ok {
            prop_assert!(reported, "{} = {:?} not reported", k, v);
        }
    }
    // Unknown keys are never errors, and are all bridge-looking keys of the map.
    for k in unknown_keys(map) {
        prop_assert!(map.contains_key(&k));
        prop_assert!(!errors.iter().any(|e| e.key == k));
    }
    Ok(())
}

const DICT: &[&str] = &[
    "\n",
    "=",
    "cpu-per-task=",
    "mem-per-node=",
    "exclusive=",
    "max-nodes=",
    "min-nodes=",
    "pods-per-node=",
    "priority=",
    "timelimit=",
    "partition=",
    "gres=",
    "account=",
    "bogus=",
    "0",
    "1",
    "-1",
    "4294967293",
    "4294967294",
    "2147483648",
    "1500m",
    "4Gi",
    "1e40",
    "TRUE",
    " ",
    "",
    "x",
    "slinky.slurm.net/job-name=",
];

#[test]
fn slurmjob_annotations() {
    kit::fuzz_bytes("annotations", DICT, |b| check(&to_map(b)));
}
