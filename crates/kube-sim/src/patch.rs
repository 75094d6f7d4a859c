//! Patch types: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes strategic
//! merge patch with the list merge keys of the core types served.

use serde_json::{Map, Value};

/// Patch content types the server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
}

impl PatchKind {
    /// Map a Content-Type to a patch kind; `None` means 415 Unsupported Media Type.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            _ => None,
        }
    }
}

/// Apply a patch body to `doc`; the error is a message for a 422/400 Status.
pub fn apply(kind: PatchKind, doc: &mut Value, body: &[u8]) -> Result<(), String> {
    match kind {
        PatchKind::Merge => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| format!("invalid JSON patch body: {e}"))?;
            if !p.is_object() {
                return Err("merge patch must be a JSON object".into());
            }
            json_patch::merge(doc, &p);
            Ok(())
        }
        PatchKind::Json => {
            let p: json_patch::Patch =
                serde_json::from_slice(body).map_err(|e| format!("invalid JSON patch: {e}"))?;
            json_patch::patch(doc, &p).map_err(|e| {
                format!("the server rejected our request due to an error in our request: {e}")
            })
        }
        PatchKind::Strategic => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| format!("invalid JSON patch body: {e}"))?;
            let Value::Object(p) = p else {
                return Err("strategic merge patch must be a JSON object".into());
            };
            let orig = std::mem::take(doc);
            *doc = strategic_merge_map(orig, p)?;
            Ok(())
        }
    }
}

/// How a list field is merged by a strategic merge patch.
#[derive(Debug, PartialEq)]
enum ListStrategy {
    Replace,
    MergeKey(&'static str),
    Set,
}

/// The merge strategy of a list field, by field name (the served core types use each name
/// consistently; `ports` is keyed by `containerPort` in pods and by `port` in services).
fn list_strategy(field: &str, sample: &[Value]) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "secrets"
        | "resourceClaims"
        | "schedulingGates" => ListStrategy::MergeKey("name"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        "conditions" | "addresses" => ListStrategy::MergeKey("type"),
        "ownerReferences" => ListStrategy::MergeKey("uid"),
        "hostAliases" | "podIPs" | "hostIPs" => ListStrategy::MergeKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeKey("topologyKey"),
        "finalizers" => ListStrategy::Set,
        "ports" => {
            if sample.iter().any(|e| e.get("containerPort").is_some()) {
                ListStrategy::MergeKey("containerPort")
            } else if sample.iter().any(|e| e.get("port").is_some()) {
                ListStrategy::MergeKey("port")
            } else {
                ListStrategy::Replace
            }
        }
        _ => ListStrategy::Replace,
    }
}

fn strip_directives(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_directives).collect()),
        v => v,
    }
}

fn strategic_merge_map(orig: Value, mut patch: Map<String, Value>) -> Result<Value, String> {
    match patch.remove("$patch").as_ref().and_then(|v| v.as_str()) {
        Some("replace") => return Ok(strip_directives(Value::Object(patch))),
        Some("delete") => return Ok(Value::Null),
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch type {other:?}")),
    }
    let retain = patch.remove("$retainKeys");
    let mut out = match orig {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let mut deletes: Vec<(String, Vec<Value>)> = Vec::new();
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let Value::Array(a) = v {
                deletes.push((field.to_string(), a));
            }
            continue;
        }
        if k.starts_with("$setElementOrder/") || k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                out.remove(&k);
            }
            Value::Object(pm) => {
                let cur = out.remove(&k).unwrap_or(Value::Null);
                let merged = strategic_merge_map(cur, pm)?;
                if !merged.is_null() {
                    out.insert(k, merged);
                }
            }
            Value::Array(pa) => {
                let cur = out.remove(&k);
                let merged = merge_list(&k, cur, pa)?;
                out.insert(k, merged);
            }
            v => {
                out.insert(k, v);
            }
        }
    }
    for (field, values) in deletes {
        if let Some(Value::Array(a)) = out.get_mut(&field) {
            a.retain(|x| !values.contains(x));
        }
    }
    if let Some(Value::Array(keys)) = retain {
        let keep: Vec<&str> = keys.iter().filter_map(|k| k.as_str()).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Value::Object(out))
}

