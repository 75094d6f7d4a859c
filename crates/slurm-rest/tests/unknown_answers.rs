//! Slurm answers this client does not know, made from the recorded real answers of
//! slurmrestd 26.05 (tests/fixtures/): fields gone, fields added, enum values a newer Slurm
//! could send. Each decodes through the client (a scripted server plays slurmrestd), and an
//! unknown value is logged once, however often it is polled.

mod common;

use common::{Answer, fixture, mock, reply};
use proptest::prelude::*;
use serde_json::{Value, json};
use slurm_rest::models::*;
use slurm_rest::{Client, RetryPolicy};
use std::sync::{Arc, Mutex};

async fn client_for(answers: Vec<Answer>) -> (Client, common::Mock) {
    let m = mock(answers).await;
    let c = Client::builder(&m.url)
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    (c, m)
}

fn recorded(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// `value` with object `at` (a JSON pointer) changed by `f`.
fn edit(mut value: Value, at: &str, f: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Value {
    f(value
        .pointer_mut(at)
        .and_then(Value::as_object_mut)
        .expect(at));
    value
}

#[tokio::test]
async fn every_field_of_a_recorded_job_node_and_state_may_be_missing() {
    let jobs = recorded("jobs.json");
    let nodes = recorded("nodes.json");
    let states = recorded("jobs_state.json");
    let keys = |v: &Value, at: &str| -> Vec<String> {
        v.pointer(at)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    let (job_keys, node_keys) = (keys(&jobs, "/jobs/0"), keys(&nodes, "/nodes/0"));
    assert!(
        job_keys.len() > 100 && node_keys.len() > 50,
        "recorded answers are complete"
    );
    let mut answers = Vec::new();
    for k in &job_keys {
        let v = edit(jobs.clone(), "/jobs/0", |o| drop(o.remove(k)));
        answers.push(reply(200, &v.to_string()));
    }
    for k in &node_keys {
        let v = edit(nodes.clone(), "/nodes/0", |o| drop(o.remove(k)));
        answers.push(reply(200, &v.to_string()));
    }
    for k in ["job_id", "state"] {
        let v = edit(states.clone(), "/jobs/0", |o| drop(o.remove(k)));
        answers.push(reply(200, &v.to_string()));
    }
    let (c, _m) = client_for(answers).await;
    for k in &job_keys {
        let r = c
            .jobs(None)
            .await
            .unwrap_or_else(|e| panic!("jobs without {k}: {e}"));
        assert_eq!(r.jobs.len(), 3, "without {k}");
    }
    for k in &node_keys {
        let n = c
            .nodes()
            .await
            .unwrap_or_else(|e| panic!("nodes without {k}: {e}"));
        assert_eq!(n.len(), 2, "without {k}");
    }
    for k in ["job_id", "state"] {
        let s = c
            .job_states()
            .await
            .unwrap_or_else(|e| panic!("states without {k}: {e}"));
        assert!(!s.is_empty(), "without {k}");
    }
}

/// Adds an unknown field to every object of `v`.
fn add_everywhere(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.values_mut().for_each(add_everywhere);
            o.insert(
                "x_field_of_slurm_27".into(),
                json!({"nested": [1, "two", null]}),
            );
        }
        Value::Array(a) => a.iter_mut().for_each(add_everywhere),
        _ => {}
    }
}

#[tokio::test]
async fn unknown_fields_anywhere_change_nothing() {
    let mut answers = Vec::new();
    for name in [
        "jobs.json",
        "nodes.json",
        "jobs_state.json",
        "partitions.json",
    ] {
        answers.push(reply(200, &fixture(name)));
        let mut v = recorded(name);
        add_everywhere(&mut v);
        answers.push(reply(200, &v.to_string()));
    }
    let (c, _m) = client_for(answers).await;
    assert_eq!(c.jobs(None).await.unwrap(), c.jobs(None).await.unwrap());
    assert_eq!(c.nodes().await.unwrap(), c.nodes().await.unwrap());
    assert_eq!(c.job_states().await.unwrap(), c.job_states().await.unwrap());
    assert_eq!(c.partitions().await.unwrap(), c.partitions().await.unwrap());
}

/// A tracing writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn new_enum_values_decode_as_other_and_are_logged_once() {
    let jobs = edit(recorded("jobs.json"), "/jobs/0", |o| {
        o.insert(
            "job_state".into(),
            json!(["RUNNING", "X_TEST_JOB_FLAG_STATE"]),
        );
        let flags = o.get_mut("flags").unwrap().as_array_mut().unwrap();
        flags.push(json!("X_TEST_JOB_FLAG"));
    });
    let jobs = edit(jobs, "/jobs/1", |o| {
        o.insert("job_state".into(), json!(["X_TEST_BASE_STATE"]));
    });
    let nodes = edit(recorded("nodes.json"), "/nodes/0", |o| {
        o.get_mut("state")
            .unwrap()
            .as_array_mut()
            .unwrap()
            .push(json!("X_TEST_NODE_STATE"));
    });
    let states = edit(recorded("jobs_state.json"), "/jobs/0", |o| {
        o.insert("state".into(), json!(["X_TEST_BASE_STATE"]));
    });
    let polls = 3;
    let mut answers = Vec::new();
    for _ in 0..polls {
        answers.push(reply(200, &jobs.to_string()));
        answers.push(reply(200, &nodes.to_string()));
        answers.push(reply(200, &states.to_string()));
    }
    let (c, _m) = client_for(answers).await;
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    for _ in 0..polls {
        let r = c.jobs(None).await.unwrap();
        assert_eq!(
            r.jobs[0].job_state,
            [
                JobState::Running,
                JobState::Other("X_TEST_JOB_FLAG_STATE".into())
            ]
        );
        assert!(r.jobs[0].is_running());
        assert!(
            r.jobs[0]
                .flags
                .contains(&JobFlag::Other("X_TEST_JOB_FLAG".into()))
        );
        assert_eq!(
            r.jobs[1].job_state,
            [JobState::Other("X_TEST_BASE_STATE".into())]
        );
        assert!(!r.jobs[1].job_state.iter().any(JobState::is_base));
        let n = c.nodes().await.unwrap();
        assert!(n[0].has_state(&NodeState::Other("X_TEST_NODE_STATE".into())));
        let s = c.job_states().await.unwrap();
        assert_eq!(s[0].state, [JobState::Other("X_TEST_BASE_STATE".into())]);
    }
    let log = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    for (kind, value) in [
        ("JobState", "X_TEST_JOB_FLAG_STATE"),
        ("JobState", "X_TEST_BASE_STATE"),
        ("JobFlag", "X_TEST_JOB_FLAG"),
        ("NodeState", "X_TEST_NODE_STATE"),
    ] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.split_whitespace().any(|w| w == format!("value={value}")))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{value} logged {} times in:\n{log}",
            lines.len()
        );
        assert!(
            lines[0].contains("WARN") && lines[0].contains(&format!("kind=\"{kind}\"")),
            "{}",
            lines[0]
        );
        assert!(unknown_values().contains(&(kind, value.to_string())));
    }
}

