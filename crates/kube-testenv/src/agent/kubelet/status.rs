//! The `pods/status` patches the kubelet writes: running, waiting to restart, terminal.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::super::util::{now, sha1_hex};
use super::state::PodState;
use super::{KILLED_EXIT_CODE, KUBELET_CONDITIONS};

/// A restartable init container (sidecar): runs alongside the main containers.
pub(super) fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// ID of the `run`-th run (from 0) of a container.
pub(super) fn container_id(s: &PodState, name: &str, run: i32) -> String {
    format!(
        "containerd://{}",
        sha1_hex(&format!("{}/{name}/{run}", s.uid))
    )
}

pub(super) fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    format!("{repo}@sha256:{}{}", sha1_hex(image), &sha1_hex(repo)[..24])
}

pub(super) fn condition(
    s: &PodState,
    type_: &str,
    status: bool,
    reason: Option<&str>,
    t: &Time,
) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.map(Into::into),
        last_transition_time: Some(t.clone()),
        observed_generation: s.pod.metadata.generation,
        ..Default::default()
    }
}

/// The kubelet's conditions, plus PodScheduled when the pod has none (a pod created with
/// `spec.nodeName` set); the others' conditions are kept by the strategic merge.
pub(super) fn with_scheduled(s: &PodState, mut ours: Vec<PodCondition>) -> Vec<PodCondition> {
    debug_assert!(
        ours.iter()
            .all(|c| KUBELET_CONDITIONS.contains(&c.type_.as_str()))
    );
    let scheduled = s
        .pod
        .status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled"));
    if !scheduled {
        ours.insert(0, condition(s, "PodScheduled", true, None, &s.start_time));
    }
    ours
}

pub(super) fn terminated(
    code: i32,
    started: Option<Time>,
    finished: Time,
    id: String,
) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
            started_at: started,
            finished_at: Some(finished),
            container_id: Some(id),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Status fields common to every write. `end` is the exit code and time the sidecars ended
