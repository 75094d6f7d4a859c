//! The simulated JobSet controller, through the real kube-rs client against kube-sim.

mod sim_common;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, PropagationPolicy,
};
use kube::{Api, ResourceExt};
use serde_json::json;
use sim_common::*;

fn jobset_api(client: kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    };
    Api::namespaced_with(client, ns, &ar)
}

fn jobset(name: &str, sleep: &str) -> DynamicObject {
    let template = |parallelism: i32| {
        json!({
            "metadata": {"labels": {"tier": "batch"}},
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": 0,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", sleep]}],
                }},
            },
        })
    };
    from_json(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": template(1)},
            {"name": "workers", "replicas": 2, "template": template(2)},
        ]},
    }))
}

#[tokio::test]
async fn jobset_with_two_replicated_jobs_creates_labelled_jobs_and_completes() {
    let sim = start(3).await;
    let client = sim.client();
    let sets = jobset_api(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let js = sets
        .create(&PostParams::default(), &jobset("train", "0.5"))
        .await
        .unwrap();
    let js_uid = js.uid().unwrap();

    let lp = ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=train");
    let list = wait_list(&jobs, &lp, "3 jobs", |js| js.len() == 3).await;
    let mut names: Vec<String> = list.iter().map(|j| j.name_any()).collect();
    names.sort();
    assert_eq!(
        names,
        ["train-driver-0", "train-workers-0", "train-workers-1"]
    );
    for j in &list {
        let l = j.labels();
        let (rj, idx) = if j.name_any() == "train-driver-0" {
            ("driver", "0")
        } else {
            ("workers", &j.name_any()[14..])
        };
        assert_eq!(l["jobset.sigs.k8s.io/jobset-name"], "train");
        assert_eq!(l["jobset.sigs.k8s.io/replicatedjob-name"], rj);
        assert_eq!(l["jobset.sigs.k8s.io/job-index"], idx);
        assert_eq!(l["jobset.sigs.k8s.io/global-replicas"], "3");
        assert_eq!(l["jobset.sigs.k8s.io/restart-attempt"], "0");
        assert_eq!(l["jobset.sigs.k8s.io/job-key"].len(), 40);
        assert_eq!(l["tier"], "batch");
        assert_eq!(j.annotations()["jobset.sigs.k8s.io/replicatedjob-name"], rj);
        let owner = controller_ref(j);
        assert_eq!(owner.api_version, "jobset.x-k8s.io/v1alpha2");
        assert_eq!(owner.kind, "JobSet");
        assert_eq!(owner.uid, js_uid);
        assert_eq!(
            j.spec.as_ref().unwrap().completion_mode.as_deref(),
            Some("Indexed")
        );
    }

    // Pods: one for the driver, two per worker Job, each with Job and JobSet labels.
    let ps = wait_list(&pods, &lp, "5 pods", |ps| ps.len() == 5).await;
    for p in &ps {
        let l = p.labels();
        let job_name = &l["job-name"];
        assert!(p.name_any().starts_with(&format!("{job_name}-")));
        assert_eq!(l["jobset.sigs.k8s.io/jobset-name"], "train");
        assert!(l.contains_key("jobset.sigs.k8s.io/replicatedjob-name"));
        assert!(l.contains_key("batch.kubernetes.io/job-completion-index"));
        assert_eq!(controller_ref(p).kind, "Job");
        assert_eq!(&controller_ref(p).name, job_name);
        assert_eq!(p.spec.as_ref().unwrap().subdomain.as_deref(), Some("train"));
    }

    let sched = scheduler(client.clone(), "default", 3);
    let done = wait_for(&sets, "train", "Completed", |o| {
        o.data["status"]["terminalState"] == "Completed"
    })
    .await;
    sched.abort();
    let st = &done.data["status"];
    let conds = st["conditions"].as_array().unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Completed" && c["status"] == "True")
    );
    let rjs = st["replicatedJobsStatus"].as_array().unwrap();
    let workers = rjs.iter().find(|r| r["name"] == "workers").unwrap();
    assert_eq!(workers["succeeded"], 2);
    for j in jobs.list(&lp).await.unwrap().items {
        let conds = j.status.unwrap().conditions.unwrap();
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True"),
            "{}",
            j.metadata.name.unwrap()
        );
    }

    // Deleting the JobSet deletes its Jobs and, through them, the pods.
    let bg = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    sets.delete("train", &bg).await.unwrap();
    wait_list(&jobs, &lp, "no jobs", |js| js.is_empty()).await;
    wait_list(&pods, &lp, "no pods", |ps| ps.is_empty()).await;
    sim.stop().await;
}

#[tokio::test]
async fn jobset_fails_when_a_job_fails() {
    let sim = start(1).await;
    let client = sim.client();
    let sets = jobset_api(client.clone(), "default");
    let mut js = jobset("broken", "infinity");
    js.data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] =
        json!({"annotations": {"kube-sim/duration": "0.2", "kube-sim/exit-code": "1"}});
    sets.create(&PostParams::default(), &js).await.unwrap();
    let sched = scheduler(client.clone(), "default", 1);
    let failed = wait_for(&sets, "broken", "Failed", |o| {
        o.data["status"]["terminalState"] == "Failed"
    })
    .await;
    sched.abort();
    let conds = failed.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Failed" && c["status"] == "True")
    );
    // The still-running worker Jobs are deleted once the JobSet has failed.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().labels("jobset.sigs.k8s.io/replicatedjob-name=workers");
    wait_list(&jobs, &lp, "worker Jobs deleted", |js| {
        js.iter().all(|j| j.metadata.deletion_timestamp.is_some())
    })
    .await;
    sim.stop().await;
}

#[tokio::test]
async fn failure_policy_max_restarts_recreates_the_jobs_once() {
    let sim = start(1).await;
    let client = sim.client();
    let sets = jobset_api(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let mut js = jobset("retry", "infinity");
    js.data["spec"]["failurePolicy"] = json!({"maxRestarts": 1});
    js.data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] =
        json!({"annotations": {"kube-sim/duration": "0.3", "kube-sim/exit-code": "1"}});
    sets.create(&PostParams::default(), &js).await.unwrap();
    let sched = scheduler(client.clone(), "default", 1);
    // After the first failure the Jobs come back with restart-attempt 1.
    let lp = ListParams::default().labels("jobset.sigs.k8s.io/restart-attempt=1");
    wait_list(&jobs, &lp, "3 jobs of attempt 1", |js| js.len() == 3).await;
    let failed = wait_for(&sets, "retry", "Failed", |o| {
        o.data["status"]["terminalState"] == "Failed"
    })
    .await;
    sched.abort();
    assert_eq!(failed.data["status"]["restarts"], 1);
    sim.stop().await;
}
