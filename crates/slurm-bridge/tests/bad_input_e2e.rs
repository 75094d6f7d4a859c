//! 200 generated pods with broken annotations and specs, sent to the real API server with the
//! admission webhooks and the scheduler running (kube-testenv + slurm-testenv). Each pod is
//! either refused at creation with a message naming what is wrong, or gets PodScheduled=False
//! with a reason (and a Warning Event), or, when its only oddities are ones the bridge ignores
//! by design (unknown keys, group labels of no group), is bound. The bridge (scheduler,
//! controllers, webhooks, all in-process) never panics,
//! and valid pods created after the broken ones are bound promptly.
//!
//! The pods come from a seed printed at the start (`BAD_INPUT_SEED` to replay one);
//! `BAD_INPUT_PODS` changes the count (default 200).

mod e2e;

use e2e::{Env, NS, describe, node_name_is_set, pod, scheduled_condition};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use slurm_bridge::admission::validate;
use slurm_bridge::wellknown::{
    ANNOTATION_SLURM_NODE, LABEL_COSCHEDULING_POD_GROUP, LABEL_JOB_NAME, LABEL_LWS_GROUP_KEY,
    LABEL_SLURM_JOBID, SLURMJOB_PREFIX,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// splitmix64: small, seedable, good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// What must become of a generated pod.
#[derive(Debug, Clone)]
enum Expect {
    /// Refused at creation; the message contains one of these.
    Refused(Vec<String>),
    /// PodScheduled=False with reason InvalidAnnotation, naming one of these keys.
    InvalidAnnotation(Vec<String>),
    /// PodScheduled=False with some reason and a message (Slurm or feasibility says no).
    NotScheduled,
    /// Bound: nothing the bridge refuses.
    Bound,
}

/// Bad values per `slurmjob.*` key (each refused by the annotation parser).
const BAD_VALUES: &[(&str, &[&str])] = &[
    (
        "cpu-per-task",
        &["0", "-1", "1.5.5", "abc", "1e40", "", " "],
    ),
    ("mem-per-node", &["0", "-4Gi", "4GB", "1e400", "lots"]),
    ("exclusive", &["yes", "1", "", "maybe"]),
    ("max-nodes", &["0", "-1", "2147483648", "1.5", "many"]),
    ("min-nodes", &["0", "x", "99999999999"]),
    ("pods-per-node", &["0", "-2", "two"]),
    ("priority", &["4294967295", "-5", "high"]),
    ("timelimit", &["0", "1h", "-1", "99999999999"]),
    ("partition", &["", "   "]),
    ("account", &[""]),
    ("qos", &["\t"]),
];

/// One generated pod: its manifest (or None when the API client cannot even express it) and
/// what must become of it.
fn generate(rng: &mut Rng, i: usize) -> (String, Value, Expect) {
    let name = format!("bad-{i:03}");
    let mut annotations = serde_json::Map::new();
    annotations.insert(format!("{SLURMJOB_PREFIX}exclusive"), json!("false"));
    let mut labels = serde_json::Map::new();
    let mut spec_extra = serde_json::Map::new();
    // Short-lived, so the pods that are bound give their CPUs back (the controllers end their
    // jobs) and capacity never runs out. `Never`: under the API server's default (`Always`) a
    // `sleep 5` container is restarted and the pod, and rightly its Slurm job, runs for ever.
    spec_extra.insert("restartPolicy".into(), json!("Never"));
    let mut container = json!({"name": "main", "image": "busybox", "command": ["sleep", "5"],
                               "resources": {"requests": {"cpu": "100m", "memory": "10Mi"}}});
    // Oddities the bridge ignores by design, on any pod.
    for _ in 0..rng.below(3) {
        match rng.below(4) {
            0 => {
                annotations.insert(
                    format!("{SLURMJOB_PREFIX}bogus-{}", rng.below(100)),
                    json!("whatever"),
                );
            }
            1 => {
                annotations.insert("slinky.slurm.net/job-name".into(), json!("old-form"));
            }
            2 => {
                // Group labels of no group: no such PodGroup, LWS or Job exists.
                labels.insert(LABEL_COSCHEDULING_POD_GROUP.into(), json!("no-such-group"));
                labels.insert(LABEL_LWS_GROUP_KEY.into(), json!("deadbeef"));
                labels.insert(LABEL_JOB_NAME.into(), json!("no-such-job"));
            }
            // No CPU request. (Not "no requests at all": a pod without a memory request gets a
            // Slurm job without memory_per_node, which Slurm reads as all of the node's memory.)
            _ => container["resources"] = json!({"requests": {"memory": "10Mi"}}),
        }
    }
    let expect = match rng.below(10) {
        // Refused by the validating webhook.
        0 => {
            let (msg, _) = match rng.below(4) {
                0 => {
                    labels.insert(LABEL_SLURM_JOBID.into(), json!("42"));
                    (validate::MSG_JOBID_LABEL, ())
                }
                1 => {
                    annotations.insert(ANNOTATION_SLURM_NODE.into(), json!("node-1"));
                    (validate::MSG_NODE_ANNOTATION, ())
                }
                2 => {
                    spec_extra.insert(
                        "resourceClaims".into(),
                        json!([{"name": "gpu", "resourceClaimName": "no-such-claim"}]),
                    );
                    (validate::MSG_RESOURCE_CLAIM, ())
                }
                _ => {
                    spec_extra.insert(
                        "topologySpreadConstraints".into(),
                        json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                "labelSelector": {"matchLabels": {"a": "b"}}}]),
                    );
                    (validate::MSG_TOPOLOGY_SPREAD, ())
                }
            };
            Expect::Refused(vec![msg.to_string()])
        }
        // Refused by the API server's own validation: the message names the field.
        1 => match rng.below(4) {
            0 => {
                container["resources"] = json!({"requests": {"cpu": "1.5.5"}});
                Expect::Refused(vec!["quantities must match".into(), "cpu".into()])
            }
            1 => {
                container.as_object_mut().unwrap().remove("image");
                Expect::Refused(vec!["image".into()])
            }
            2 => {
                container["name"] = json!("Not_A_DNS_Label");
                Expect::Refused(vec!["containers[0].name".into()])
            }
            _ => {
                annotations.insert(format!("{SLURMJOB_PREFIX}Bad Key"), json!("1"));
                Expect::Refused(vec!["metadata.annotations".into()])
            }
        },
        // Huge asks Slurm or the feasibility filters refuse.
        2 => {
            match rng.below(3) {
                0 => {
                    container["resources"] =
                        json!({"requests": {"cpu": "100000", "memory": "10Mi"}})
                }
                1 => {
                    annotations.insert(
                        format!("{SLURMJOB_PREFIX}partition"),
                        json!("p".repeat(5000)),
                    );
                }
                _ => {
                    annotations.insert(format!("{SLURMJOB_PREFIX}mem-per-node"), json!("900Pi"));
                }
            }
            Expect::NotScheduled
        }
        // Only oddities the bridge ignores.
        3 => Expect::Bound,
        // A bad `slurmjob.*` value (one or two keys; min above max counts too).
        _ => {
            let mut keys = Vec::new();
            for _ in 0..1 + rng.below(2) {
                let (suffix, values) = rng.pick(BAD_VALUES);
                let key = format!("{SLURMJOB_PREFIX}{suffix}");
                annotations.insert(key.clone(), json!(rng.pick(values)));
                keys.push(key);
            }
            if rng.below(5) == 0 {
                for (k, v) in [("min-nodes", "5"), ("max-nodes", "2")] {
                    let key = format!("{SLURMJOB_PREFIX}{k}");
                    annotations.insert(key.clone(), json!(v));
                    keys.retain(|x| x != &key);
                }
                keys.push(format!("{SLURMJOB_PREFIX}min-nodes"));
            }
            Expect::InvalidAnnotation(keys)
        }
    };
    let mut manifest = pod(&name, Value::Object(annotations), Value::Object(spec_extra));
    manifest["spec"]["containers"] = json!([container]);
    if !labels.is_empty() {
        manifest["metadata"]["labels"] = Value::Object(labels);
    }
    (name, manifest, expect)
}

