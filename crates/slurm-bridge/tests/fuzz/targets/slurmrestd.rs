//! slurmrestd answers, decoded as the client decodes them. The corpus is slurm-rest's recorded
//! real answers (`crates/slurm-rest/tests/fixtures/`) plus `tests/fuzz/corpus/slurmrestd/`.

use crate::kit;
use proptest::test_runner::TestCaseError;
use serde::Deserialize;
use slurm_bridge::slurm::job_index::WatchedJob;
use slurm_rest::models::*;
use std::path::Path;

/// The list answers whose wrappers are private to slurm-rest, with the same field decoding
/// (only decoded, never read).
#[derive(Deserialize)]
#[allow(dead_code)]
struct Lists {
    #[serde(default)]
    nodes: Option<Vec<Node>>,
    #[serde(default)]
    partitions: Option<Vec<Partition>>,
    #[serde(default)]
    reservations: Option<Vec<Reservation>>,
    #[serde(default)]
    nodes_layout: Option<Vec<NodeResourceLayout>>,
    #[serde(default)]
    jobs: Option<Vec<JobStateEntry>>,
}

fn answer(bytes: &[u8]) -> Result<(), TestCaseError> {
    // Never a panic, whatever the body; what decodes is usable by the bridge.
    if let Ok(r) = serde_json::from_slice::<JobsResponse>(bytes) {
        for j in &r.jobs {
            let _ = (j.is_pending(), j.is_running(), WatchedJob::from_info(j));
            if let Some(w) = WatchedJob::from_info(j) {
                let _ = (w.is_active(), w.allocated_nodes());
                if let Some(nodes) = w.allocated_nodes() {
                    let _ = slurm_rest::hostlist::expand(nodes);
                }
            }
        }
    }
    let _ = serde_json::from_slice::<JobInfo>(bytes);
    let _ = serde_json::from_slice::<PingResponse>(bytes);
    let _ = serde_json::from_slice::<SubmitResponse>(bytes);
    let _ = serde_json::from_slice::<UpdateJobResponse>(bytes);
    let _ = serde_json::from_slice::<CancelResponse>(bytes);
    let _ = serde_json::from_slice::<ResponseStatus>(bytes);
    let _ = serde_json::from_slice::<Lists>(bytes);
    if let Ok(n) = serde_json::from_slice::<Node>(bytes) {
        let _ = n.has_state(&NodeState::Drain);
    }
    Ok(())
}

const DICT: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "-1",
    "1e400",
    "18446744073709551616",
    "\"job_state\":",
    "\"state\":",
    "\"jobs\":",
    "\"nodes\":",
    "\"flags\":",
    "\"NEW_STATE\"",
    "{\"set\":true,\"infinite\":false,\"number\":",
    "\"admin_comment\":\"{\\\"pods\\\":[]}\"",
    "\"errors\":[{\"error_number\":2017}]",
    "\"job_id\":\"1_2\"",
];

#[test]
fn slurmrestd_answers() {
    let recorded = Path::new(env!("CARGO_MANIFEST_DIR")).join("../slurm-rest/tests/fixtures");
    let mut corpus = kit::read_dir(&recorded);
    corpus.extend(kit::read_dir(&kit::corpus_dir("slurmrestd")));
    kit::fuzz_corpus("slurmrestd", corpus, DICT, answer);
}
