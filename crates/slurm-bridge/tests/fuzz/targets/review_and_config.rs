//! Bodies the API server posts to the webhook, and config.yaml.

use crate::kit::{self, text};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use slurm_bridge::admission::review::{self, Verdict};
use slurm_bridge::admission::{mutate, validate::validate};
use slurm_bridge::config::{Config, ConfigError};

const SCHEDULER: &str = "slurm-bridge-scheduler";

/// The paths the mutating webhook may patch.
const PATCHED: &[&str] = &[
    "/spec/nodeName",
    "/spec/schedulerName",
    "/metadata/finalizers",
    "/metadata/finalizers/-",
    "/spec/tolerations",
    "/spec/tolerations/-",
];

fn admission_review(bytes: &[u8]) -> Result<(), TestCaseError> {
    match review::decode(bytes) {
        Ok(req) => {
            for managed in [false, true] {
                let patch = mutate::patch(&req, SCHEDULER, managed);
                for op in &patch.0 {
                    let path = op.path().to_string();
                    prop_assert!(PATCHED.contains(&path.as_str()), "unexpected patch {}", op);
                }
                if let Some(pod) = &req.object {
                    // The patch applies to the pod it was made for.
                    let mut doc = serde_json::to_value(pod).unwrap();
                    let applied = json_patch::patch(&mut doc, &patch);
                    prop_assert!(
                        applied.is_ok(),
                        "patch {} does not apply: {:?}",
                        patch,
                        applied
                    );
                }
                let verdict = match validate(
                    &req,
                    SCHEDULER,
                    managed,
                    &slurm_bridge::dra::GresDrivers::builtin(),
                ) {
                    Ok(()) => Verdict::Allow(patch),
                    Err(m) => {
                        prop_assert!(!m.is_empty(), "denied without a message");
                        Verdict::Deny(m)
                    }
                };
                let answer = serde_json::to_value(review::response(&req, &verdict)).unwrap();
                prop_assert_eq!(answer["response"]["uid"].as_str(), Some(req.uid.as_str()));
            }
        }
        Err(e) => prop_assert!(!e.to_string().is_empty()),
    }
    Ok(())
}

const REVIEW_DICT: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "\"CREATE\"",
    "\"UPDATE\"",
    "\"userInfo\":{}",
    "\"finalizers\":",
    "\"tolerations\":",
    "\"DELETE\"",
    "\"object\":",
    "\"oldObject\":",
    "\"spec\":",
    "\"metadata\":",
    "\"annotations\":",
    "\"labels\":",
    "\"resources\":",
    "\"limits\":",
    "\"nvidia.com/gpu\":\"1.5\"",
    "\"schedulerName\":\"default-scheduler\"",
    "\"nodeName\":\"n1\"",
    "\"resize\"",
    "1e999",
    "\"slurmjob.slinky.slurm.net/cpu-per-task\":\"2\"",
    "\"deviceclass.resource.kubernetes.io/x\":\"1\"",
];

#[test]
fn admission_reviews() {
    kit::fuzz_bytes("admission_review", REVIEW_DICT, admission_review);
}

fn config(bytes: &[u8]) -> Result<(), TestCaseError> {
    let s = text(bytes);
    match Config::from_yaml(&s) {
        Ok(cfg) => prop_assert!(cfg.validate().is_ok(), "accepted an invalid config"),
        Err(ConfigError::Field {
            field, expected, ..
        }) => {
            // A field error names a field the text has (case-insensitively) and the form.
            let lower = s.to_ascii_lowercase();
            let head = field
                .split(['.', '['])
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            prop_assert!(
                lower.contains(&head),
                "error names {field}, not in the text"
            );
            prop_assert!(!expected.is_empty());
        }
        Err(e) => prop_assert!(!e.to_string().is_empty()),
    }
    Ok(())
}

const YAML_DICT: &[&str] = &[
    "\n",
    ": ",
    "- ",
    "  ",
    "schedulerName",
    "slurmRestApi",
    "managedNamespaces",
    "mcsLabel",
    "partition",
    "priorityClasses",
    "managedNamespaceSelector",
    "matchLabels",
    "matchExpressions",
    "qos",
    "priority",
    "http://",
    "https://a:6820",
    "[",
    "]",
    "{",
    "}",
    "&a",
    "*a",
    "!!str",
    "---",
    "~",
    "null",
    "4294967294",
    "\"",
    "'",
    "#",
];

#[test]
fn config_yaml() {
    kit::fuzz_bytes("config", YAML_DICT, config);
}