/// with, `None` while they run.
pub(super) fn base_status(
    s: &PodState,
    phase: &str,
    conditions: Vec<PodCondition>,
    end: Option<(i32, &Time)>,
) -> PodStatus {
    let t = s.start_time.clone();
    let init_statuses: Vec<ContainerStatus> = s
        .pod
        .spec
        .as_ref()
        .and_then(|p| p.init_containers.as_ref())
        .map(|ics| {
            ics.iter()
                .map(|c| {
                    let image = c.image.clone().unwrap_or_default();
                    let id = container_id(s, &c.name, 0);
                    let (state, running) = match (is_sidecar(c), end) {
                        (true, None) => (
                            ContainerState {
                                running: Some(ContainerStateRunning {
                                    started_at: Some(t.clone()),
                                }),
                                ..Default::default()
                            },
                            true,
                        ),
                        (true, Some((code, at))) => (
                            terminated(code, Some(t.clone()), at.clone(), id.clone()),
                            false,
                        ),
                        (false, _) => {
                            (terminated(0, Some(t.clone()), t.clone(), id.clone()), false)
                        }
                    };
                    ContainerStatus {
                        name: c.name.clone(),
                        image_id: image_id(&image),
                        image,
                        container_id: Some(id),
                        ready: running || (!is_sidecar(c)),
                        started: Some(running),
                        restart_count: 0,
                        state: Some(state),
                        ..Default::default()
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    PodStatus {
        observed_generation: s.pod.metadata.generation,
        phase: Some(phase.into()),
        conditions: Some(with_scheduled(s, conditions)),
        host_ip: Some(s.host_ip.clone()),
        pod_ip: Some(s.pod_ip.clone()),
        start_time: Some(t),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ..Default::default()
    }
}

pub(super) fn containers(s: &PodState) -> Vec<(String, String)> {
    s.pod
        .spec
        .as_ref()
        .map(|p| {
            p.containers
                .iter()
                .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// `lastState` of a container that ran before: how the previous run ended.
pub(super) fn last_state(s: &PodState, name: &str, prev_run: i32) -> Option<ContainerState> {
    let last = s.last_exit.as_ref()?;
    Some(terminated(
        last.code,
        Some(last.started.clone()),
        last.finished.clone(),
        container_id(s, name, prev_run.max(0)),
    ))
}

/// The strategic-merge patch for `pods/status`: the status with `podIPs`/`hostIPs` replaced
/// (not merged by IP, so `podIP == podIPs[0]` holds) and the pod's UID as a precondition.
pub(super) fn to_patch(s: &PodState, status: PodStatus) -> serde_json::Value {
    let mut st = serde_json::to_value(status).unwrap_or_default();
    st["podIPs"] = serde_json::json!([{ "$patch": "replace" }, { "ip": s.pod_ip }]);
    st["hostIPs"] = serde_json::json!([{ "$patch": "replace" }, { "ip": s.host_ip }]);
    serde_json::json!({ "metadata": { "uid": s.uid }, "status": st })
}

/// Every container's status: `state` of each container (by name), ready (and started) or not,
/// and `lastState` naming run `last_run` (none when nothing ran before).
fn container_statuses(
    s: &PodState,
    ready: bool,
    last_run: i32,
    state: impl Fn(&str) -> ContainerState,
) -> Vec<ContainerStatus> {
    containers(s)
        .into_iter()
        .map(|(name, image)| ContainerStatus {
            image_id: image_id(&image),
            container_id: Some(container_id(s, &name, s.restart_count)),
            ready,
            started: Some(ready),
            restart_count: s.restart_count,
            state: Some(state(&name)),
            last_state: last_state(s, &name, last_run),
            name,
            image,
            ..Default::default()
        })
        .collect()
}

/// Status of a pod whose containers run.
pub(super) fn running_status(s: &PodState) -> serde_json::Value {
    let t = s.run_started_wall.clone();
    let conds = vec![
        condition(s, "PodReadyToStartContainers", true, None, &s.start_time),
        condition(s, "Initialized", true, None, &s.start_time),
        condition(s, "ContainersReady", true, None, &t),
        condition(s, "Ready", true, None, &t),
    ];
    let mut st = base_status(s, "Running", conds, None);
    st.container_statuses = Some(container_statuses(s, true, s.restart_count - 1, |_| {
        ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(t.clone()),
            }),
            ..Default::default()
        }
    }));
    to_patch(s, st)
}

/// Status of a pod whose containers crashed and wait to be restarted.
pub(super) fn waiting_status(s: &PodState) -> serde_json::Value {
    let t = now();
    let conds = vec![
        condition(s, "PodReadyToStartContainers", true, None, &s.start_time),
        condition(s, "Initialized", true, None, &s.start_time),
        condition(s, "ContainersReady", false, Some("ContainersNotReady"), &t),
        condition(s, "Ready", false, Some("ContainersNotReady"), &t),
    ];
    let mut st = base_status(s, "Running", conds, None);
    st.container_statuses = Some(container_statuses(s, false, s.restart_count, |name| {
        ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: Some(format!("back-off restarting failed container {name}")),
            }),
            ..Default::default()
        }
    }));
    to_patch(s, st)
}

/// Status of a pod whose containers have ended with `code` (137 when killed).
pub(super) fn terminal_status(s: &PodState, code: i32) -> serde_json::Value {
    let t = now();
    let succeeded = code == 0;
    let reason = if succeeded {
        "PodCompleted"
    } else {
        "PodFailed"
    };
    let conds = vec![
        condition(s, "PodReadyToStartContainers", false, None, &t),
        condition(s, "Initialized", true, None, &s.start_time),
        condition(s, "ContainersReady", false, Some(reason), &t),
        condition(s, "Ready", false, Some(reason), &t),
    ];
    let phase = if succeeded { "Succeeded" } else { "Failed" };
    // Sidecars are stopped once the main containers end: a clean exit unless killed.
    let sidecar_code = if code == KILLED_EXIT_CODE { code } else { 0 };
    let mut st = base_status(s, phase, conds, Some((sidecar_code, &t)));
    st.container_statuses = Some(container_statuses(s, false, s.restart_count - 1, |name| {
        terminated(
            code,
            Some(s.run_started_wall.clone()),
            t.clone(),
            container_id(s, name, s.restart_count),
        )
    }));
    to_patch(s, st)
}

#[cfg(test)]
mod tests {
    use super::super::super::runtime::RunPlan;
    use super::super::state::{LastExit, Phase, will_restart};
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use std::collections::VecDeque;
    use std::time::Duration;
    use tokio::time::Instant;

    fn state(restart: &str, plan: RunPlan) -> PodState {
        let mut pod = Pod {
            spec: Some(PodSpec {
                restart_policy: Some(restart.into()),
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("busybox:1.36".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.metadata.generation = Some(1);
        PodState {
            uid: "u1".into(),
            pod,
            phase: Phase::Running,
            plan,
            run_started: Instant::now(),
            start_time: now(),
            run_started_wall: now(),
            pod_ip: "10.64.0.2".into(),
            host_ip: "172.18.0.2".into(),
            restart_count: 0,
            last_exit: None,
            deleting: None,
            delete_enqueued: false,
            gen_: 0,
            busy: false,
            queue: VecDeque::new(),
        }
    }

    fn forever() -> RunPlan {
        RunPlan {
            duration: None,
            exit_code: 0,
        }
    }

    #[test]
    fn restart_policies() {
        let ok = RunPlan {
            duration: Some(Duration::ZERO),
            exit_code: 0,
        };
        let bad = RunPlan {
            duration: Some(Duration::ZERO),
            exit_code: 2,
        };
        assert!(!will_restart(&state("Never", bad)));
        assert!(will_restart(&state("Always", ok)));
        assert!(will_restart(&state("OnFailure", bad)));
        assert!(!will_restart(&state("OnFailure", ok)));
    }

    #[test]
    fn status_shapes() {
        let s = state("Never", forever());
        let v = running_status(&s);
        assert_eq!(v["metadata"]["uid"], "u1");
        assert!(v.get("spec").is_none(), "status patches never touch spec");
        let st = &v["status"];
        assert_eq!(st["phase"], "Running");
        assert_eq!(st["observedGeneration"], 1);
        // podIP is podIPs[0], and the lists replace the server's instead of merging.
        assert_eq!(st["podIP"], "10.64.0.2");
        assert_eq!(st["podIPs"][0]["$patch"], "replace");
        assert_eq!(st["podIPs"][1]["ip"], "10.64.0.2");
        assert_eq!(st["hostIP"], "172.18.0.2");
        assert_eq!(st["hostIPs"][1]["ip"], "172.18.0.2");
        assert_eq!(st["containerStatuses"][0]["name"], "main");
        assert_eq!(st["containerStatuses"][0]["ready"], true);
        assert!(st["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
        assert!(st["containerStatuses"][0].get("lastState").is_none());
        let conds = st["conditions"].as_array().unwrap();
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        );
        assert!(conds.iter().any(|c| c["type"] == "PodScheduled"));

        let v = terminal_status(&s, 137);
        assert_eq!(v["status"]["phase"], "Failed");
        let term = &v["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(term["exitCode"], 137);
        assert_eq!(term["reason"], "Error");
        let v = terminal_status(&s, 0);
        assert_eq!(v["status"]["phase"], "Succeeded");
        assert_eq!(
            v["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }

    #[test]
    fn existing_pod_scheduled_condition_is_left_to_its_writer() {
        let mut s = state("Never", forever());
        s.pod.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let v = running_status(&s);
        let conds = v["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 4);
        assert!(conds.iter().all(|c| c["type"] != "PodScheduled"));
    }

    #[test]
    fn restarts_record_the_previous_run() {
        let mut s = state(
            "Always",
            RunPlan {
                duration: Some(Duration::ZERO),
                exit_code: 3,
            },
        );
        s.last_exit = Some(LastExit {
            code: 3,
            started: now(),
            finished: now(),
        });
        let v = waiting_status(&s);
        let cs = &v["status"]["containerStatuses"][0];
        assert!(cs["state"]["waiting"].is_object());
        assert_eq!(cs["restartCount"], 0);
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 3);
        assert_eq!(
            cs["lastState"]["terminated"]["containerID"],
            cs["containerID"]
        );
        s.restart_count = 1;
        let v = running_status(&s);
        let cs2 = &v["status"]["containerStatuses"][0];
        assert_eq!(cs2["restartCount"], 1);
        assert_eq!(
            cs2["lastState"]["terminated"]["containerID"],
            cs["containerID"]
        );
        assert_ne!(cs2["containerID"], cs["containerID"]);
    }

    #[test]
    fn init_containers_and_sidecars() {
        let mut s = state("Never", forever());
        s.pod.spec.as_mut().unwrap().init_containers = Some(vec![
            Container {
                name: "setup".into(),
                image: Some("busybox".into()),
                ..Default::default()
            },
            Container {
                name: "proxy".into(),
                image: Some("envoy".into()),
                restart_policy: Some("Always".into()),
                ..Default::default()
            },
        ]);
        let v = running_status(&s);
        let ics = v["status"]["initContainerStatuses"].as_array().unwrap();
        assert_eq!(ics[0]["name"], "setup");
        assert_eq!(ics[0]["state"]["terminated"]["exitCode"], 0);
        assert!(ics[1]["state"]["running"].is_object());
        assert_eq!(ics[1]["ready"], true);
        let v = terminal_status(&s, 0);
        let ics = v["status"]["initContainerStatuses"].as_array().unwrap();
        assert_eq!(ics[1]["state"]["terminated"]["exitCode"], 0);
        assert_eq!(ics[1]["ready"], false);
    }
}