/// A random structural change of a JSON answer: a field removed, a field added, an enum-like
/// string (upper case) replaced by a new value, or a value nulled.
#[derive(Debug, Clone)]
enum Change {
    Remove(usize),
    Add(usize),
    NewEnumValue(usize, String),
    Null(usize),
}

/// JSON pointers of every value of `v`, pre-order.
fn paths(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => o.iter().for_each(|(k, c)| {
            let k = k.replace('~', "~0").replace('/', "~1");
            paths(c, format!("{at}/{k}"), out)
        }),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, c)| paths(c, format!("{at}/{i}"), out)),
        _ => {}
    }
    out.push(at);
}

/// Applies `change` to the `n`-th value (modulo) it can apply to.
fn apply(v: &mut Value, change: &Change) {
    let mut all = Vec::new();
    paths(v, String::new(), &mut all);
    let pick = |v: &Value, n: usize, pred: &dyn Fn(&Value) -> bool| -> Option<String> {
        let c: Vec<&String> = all
            .iter()
            .filter(|p| v.pointer(p).is_some_and(pred))
            .collect();
        (!c.is_empty()).then(|| c[n % c.len()].clone())
    };
    let is_enum = |v: &Value| {
        v.as_str().is_some_and(|s| {
            !s.is_empty() && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        })
    };
    match change {
        Change::Remove(n) => {
            if let Some(p) = pick(v, *n, &|v: &Value| {
                v.as_object().is_some_and(|o| !o.is_empty())
            }) {
                let o = v.pointer_mut(&p).unwrap().as_object_mut().unwrap();
                let k = o.keys().nth(*n % o.len()).unwrap().clone();
                o.remove(&k);
            }
        }
        Change::Add(n) => {
            if let Some(p) = pick(v, *n, &Value::is_object) {
                let o = v.pointer_mut(&p).unwrap().as_object_mut().unwrap();
                o.insert("x_new".into(), json!([{"a": 1}]));
            }
        }
        Change::NewEnumValue(n, s) => {
            if let Some(p) = pick(v, *n, &is_enum) {
                *v.pointer_mut(&p).unwrap() = json!(s);
            }
        }
        Change::Null(n) => {
            if let Some(p) = pick(v, *n, &|v: &Value| !v.is_null()) {
                *v.pointer_mut(&p).unwrap() = Value::Null;
            }
        }
    }
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        any::<usize>().prop_map(Change::Remove),
        any::<usize>().prop_map(Change::Add),
        (any::<usize>(), "X_[A-Z_]{1,12}").prop_map(|(n, s)| Change::NewEnumValue(n, s)),
        any::<usize>().prop_map(Change::Null),
    ]
}

/// The list answers whose wrappers are private to the client, decoded the same way.
#[derive(serde::Deserialize)]
struct NodeList {
    #[serde(default)]
    nodes: Vec<Node>,
}

proptest! {
    /// Recorded answers with fields removed or added and enum values replaced by new ones
    /// still decode, into the same number of jobs and nodes. A `null` put anywhere may be
    /// refused (slurmrestd never sends one where a value is required) but never panics.
    #[test]
    fn recorded_answers_survive_structural_changes(
        changes in proptest::collection::vec(change(), 1..6),
        which in 0usize..3,
    ) {
        let name = ["jobs.json", "nodes.json", "job_running.json"][which];
        let mut v = recorded(name);
        for c in &changes {
            apply(&mut v, c);
        }
        let nulled = changes.iter().any(|c| matches!(c, Change::Null(_)));
        let count = |v: &Value, k: &str| v.get(k).and_then(Value::as_array).map(Vec::len);
        let decoded: Result<usize, serde_json::Error> = match name {
            "nodes.json" => serde_json::from_value::<NodeList>(v.clone()).map(|r| r.nodes.len()),
            _ => serde_json::from_value::<JobsResponse>(v.clone()).map(|r| r.jobs.len()),
        };
        let list = if name == "nodes.json" { "nodes" } else { "jobs" };
        match decoded {
            Ok(n) => {
                if let Some(want) = count(&v, list) {
                    prop_assert_eq!(n, want);
                }
            }
            Err(e) => prop_assert!(nulled, "{name} after {changes:?}: {e}"),
        }
    }
}
