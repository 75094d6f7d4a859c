//! Tenancy on real Slurm with accounting (slurmdbd and its MariaDB, associations, limits and QoS
//! enforced) and a real control plane: a tenant's pods run as its Slurm user and are charged to
//! its account (`sacct` lists them with a field leading back to the pod), asks beyond the tenant
//! never reach Slurm, Slurm's accounting reasons reach the pod, and a job Slurm refuses for its
//! account is reported once, not retried in a loop.

mod e2e;

use e2e::controllers::Controllers;
use e2e::tenants::sacctmgr;
use e2e::wait_for;
use e2e::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The tenants of these tests: jobs run as the tenant's Slurm user, which needs the bridge's
/// token to be SlurmUser's (root in slurm-testenv).
const TENANTS: &str = "\
tenants:
  - name: team-a
    namespaces: [team-a]
    account: team-a
    user: alice
    qos: [normal, high]
  - name: team-b
    namespaces: [team-b]
    account: team-b
    user: bob
    qos: [normal]
  - name: team-c
    namespaces: [team-c]
    account: nosuch
    user: carol
";

/// Real Slurm with accounting and `slurm_nodes` external nodes, its users and accounts, a control
/// plane of `kube_nodes` nodes with the tenants' namespaces, and the scheduler and controllers
/// under `tenants`, with a token of Slurm user `bridge_user`.
async fn start(
    slurm_nodes: u32,
    kube_nodes: u32,
    tenants: &str,
    bridge_user: &str,
) -> (Env, Controllers) {
    let mut kube_opts = kube_testenv::InstanceOptions::with_nodes(kube_nodes as usize);
    for n in &mut kube_opts.nodes {
        n.labels.insert(
            slurm_bridge::wellknown::LABEL_EXTERNAL_NODE.into(),
            "true".into(),
        );
    }
    let slurm_opts = slurm_testenv::InstanceOptions {
        nodes: slurm_nodes,
        accounting: true,
        ..Default::default()
    };
    let mut env = Env::start_with(slurm_opts, kube_opts).await;
    for (user, uid) in [
        ("alice", 2001),
        ("bob", 2002),
        ("carol", 2003),
        ("slurm-bridge", 2100),
    ] {
        env.slurm.add_unix_user(user, uid).expect("unix user");
    }
    for cmd in [
        "add qos high",
        "add account team-a,team-b",
        "add user alice account=team-a qos=normal,high defaultqos=normal",
        "add user bob account=team-b qos=normal defaultqos=normal",
        // carol exists, with no association to the account her tenant names.
        "add user carol account=team-b",
        // The bridge's own user when it is not SlurmUser: AdminLevel=Admin is the least that
        // may create external nodes (Operator is refused), and it may not submit for others
        // (docs/tenancy.md). Its associations let it charge the tenants' accounts.
        "add user slurm-bridge account=root,team-a,team-b adminlevel=Admin",
    ] {
        sacctmgr(&env, cmd);
    }
    e2e::helm::create_namespaces(&env, &["team-a", "team-b", "team-c", "web"]).await;
    let bridge = client_of(&env, bridge_user);
    env.start_scheduler_with_tenants(bridge.clone(), tenants)
        .await;
    let controllers = Controllers::start_with(&env, bridge, |_| {}).await;
    (env, controllers)
}

/// A Slurm client with a token of Slurm user `user` (in a file, as the chart mounts it).
fn client_of(env: &Env, user: &str) -> slurm_rest::Client {
    let token = env.slurm.mint_token(user, 3600).expect("token");
    let file = temp_dir("tenancy-token").join("jwt");
    std::fs::write(&file, token).unwrap();
    slurm_rest::Client::builder(env.slurm.rest_url())
        .token(slurm_rest::TokenProvider::file(file))
        .build()
        .expect("slurm client")
}

fn pod_in(ns: &str, name: &str, annotations: Value) -> Pod {
    let mut p = pod(name, annotations, json!({}));
    p["metadata"]["namespace"] = json!(ns);
    serde_json::from_value(p).unwrap()
}

async fn create(env: &Env, ns: &str, name: &str, annotations: Value) {
    Api::<Pod>::namespaced(env.kube.clone(), ns)
        .create(&PostParams::default(), &pod_in(ns, name, annotations))
        .await
        .unwrap();
}

/// The pod's PodScheduled=False message once its reason is `reason`.
async fn wait_reason(env: &Env, ns: &str, name: &str, reason: &str) -> String {
    let api: Api<Pod> = Api::namespaced(env.kube.clone(), ns);
    wait_for(
        &format!("{ns}/{name} PodScheduled={reason}"),
        TIMEOUT,
        || {
            let api = api.clone();
            async move {
                let p = api.get(name).await.map_err(|e| e.to_string())?;
                scheduled_condition(&p)
                    .filter(|c| c.0 == "False" && c.1 == reason)
                    .map(|c| c.2)
                    .ok_or_else(|| describe(&p))
            }
        },
    )
    .await
}

