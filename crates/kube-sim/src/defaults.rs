//! Type-specific behaviour of the built-in types: defaulting on create, the status a create
//! starts with, basic validation (names, required fields) and pod spec immutability.

use serde_json::{Map, Value, json};

use crate::meta;
use crate::registry::ResourceType;

/// Field errors: (field path, message).
pub type Causes = Vec<(String, String)>;

/// Apply defaults and reset status as the real server does on create.
pub fn on_create(rt: &ResourceType, obj: &mut Value) {
    if rt.is("", "pods") {
        default_pod(obj);
    } else if rt.is("", "namespaces") {
        let name = meta::meta_str(obj, "name").to_string();
        let m = meta::meta_mut(obj);
        let labels = m.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
        obj["status"] = json!({"phase": "Active"});
    } else if rt.is("batch", "jobs") {
        default_job(obj);
    } else if rt.is("apiextensions.k8s.io", "customresourcedefinitions") {
        let names = obj
            .get("spec")
            .and_then(|s| s.get("names"))
            .cloned()
            .unwrap_or(json!({}));
        let versions: Vec<Value> = obj
            .get("spec")
            .and_then(|s| s.get("versions"))
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|v| v.get("name").cloned()).collect())
            .unwrap_or_default();
        let now = meta::now_rfc3339();
        obj["status"] = json!({
            "acceptedNames": names,
            "storedVersions": versions,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
        });
    } else if rt.group == "apps" && rt.plural != "daemonsets" {
        if let Some(spec) = obj.get_mut("spec").and_then(|s| s.as_object_mut()) {
            spec.entry("replicas").or_insert(json!(1));
        }
        obj.as_object_mut().map(|o| o.remove("status"));
    } else if rt.has_status() && !rt.is("", "nodes") {
        obj.as_object_mut().map(|o| o.remove("status"));
    }
}

