//! Tests of the node descriptions, the nodes file, and the Node and Lease objects written.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

#[test]
fn standard_nodes_match_slurm_testenv_names() {
    let nodes = standard_nodes(3);
    let names: Vec<_> = nodes.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["node-1", "node-2", "node-3"]);
    assert_eq!(nodes[0].capacity["cpu"], "8");
    assert_eq!(nodes[0].allocatable["memory"], "16000Mi");
    assert_eq!(nodes[0].allocatable["pods"], "110");
    assert_eq!(nodes[0].normalized(), nodes[0]);
    let n = build_node(&nodes[1], 1);
    assert_eq!(
        n.metadata.labels.as_ref().unwrap()["kubernetes.io/hostname"],
        "node-2"
    );
    let spec = n.spec.unwrap();
    assert!(spec.pod_cidr.is_none() && spec.taints.is_none());
    let st = n.status.unwrap();
    let ready = st
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(st.capacity.unwrap()["pods"].0, "110");
    assert_eq!(st.node_info.unwrap().kubelet_version, "v1.36.3");
    assert_eq!(st.addresses.unwrap()[0].address, "172.18.0.3");
}

#[test]
fn nodes_file_forms() {
    let yaml = r#"
nodes:
  - name: gpu-1
    labels: {zone: a}
    capacity: {cpu: "32", nvidia.com/gpu: 4, pods: 110}
    allocatable: {cpu: "31"}
    taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
  - name: cpu-1
"#;
    let e = parse_nodes_yaml(yaml).unwrap();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].taints[0].effect, "NoSchedule");
    assert_eq!(e[0].allocatable["cpu"], "31");
    assert_eq!(e[0].allocatable["nvidia.com/gpu"], "4");
    assert_eq!(e[0].capacity["pods"], "110");
    assert_eq!(e[0].capacity["memory"], "16000Mi");
    assert_eq!(e[1], NodeSpec::standard("cpu-1"));
    let list = parse_nodes_yaml("- name: a\n- name: b\n").unwrap();
    assert_eq!(list.len(), 2);
    let err = parse_nodes_yaml("nodes:\n  - name: a\n    colour: red\n").unwrap_err();
    assert!(err.to_string().contains("colour"), "{err}");
}

#[test]
fn bad_nodes_are_rejected() {
    let err = parse_nodes_yaml("- name: a\n- name: a\n").unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    let err = parse_nodes_yaml("- name: Node_1\n").unwrap_err();
    assert!(err.to_string().contains("DNS"), "{err}");
    let err = parse_nodes_yaml("- name: a\n  capacity: {cpu: lots}\n").unwrap_err();
    assert!(err.to_string().contains("quantity"), "{err}");
    let err = parse_nodes_yaml("- name: a\n  capacity: {cpu: -1}\n").unwrap_err();
    assert!(err.to_string().contains("quantity"), "{err}");
    let err = parse_nodes_yaml("- name: a\n  taints: [{key: k, effect: Sometimes}]\n").unwrap_err();
    assert!(err.to_string().contains("effect"), "{err}");
}

#[test]
fn quantity_syntax() {
    for ok in [
        "8", "16000Mi", "0.5", "500m", "1e3", "1E-2", ".5", "+4", "128Gi", "1k",
    ] {
        assert!(is_quantity(ok), "{ok}");
    }
    for bad in ["", "-1", "1.2.3", "Gi", "4GB", "1e", "one", "1 Gi"] {
        assert!(!is_quantity(bad), "{bad}");
    }
}

#[test]
fn heartbeat_keeps_transition_times_unless_the_status_changed() {
    let v = heartbeat_patch(None);
    let conds = v["status"]["conditions"].as_array().unwrap();
    assert_eq!(conds.len(), 4);
    assert!(conds.iter().all(|c| c["lastTransitionTime"].is_string()));
    let current = vec![
        NodeCondition {
            type_: "Ready".into(),
            status: "Unknown".into(),
            last_transition_time: Some(now()),
            ..Default::default()
        },
        NodeCondition {
            type_: "MemoryPressure".into(),
            status: "False".into(),
            last_transition_time: Some(now()),
            ..Default::default()
        },
    ];
    let v = heartbeat_patch(Some(&current));
    let conds = v["status"]["conditions"].as_array().unwrap();
    let get = |t: &str| conds.iter().find(|c| c["type"] == t).unwrap().clone();
    assert!(get("Ready")["lastTransitionTime"].is_string());
    assert_eq!(get("Ready")["status"], "True");
    assert!(get("MemoryPressure").get("lastTransitionTime").is_none());
    assert!(get("MemoryPressure")["lastHeartbeatTime"].is_string());
    assert!(get("DiskPressure")["lastTransitionTime"].is_string());
}

#[test]
fn re_registration_keeps_transition_times_and_drops_stale_resources() {
    let spec = NodeSpec::standard("node-1");
    let fresh = registration_status_patch(&spec, 0, None);
    assert_eq!(fresh["status"]["capacity"]["cpu"], "8");
    assert_eq!(
        fresh["status"]["nodeInfo"]["kubeletVersion"],
        KUBELET_VERSION
    );
    let old_t = Time("2020-01-01T00:00:00Z".parse().unwrap());
    let existing = NodeStatus {
        capacity: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("4".into())),
            ("nvidia.com/gpu".to_string(), Quantity("2".into())),
        ])),
        conditions: Some(vec![
            NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(old_t.clone()),
                ..Default::default()
            },
            NodeCondition {
                type_: "DiskPressure".into(),
                status: "True".into(),
                last_transition_time: Some(old_t),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    let v = registration_status_patch(&spec, 0, Some(&existing));
    let st = &v["status"];
    assert_eq!(st["capacity"]["cpu"], "8");
    assert!(st["capacity"]["nvidia.com/gpu"].is_null());
    assert!(
        st["capacity"]
            .as_object()
            .unwrap()
            .contains_key("nvidia.com/gpu")
    );
    let conds = st["conditions"].as_array().unwrap();
    let get = |t: &str| conds.iter().find(|c| c["type"] == t).unwrap().clone();
    assert_eq!(get("Ready")["lastTransitionTime"], "2020-01-01T00:00:00Z");
    assert_ne!(
        get("DiskPressure")["lastTransitionTime"],
        "2020-01-01T00:00:00Z"
    );
}

#[test]
fn lease_shape() {
    let l = build_lease("node-1", "uid-1", 40);
    let v = serde_json::to_value(&l).unwrap();
    assert_eq!(v["metadata"]["namespace"], LEASE_NAMESPACE);
    assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(v["spec"]["holderIdentity"], "node-1");
    assert_eq!(v["spec"]["leaseDurationSeconds"], 40);
    let p = lease_renew_patch("node-1", "uid-1", 40);
    assert!(p["spec"]["renewTime"].as_str().unwrap().ends_with('Z'));
}