/// Warning Events of a pod in `ns` with `reason`.
async fn events(env: &Env, ns: &str, pod: &str, reason: &str) -> Vec<String> {
    let gvk = kube::api::GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "events");
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(env.kube.clone(), ns, &ar);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.data["regarding"]["name"] == pod && e.data["reason"] == reason)
        .map(|e| e.data["note"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `sacct` rows (every user, allocations only) as maps of field -> value.
fn sacct(env: &Env) -> Vec<std::collections::BTreeMap<String, String>> {
    let fields = ["JobID", "User", "Account", "QOS", "JobName", "AdminComment"];
    let out = env
        .slurm
        .run(&[
            "sacct",
            "-a",
            "-X",
            "-P",
            "-n",
            "--starttime=now-1hour",
            &format!("--format={}", fields.join(",")),
        ])
        .expect("sacct");
    out.lines()
        .map(|l| {
            fields
                .iter()
                .map(|f| f.to_string())
                .zip(l.splitn(fields.len(), '|').map(str::to_string))
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_pods_run_as_its_user_and_account_and_what_it_refuses_never_reaches_slurm() {
    let (env, controllers) = start(3, 3, TENANTS, "root").await;
    create(&env, "team-a", "plain", json!({})).await;
    create(
        &env,
        "team-a",
        "urgent",
        json!({"slurmjob.slinky.slurm.net/qos": "high"}),
    )
    .await;
    create(&env, "team-b", "plain", json!({})).await;
    // Created straight through the API server: no webhook stands in the way, the scheduler must.
    create(
        &env,
        "team-a",
        "forged",
        json!({"slurmjob.slinky.slurm.net/user-id": "0", "slurmjob.slinky.slurm.net/priority": "4294967293"}),
    )
    .await;
    create(
        &env,
        "team-b",
        "greedy",
        json!({"slurmjob.slinky.slurm.net/qos": "high"}),
    )
    .await;
    create(&env, "web", "stray", json!({})).await;

    let a = env
        .wait_bound_in("team-a", &["plain".into(), "urgent".into()], TIMEOUT)
        .await;
    let b = env
        .wait_bound_in("team-b", &["plain".into()], TIMEOUT)
        .await;
    for (p, user, account, qos) in [
        (&a[0], "alice", "team-a", "normal"),
        (&a[1], "alice", "team-a", "high"),
        (&b[0], "bob", "team-b", "normal"),
    ] {
        let job = env.scontrol_job(job_id_of(p));
        for want in [
            format!("UserId={user}("),
            format!("Account={account} "),
            format!("QOS={qos}"),
        ] {
            assert!(job.contains(&want), "missing {want} in {job}");
        }
    }

    let m = wait_reason(&env, "team-a", "forged", "NotAllowedByTenant").await;
    assert!(
        m.contains("in namespace \"team-a\" (tenant \"team-a\")")
            && m.contains("user-id=\"0\" is not allowed (accepted: only \"alice\"")
            && m.contains("priority=\"4294967293\" is not allowed"),
        "{m}"
    );
    let m = wait_reason(&env, "team-b", "greedy", "NotAllowedByTenant").await;
    assert!(
        m.contains("qos=\"high\" is not allowed (accepted: one of \"normal\")"),
        "{m}"
    );
    let m = wait_reason(&env, "web", "stray", "NotAllowedByTenant").await;
    assert!(m.contains("belongs to no tenant"), "{m}");
    assert_eq!(
        events(&env, "team-a", "forged", "NotAllowedByTenant")
            .await
            .len(),
        1,
        "one Warning Event"
    );
    // Only the three allowed pods have jobs.
    assert_eq!(env.slurm_job_ids().len(), 3, "{:?}", env.slurm_job_ids());

    // Slurm's accounting lists each pod's job with its user and account, and the pod.
    let rows = wait_for("sacct to list the 3 jobs", TIMEOUT, || async {
        let rows = sacct(&env);
        if rows.len() >= 3 {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .await;
    for (p, user, account) in [
        (&a[0], "alice", "team-a"),
        (&a[1], "alice", "team-a"),
        (&b[0], "bob", "team-b"),
    ] {
        let id = job_id_of(p).to_string();
        let row = rows
            .iter()
            .find(|r| r["JobID"] == id)
            .unwrap_or_else(|| panic!("sacct has no job {id}: {rows:?}"));
        let key = format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap(),
            p.metadata.name.as_deref().unwrap()
        );
        assert_eq!(
            (row["User"].as_str(), row["Account"].as_str()),
            (user, account)
        );
        // The job name is the pod's namespace/name (the workload's, for a group): slurmdbd
        // records no AdminComment for a running job.
        assert_eq!(row["JobName"], key, "{row:?}");
    }

    // The lifecycle: deleted pods take their jobs with them.
    for (ns, name) in [
        ("team-a", "plain"),
        ("team-a", "urgent"),
        ("team-b", "plain"),
    ] {
        Api::<Pod>::namespaced(env.kube.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    for p in a.iter().chain(&b) {
        env.wait_job_ended(job_id_of(p), TIMEOUT).await;
        env.wait_pod_gone(
            p.metadata.namespace.as_deref().unwrap(),
            p.metadata.name.as_deref().unwrap(),
            TIMEOUT,
        )
        .await;
    }
    // Once ended, slurmdbd has each job's AdminComment too: it names the pod.
    for p in a.iter().chain(&b) {
        let id = job_id_of(p).to_string();
        let key = format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap(),
            p.metadata.name.as_deref().unwrap()
        );
        wait_for(
            &format!("sacct AdminComment of job {id}"),
            TIMEOUT,
            || async {
                let rows = sacct(&env);
                match rows.iter().find(|r| r["JobID"] == id) {
                    Some(r) if r["AdminComment"].contains(&format!("\"{key}\"")) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    env.assert_invariants().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounting_limits_reach_the_pod_and_a_refused_account_is_reported_once() {
    let (env, controllers) = start(3, 3, TENANTS, "root").await;
    // alice may run one job at a time.
    sacctmgr(&env, "modify user alice set MaxJobs=1");
    create(&env, "team-a", "first", json!({})).await;
    let first = env
        .wait_bound_in("team-a", &["first".into()], TIMEOUT)
        .await;
    create(&env, "team-a", "second", json!({})).await;
    let m = wait_reason(&env, "team-a", "second", "SlurmJobPending").await;
    assert!(m.contains("AssocMaxJobsLimit"), "{m}");

    // carol has no association with her tenant's account: Slurm refuses the job for good.
    create(&env, "team-c", "unpaid", json!({})).await;
    let m = wait_reason(&env, "team-c", "unpaid", "SlurmSubmitFailed").await;
    assert!(m.to_lowercase().contains("account"), "{m}");
    // Still one Event, and no job, after the second pod's job has started (it waits for the
    // first's to end, which needs several of the scheduler's passes).
    Api::<Pod>::namespaced(env.kube.clone(), "team-a")
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_job_ended(job_id_of(&first[0]), TIMEOUT).await;
    env.wait_pod_gone("team-a", "first", TIMEOUT).await;
    let started = Instant::now();
    env.wait_bound_in("team-a", &["second".into()], TIMEOUT)
        .await;
    eprintln!(
        "second pod bound {:?} after the first job ended",
        started.elapsed()
    );
    assert_eq!(
        events(&env, "team-c", "unpaid", "SlurmSubmitFailed")
            .await
            .len(),
        1,
        "reported once"
    );
    assert_eq!(
        env.slurm_job_ids().len(),
        2,
        "no job for the refused account"
    );
    env.assert_invariants().await;
    controllers.stop().await;
}

/// Least privilege: a bridge whose token is an AdminLevel=Admin user's (not root, not SlurmUser)
/// registers external nodes and charges each tenant's jobs to its account, as itself; tenants
/// here name no user (only SlurmUser or root may submit for another user: Slurm 26.05 answers
/// "Requested UID=... doesn't match user UID=..."), and authors still cannot choose one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_level_bridge_registers_nodes_and_charges_tenants_accounts() {
    let tenants =
        "tenants:\n  - {name: team-a, namespaces: [team-a], account: team-a, qos: [normal]}\n";
    // node-3 is a Kubernetes node Slurm does not know yet: the node controller creates it.
    let (env, controllers) = start(2, 3, tenants, "slurm-bridge").await;
    wait_for("node-3 registered in Slurm", TIMEOUT, || async {
        let out = env
            .slurm
            .exec(&["scontrol", "show", "node", "node-3"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap();
        if out.contains("NodeName=node-3 ") {
            Ok(())
        } else {
            Err(out)
        }
    })
    .await;
    create(&env, "team-a", "plain", json!({})).await;
    create(
        &env,
        "team-a",
        "as-alice",
        json!({"slurmjob.slinky.slurm.net/user-id": "alice"}),
    )
    .await;
    let bound = env
        .wait_bound_in("team-a", &["plain".into()], TIMEOUT)
        .await;
    let job = env.scontrol_job(job_id_of(&bound[0]));
    for want in ["UserId=slurm-bridge(2100)", "Account=team-a ", "QOS=normal"] {
        assert!(job.contains(want), "missing {want} in {job}");
    }
    let m = wait_reason(&env, "team-a", "as-alice", "NotAllowedByTenant").await;
    assert!(m.contains("user-id=\"alice\" is not allowed"), "{m}");
    Api::<Pod>::namespaced(env.kube.clone(), "team-a")
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_job_ended(job_id_of(&bound[0]), TIMEOUT).await;
    env.wait_pod_gone("team-a", "plain", TIMEOUT).await;
    env.assert_invariants().await;
    controllers.stop().await;
}