/// Creates a pod from raw JSON (so what kube-rs types could not hold still reaches the API
/// server); the error text on refusal.
async fn create_raw(env: &Env, manifest: &Value) -> Result<(), String> {
    let gvk = kube::api::GroupVersionKind::gvk("", "v1", "Pod");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "pods");
    let api: Api<DynamicObject> = Api::namespaced_with(env.kube.clone(), NS, &ar);
    let obj: DynamicObject = serde_json::from_value(manifest.clone()).unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

static PANICS: AtomicUsize = AtomicUsize::new(0);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broken_pods_get_clear_answers_and_stall_nothing() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let seed: u64 = std::env::var("BAD_INPUT_SEED")
        .ok()
        .map(|s| s.parse().expect("BAD_INPUT_SEED is a whole number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let count: usize = std::env::var("BAD_INPUT_PODS")
        .ok()
        .map(|s| s.parse().expect("BAD_INPUT_PODS is a whole number"))
        .unwrap_or(200);
    println!("bad_input_e2e: BAD_INPUT_SEED={seed} BAD_INPUT_PODS={count}");

    // Six nodes of 8 CPUs: room for every pod that is bound (each asks one CPU) even before
    // the short-lived ones have ended.
    let mut env = Env::start(6).await;
    env.start_scheduler().await;
    let controllers = e2e::controllers::Controllers::start(&env, |_| {}).await;
    let mut cfg = e2e::config(&env.slurm);
    cfg.managed_namespaces = vec![NS.into()];
    let _hooks = e2e::admission::start(&env.kube, cfg, "bad-input").await;
    // The API server calls the webhooks once it has picked up their registration: wait for a
    // forged label to be refused.
    let probe = pod("probe", json!({}), json!({}));
    let mut forged = probe.clone();
    forged["metadata"]["labels"] = json!({LABEL_SLURM_JOBID: "1"});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match create_raw(&env, &forged).await {
            Err(e) if e.contains(validate::MSG_JOBID_LABEL) => break,
            Ok(()) => {
                env.pods()
                    .delete("probe", &Default::default())
                    .await
                    .unwrap();
            }
            Err(_) => {}
        }
        assert!(Instant::now() < deadline, "webhooks never called");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut rng = Rng(seed);
    let generated: Vec<(String, Value, Expect)> =
        (0..count).map(|i| generate(&mut rng, i)).collect();
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    let mut created: Vec<(String, Expect)> = Vec::new();
    let started = Instant::now();
    for (name, manifest, expect) in &generated {
        let result = create_raw(&env, manifest).await;
        match (expect, result) {
            (Expect::Refused(needles), Err(e)) => {
                assert!(
                    needles.iter().any(|n| e.contains(n.as_str())),
                    "{name}: refused with {e:?}, expected one of {needles:?}\n{manifest}"
                );
                *tally.entry("refused").or_default() += 1;
            }
            (Expect::Refused(needles), Ok(())) => {
                panic!(
                    "{name} was admitted; expected a refusal naming one of {needles:?}\n{manifest}"
                )
            }
            (_, Err(e)) => panic!("{name} refused ({e}); expected it admitted\n{manifest}"),
            (_, Ok(())) => created.push((name.clone(), expect.clone())),
        }
    }
    println!(
        "bad_input_e2e: {} pods sent in {:?}, {} admitted",
        generated.len(),
        started.elapsed(),
        created.len()
    );

    // Valid pods created after the broken ones are bound promptly.
    let valid_started = Instant::now();
    let valid: Vec<String> = (0..5).map(|i| format!("valid-{i}")).collect();
    for n in &valid {
        env.create_pod(pod(
            n,
            json!({format!("{SLURMJOB_PREFIX}exclusive"): "false"}),
            json!({}),
        ))
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env
        .pods()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| valid.contains(&p.name_any()))
        .all(node_name_is_set)
    {
        if Instant::now() > deadline {
            let queue = env
                .slurm
                .run(&["squeue", "-a", "-o", "%i %T %r %C %m %Q %j"])
                .unwrap();
            panic!("valid pods not bound within 30 s; Slurm's queue:\n{queue}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let valid_latency = valid_started.elapsed();
    println!(
        "bad_input_e2e: 5 valid pods bound {valid_latency:?} after creation, beside the broken ones"
    );

    // Every admitted pod reaches its expected state.
    let deadline = Instant::now() + Duration::from_secs(180);
    let api: Api<Pod> = env.pods();
    let mut pending: BTreeSet<String> = created.iter().map(|(n, _)| n.clone()).collect();
    let expected: BTreeMap<String, Expect> = created.iter().cloned().collect();
    let mut last: BTreeMap<String, Pod> = BTreeMap::new();
    while !pending.is_empty() {
        for p in api.list(&ListParams::default()).await.unwrap().items {
            let name = p.name_any();
            let Some(expect) = expected.get(&name) else {
                continue;
            };
            let cond = scheduled_condition(&p);
            let done = match expect {
                Expect::Bound => node_name_is_set(&p),
                Expect::InvalidAnnotation(keys) => cond.as_ref().is_some_and(|(s, r, m)| {
                    s == "False"
                        && r == "InvalidAnnotation"
                        && keys.iter().any(|k| m.contains(k.as_str()))
                        && m.contains("expected")
                }),
                Expect::NotScheduled => cond
                    .as_ref()
                    .is_some_and(|(s, r, m)| s == "False" && !r.is_empty() && !m.is_empty()),
                Expect::Refused(_) => unreachable!(),
            };
            if !matches!(expect, Expect::Bound) {
                assert!(
                    !node_name_is_set(&p),
                    "{name} was bound; expected {expect:?}: {}",
                    describe(&p)
                );
            }
            if done {
                pending.remove(&name);
            }
            last.insert(name, p);
        }
        if Instant::now() > deadline {
            let states: Vec<String> = pending
                .iter()
                .map(|n| {
                    format!(
                        "{n}: expected {:?}, got {}",
                        expected[n],
                        last.get(n).map(describe).unwrap_or_default()
                    )
                })
                .collect();
            panic!(
                "pods without their expected state after 180 s:\n{}",
                states.join("\n")
            );
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    // Each pod left unscheduled has a Warning Event with its condition's reason.
    let gvk = kube::api::GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "events");
    let events: Api<DynamicObject> = Api::namespaced_with(env.kube.clone(), NS, &ar);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut by_pod: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for e in events.list(&ListParams::default()).await.unwrap().items {
            if e.data["type"] == "Warning" {
                by_pod
                    .entry(
                        e.data["regarding"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    )
                    .or_default()
                    .insert(e.data["reason"].as_str().unwrap_or_default().to_string());
            }
        }
        let missing: Vec<String> = last
            .iter()
            .filter(|(_, p)| !node_name_is_set(p))
            .filter_map(|(n, p)| {
                let reason = scheduled_condition(p)?.1;
                (!by_pod.get(n).is_some_and(|r| r.contains(&reason)))
                    .then(|| format!("{n}: {reason}"))
            })
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no Warning Event for: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (_, e) in &created {
        let k = match e {
            Expect::Bound => "bound",
            Expect::InvalidAnnotation(_) => "invalid annotation",
            Expect::NotScheduled => "not scheduled (Slurm or feasibility)",
            Expect::Refused(_) => "refused",
        };
        *tally.entry(k).or_default() += 1;
    }
    println!("bad_input_e2e: outcomes {tally:?}");

    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "the bridge panicked (see the log)"
    );
    assert!(*env.handle().ready.borrow(), "the scheduler is still ready");
    assert!(!*env.handle().stopped.borrow(), "the scheduler still runs");
    assert!(
        !*controllers.handle.stopped.borrow(),
        "the controllers still run"
    );
    // The lifecycle invariants, once the short-lived pods have finished (every bound one
    // Succeeded: its `sleep 5` ended) and been released.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = api.list(&ListParams::default()).await.unwrap().items;
        let running: Vec<String> = pods
            .iter()
            .filter(|p| matches!(expected.get(&p.name_any()), Some(Expect::Bound)))
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded"))
            .map(|p| format!("{}: {}", p.name_any(), describe(p)))
            .collect();
        let held: Vec<String> = pods
            .iter()
            .filter(|p| {
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or_default();
                matches!(phase, "Succeeded" | "Failed")
                    && slurm_bridge::wellknown::holds_finalizer(*p)
            })
            .map(|p| p.name_any())
            .collect();
        if held.is_empty() && running.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "bound pods not Succeeded: {running:?}; finished pods still holding the finalizer: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    env.assert_invariants().await;
    controllers.stop().await;
}