fn default_pod(obj: &mut Value) {
    if !obj.get("spec").is_some_and(|s| s.is_object()) {
        obj["spec"] = json!({});
    }
    let spec = obj["spec"].as_object_mut().expect("object");
    spec.entry("schedulerName")
        .or_insert(json!("default-scheduler"));
    spec.entry("restartPolicy").or_insert(json!("Always"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert(json!(30));
    spec.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    spec.entry("securityContext").or_insert(json!({}));
    spec.entry("enableServiceLinks").or_insert(json!(true));
    spec.entry("preemptionPolicy")
        .or_insert(json!("PreemptLowerPriority"));
    spec.entry("priority").or_insert(json!(0));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(|c| c.as_array_mut()) {
            for c in cs.iter_mut().filter_map(|c| c.as_object_mut()) {
                default_container(c);
            }
        }
    }
    let qos = qos_class(spec);
    obj["status"] = json!({"phase": "Pending", "qosClass": qos});
}

fn default_container(c: &mut Map<String, Value>) {
    let image = c
        .get("image")
        .and_then(|i| i.as_str())
        .unwrap_or("")
        .to_string();
    let tag = image.rsplit('/').next().unwrap_or("");
    let latest = !tag.contains(':') || tag.ends_with(":latest");
    c.entry("imagePullPolicy")
        .or_insert(json!(if latest && !image.contains('@') {
            "Always"
        } else {
            "IfNotPresent"
        }));
    c.entry("terminationMessagePath")
        .or_insert(json!("/dev/termination-log"));
    c.entry("terminationMessagePolicy").or_insert(json!("File"));
    c.entry("resources").or_insert(json!({}));
}

fn qos_class(spec: &Map<String, Value>) -> &'static str {
    let cs: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(|c| c.as_array()))
        .flatten()
        .collect();
    let res = |c: &Value, k: &str| {
        c.get("resources")
            .and_then(|r| r.get(k))
            .and_then(|r| r.as_object())
            .cloned()
    };
    if cs.iter().all(|c| {
        res(c, "requests").is_none_or(|r| r.is_empty())
            && res(c, "limits").is_none_or(|r| r.is_empty())
    }) {
        return "BestEffort";
    }
    let guaranteed = cs.iter().all(|c| {
        let limits = res(c, "limits").unwrap_or_default();
        let requests = res(c, "requests").unwrap_or_default();
        ["cpu", "memory"].iter().all(|k| limits.contains_key(*k))
            && requests.iter().all(|(k, v)| limits.get(k) == Some(v))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn default_job(obj: &mut Value) {
    let uid = meta::meta_str(obj, "uid").to_string();
    let name = meta::meta_str(obj, "name").to_string();
    obj.as_object_mut().map(|o| o.remove("status"));
    if !obj.get("spec").is_some_and(|s| s.is_object()) {
        return;
    }
    let spec = obj["spec"].as_object_mut().expect("object");
    spec.entry("parallelism").or_insert(json!(1));
    spec.entry("completions").or_insert(json!(1));
    spec.entry("backoffLimit").or_insert(json!(6));
    spec.entry("completionMode").or_insert(json!("NonIndexed"));
    spec.entry("suspend").or_insert(json!(false));
    spec.entry("podReplacementPolicy")
        .or_insert(json!("TerminatingOrFailed"));
    let manual = spec
        .get("manualSelector")
        .and_then(|m| m.as_bool())
        .unwrap_or(false);
    if !manual && !uid.is_empty() {
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        if let Some(t) = spec.get_mut("template").and_then(|t| t.as_object_mut()) {
            let md = t.entry("metadata").or_insert_with(|| json!({}));
            if let Some(md) = md.as_object_mut() {
                let labels = md.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
                    l.insert("batch.kubernetes.io/job-name".into(), json!(name));
                    l.insert("controller-uid".into(), json!(uid));
                    l.insert("job-name".into(), json!(name));
                }
            }
        }
    }
}

/// Basic validation: names, namespace presence, required fields of pods and jobs.
pub fn validate(rt: &ResourceType, obj: &Value) -> Causes {
    let mut c = Causes::new();
    let name = meta::meta_str(obj, "name");
    let check = if rt.is("", "namespaces") || rt.is("", "services") {
        meta::check_dns_label(name)
    } else {
        meta::check_dns_subdomain(name)
    };
    if let Some(m) = check {
        c.push(("metadata.name".into(), format!("{name:?}: {m}")));
    }
    if rt.namespaced && meta::meta_str(obj, "namespace").is_empty() {
        c.push(("metadata.namespace".into(), "\"\": Required value".into()));
    }
    if let Some(labels) = meta::labels(obj) {
        for (k, v) in labels {
            let ok = v.as_str().is_some_and(|s| {
                s.len() <= 63
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            });
            if !ok {
                c.push((format!("metadata.labels[{k}]"), format!("{v}: a valid label value must be 63 characters or less and consist of alphanumerics, '-', '_' or '.'")));
            }
        }
    }
    if rt.is("", "pods") {
        match obj
            .get("spec")
            .and_then(|s| s.get("containers"))
            .and_then(|c| c.as_array())
        {
            Some(cs) if !cs.is_empty() => {
                for (i, ct) in cs.iter().enumerate() {
                    let n = ct.get("name").and_then(|n| n.as_str()).unwrap_or("");
                    if let Some(m) = meta::check_dns_label(n) {
                        c.push((format!("spec.containers[{i}].name"), format!("{n:?}: {m}")));
                    }
                    if ct
                        .get("image")
                        .and_then(|n| n.as_str())
                        .unwrap_or("")
                        .is_empty()
                    {
                        c.push((
                            format!("spec.containers[{i}].image"),
                            "\"\": Required value".into(),
                        ));
                    }
                }
            }
            _ => c.push(("spec.containers".into(), "null: Required value".into())),
        }
    }
    if rt.is("batch", "jobs") && obj.get("spec").and_then(|s| s.get("template")).is_none() {
        c.push(("spec.template".into(), "null: Required value".into()));
    }
    c
}

/// Pod spec fields an update may change (the rest is immutable, as in the real server).
pub fn pod_spec_update_error(old: &Value, new: &Value) -> Option<String> {
    let mask = |spec: Option<&Value>, gated: bool| -> Value {
        let mut s = spec.cloned().unwrap_or(json!({}));
        if let Some(o) = s.as_object_mut() {
            for k in [
                "activeDeadlineSeconds",
                "tolerations",
                "schedulingGates",
                "terminationGracePeriodSeconds",
            ] {
                o.remove(k);
            }
            if gated {
                o.remove("nodeSelector");
                o.remove("affinity");
            }
            for list in ["containers", "initContainers"] {
                if let Some(cs) = o.get_mut(list).and_then(|c| c.as_array_mut()) {
                    for ct in cs.iter_mut().filter_map(|c| c.as_object_mut()) {
                        ct.remove("image");
                        ct.remove("resources");
                    }
                }
            }
        }
        s
    };
    let gated = old
        .get("spec")
        .and_then(|s| s.get("schedulingGates"))
        .and_then(|g| g.as_array())
        .is_some_and(|g| !g.is_empty());
    if mask(old.get("spec"), gated) != mask(new.get("spec"), gated) {
        return Some(
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, \
             `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions \
             to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was \
             previously negative)"
                .into(),
        );
    }
    let gates = |v: &Value| -> Vec<Value> {
        v.get("spec")
            .and_then(|s| s.get("schedulingGates"))
            .and_then(|g| g.as_array())
            .cloned()
            .unwrap_or_default()
    };
    let (og, ng) = (gates(old), gates(new));
    if ng.iter().any(|g| !og.contains(g)) {
        return Some("Forbidden: only deletion is allowed, but found new scheduling gate".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn pod_defaults_and_validation() {
        let reg = Registry::builtin();
        let (_, pods) = reg.lookup("", "v1", "pods").unwrap();
        let mut p = json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": "Running"}});
        on_create(&pods, &mut p);
        assert_eq!(p["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        assert!(validate(&pods, &p).is_empty());
        let bad = json!({"metadata": {"name": "Bad_Name", "namespace": "default"}, "spec": {}});
        assert_eq!(validate(&pods, &bad).len(), 2);
        let mut q = p.clone();
        q["spec"]["nodeSelector"] = json!({"a": "b"});
        assert!(pod_spec_update_error(&p, &q).is_some());
        let mut q = p.clone();
        q["spec"]["containers"][0]["image"] = json!("other");
        assert!(pod_spec_update_error(&p, &q).is_none());
    }
}