fn merge_list(field: &str, cur: Option<Value>, patch: Vec<Value>) -> Result<Value, String> {
    let cur = match cur {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    // `[{"$patch": "replace"}, ...]` replaces the whole list.
    if patch
        .iter()
        .any(|e| e.get("$patch").and_then(|p| p.as_str()) == Some("replace"))
    {
        return Ok(Value::Array(
            patch
                .into_iter()
                .filter(|e| e.get("$patch").is_none())
                .map(strip_directives)
                .collect(),
        ));
    }
    let mut sample = patch.clone();
    sample.extend(cur.iter().cloned());
    match list_strategy(field, &sample) {
        ListStrategy::Replace => Ok(strip_directives(Value::Array(patch))),
        ListStrategy::Set => {
            let mut out = cur;
            for v in patch {
                if !out.contains(&v) {
                    out.push(v);
                }
            }
            Ok(Value::Array(out))
        }
        ListStrategy::MergeKey(key) => {
            if patch.iter().any(|e| !e.is_object()) || cur.iter().any(|e| !e.is_object()) {
                return Ok(strip_directives(Value::Array(patch)));
            }
            let mut out: Vec<Value> = cur;
            for pe in patch {
                let Value::Object(mut pm) = pe else { continue };
                let k = pm.get(key).cloned();
                let delete = pm.get("$patch").and_then(|p| p.as_str()) == Some("delete");
                let pos = k
                    .as_ref()
                    .and_then(|k| out.iter().position(|e| e.get(key) == Some(k)));
                match (pos, delete) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        let existing = std::mem::take(&mut out[i]);
                        out[i] = strategic_merge_map(existing, pm)?;
                    }
                    (None, false) => {
                        pm.remove("$patch");
                        out.push(strip_directives(Value::Object(pm)));
                    }
                }
            }
            Ok(Value::Array(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(orig: Value, patch: Value) -> Value {
        let mut d = orig;
        apply(PatchKind::Strategic, &mut d, patch.to_string().as_bytes()).unwrap();
        d
    }

    #[test]
    fn strategic_containers_by_name_and_conditions_by_type() {
        let orig = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
                          "tolerations": [{"key": "k1"}]},
                          "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let out = smp(
            orig,
            json!({"spec": {"containers": [{"name": "b", "image": "z"}], "tolerations": [{"key": "k2"}]},
                   "status": {"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "z"}])
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "k2"}]));
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
        );
    }

    #[test]
    fn strategic_directives() {
        let orig = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
                          "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let out = smp(
            orig,
            json!({"metadata": {"finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"], "labels": {"x": null}},
                   "spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "c"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "b"}]));
        let out = smp(
            json!({"spec": {"a": 1, "b": 2}}),
            json!({"spec": {"$patch": "replace", "c": 3}}),
        );
        assert_eq!(out, json!({"spec": {"c": 3}}));
        let out = smp(
            json!({"spec": {"a": 1, "b": 2}}),
            json!({"spec": {"$retainKeys": ["b", "c"], "c": 3}}),
        );
        assert_eq!(out, json!({"spec": {"b": 2, "c": 3}}));
    }

    #[test]
    fn merge_and_json_patch() {
        let mut d = json!({"a": {"b": 1, "c": [1, 2]}});
        apply(PatchKind::Merge, &mut d, br#"{"a": {"b": null, "c": [3]}}"#).unwrap();
        assert_eq!(d, json!({"a": {"c": [3]}}));
        apply(
            PatchKind::Json,
            &mut d,
            br#"[{"op": "add", "path": "/a/d", "value": 4}]"#,
        )
        .unwrap();
        assert_eq!(d["a"]["d"], 4);
        assert!(
            apply(
                PatchKind::Json,
                &mut d,
                br#"[{"op": "test", "path": "/a/d", "value": 5}]"#
            )
            .is_err()
        );
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml"),
            None
        );
    }
}
