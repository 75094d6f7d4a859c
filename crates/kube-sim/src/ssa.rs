//! Server-side apply with field ownership, simplified: fields are the leaves of the object's
//! maps (lists are atomic, as `+listType=atomic`), owners are recorded in
//! `metadata.managedFields` (FieldsV1 with `f:` keys) per (manager, operation).
//!
//! An apply conflicts with another manager owning a field it sets to a different value (409,
//! unless `force=true`, which takes the field over); fields the manager applied before and
//! no longer applies are removed when nobody else owns them. Non-apply writes to an object
//! that has managed fields move the fields they change or remove to the writer's `Update`
//! entry. Objects never applied to carry no managedFields.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::meta;

/// A field path: map keys from the root.
pub type FieldPath = Vec<String>;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    subresource: String,
    time: String,
    paths: BTreeSet<FieldPath>,
}

/// Fields that are not owned by anyone (identity and server-managed metadata).
fn owned(p: &[String]) -> bool {
    match p.first().map(|s| s.as_str()) {
        Some("apiVersion" | "kind") => false,
        Some("metadata") => matches!(
            p.get(1).map(|s| s.as_str()),
            Some("labels" | "annotations" | "finalizers" | "ownerReferences")
        ),
        _ => true,
    }
}

fn leaves_into(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                prefix.push(k.clone());
                leaves_into(x, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            if !prefix.is_empty() && owned(prefix) {
                out.insert(prefix.clone());
            }
        }
    }
}

/// The owned leaf paths of an object.
pub fn leaves(v: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    leaves_into(v, &mut Vec::new(), &mut out);
    out
}

fn get<'a>(v: &'a Value, p: &[String]) -> Option<&'a Value> {
    p.iter().try_fold(v, |cur, k| cur.get(k))
}

fn set(v: &mut Value, p: &[String], x: Value) {
    let mut cur = v;
    for k in &p[..p.len() - 1] {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        cur = cur
            .as_object_mut()
            .expect("object")
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    cur.as_object_mut()
        .expect("object")
        .insert(p[p.len() - 1].clone(), x);
}

fn remove(v: &mut Value, p: &[String]) {
    let Some((last, parents)) = p.split_last() else {
        return;
    };
    let mut cur = v;
    for k in parents {
        match cur.get_mut(k) {
            Some(x) => cur = x,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

fn to_fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = json!({});
    for p in paths {
        let fp: FieldPath = p.iter().map(|k| format!("f:{k}")).collect();
        if get(&root, &fp).is_none() {
            set(&mut root, &fp, json!({}));
        }
    }
    root
}

fn from_fields_v1(v: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        let children: Vec<(&String, &Value)> = v
            .as_object()
            .map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect())
            .unwrap_or_default();
        if children.is_empty() {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            return;
        }
        for (k, x) in children {
            prefix.push(k[2..].to_string());
            walk(x, prefix, out);
            prefix.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn read(obj: &Value) -> Vec<Entry> {
    let s = |e: &Value, k: &str| e.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    obj.get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(|m| m.as_array())
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: s(e, "manager"),
                    operation: s(e, "operation"),
                    api_version: s(e, "apiVersion"),
                    subresource: s(e, "subresource"),
                    time: s(e, "time"),
                    paths: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn write(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.paths.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&e.paths),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    let m = meta::meta_mut(obj);
    if list.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(list));
    }
}

/// A list of named objects (containers, env, volumes, ...) merges by name so that fields the
/// server defaulted on existing items survive a re-apply; any other value replaces.
fn merge_named(cur: Option<&Value>, applied: &Value) -> Value {
    let (Some(Value::Array(cur)), Value::Array(new)) = (cur, applied) else {
        return applied.clone();
    };
    let named = |a: &[Value]| {
        a.iter()
            .all(|e| e.get("name").is_some_and(|n| n.is_string()))
    };
    if !named(cur) || !named(new) {
        return applied.clone();
    }
    Value::Array(
        new.iter()
            .map(
                |item| match cur.iter().find(|c| c.get("name") == item.get("name")) {
                    Some(old) => {
                        let mut merged = old.clone();
                        if let (Some(m), Some(n)) = (merged.as_object_mut(), item.as_object()) {
                            for (k, v) in n {
                                let v = merge_named(m.get(k), v);
                                m.insert(k.clone(), v);
                            }
                        }
                        merged
                    }
                    None => item.clone(),
                },
            )
            .collect(),
    )
}

/// Render a field path as the real server does in conflict messages (`.spec.holderIdentity`).
pub fn dotted(p: &[String]) -> String {
    p.iter().map(|k| format!(".{k}")).collect()
}

/// Whether an object has any managed fields.
pub fn tracked(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(|m| m.as_array())
        .is_some_and(|a| !a.is_empty())
}

/// Apply `config` for `manager` on top of `current` (or a new object). Returns the new object
/// with updated managedFields, or the conflicts (manager, field path).
pub fn apply(
    current: Option<&Value>,
    config: &Value,
    manager: &str,
    subresource: &str,
    force: bool,
) -> Result<Value, Vec<(String, FieldPath)>> {
    let api_version = config
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let mut obj = match current {
        Some(c) => c.clone(),
        None => json!({
            "apiVersion": config.get("apiVersion"),
            "kind": config.get("kind"),
            "metadata": {"name": meta::meta_str(config, "name"), "namespace": meta::meta_str(config, "namespace")},
        }),
    };
    let mut entries = read(&obj);
    let want = leaves(config);
    let mine =
        |e: &Entry| e.manager == manager && e.operation == "Apply" && e.subresource == subresource;
    let mut conflicts = Vec::new();
    for e in entries.iter().filter(|e| !mine(e)) {
        for p in e.paths.intersection(&want) {
            if get(&obj, p) != get(config, p) {
                conflicts.push((e.manager.clone(), p.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflicts);
        }
        for e in entries.iter_mut().filter(|e| !mine(e)) {
            for (_, p) in &conflicts {
                e.paths.remove(p);
            }
        }
    }
    let prev: BTreeSet<FieldPath> = entries
        .iter()
        .filter(|e| mine(e))
        .flat_map(|e| e.paths.clone())
        .collect();
    for p in prev.difference(&want) {
        if !entries.iter().any(|e| !mine(e) && e.paths.contains(p)) {
            remove(&mut obj, p);
        }
    }
    for p in &want {
        if let Some(x) = get(config, p) {
            let merged = merge_named(get(&obj, p), x);
            set(&mut obj, p, merged);
        }
    }
    entries.retain(|e| !mine(e));
    entries.push(Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version,
        subresource: subresource.to_string(),
        time: meta::now_rfc3339(),
        paths: want,
    });
    write(&mut obj, entries);
    Ok(obj)
}

/// Record a non-apply write by `manager`: fields it changed or removed move to its `Update`
/// entry. Only for objects that already have managed fields.
pub fn track_update(old: &Value, new: &mut Value, manager: &str, subresource: &str) {
    if !tracked(old) {
        return;
    }
    let mut entries = read(old);
    let before = leaves(old);
    let after = leaves(new);
    let changed: BTreeSet<FieldPath> = after
        .iter()
        .filter(|p| get(old, p) != get(new, p))
        .cloned()
        .collect();
    let removed: BTreeSet<FieldPath> = before.difference(&after).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        write(new, entries);
        return;
    }
    for e in entries.iter_mut() {
        e.paths.retain(|p| {
            !changed.contains(p)
                && !removed.contains(p)
                && !removed.iter().any(|r| p.starts_with(r))
        });
    }
    let api_version = new
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == subresource)
    {
        Some(e) => {
            e.paths.extend(changed);
            e.time = meta::now_rfc3339();
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version,
            subresource: subresource.to_string(),
            time: meta::now_rfc3339(),
            paths: changed,
        }),
    }
    write(new, entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str) -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    }

    #[test]
    fn conflicts_force_and_release() {
        let base = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {}});
        let a = apply(Some(&base), &lease("a"), "mgr-a", "", false).unwrap();
        assert_eq!(a["spec"]["holderIdentity"], "a");
        assert!(tracked(&a));
        // Same value from another manager: shared, no conflict.
        let shared = apply(Some(&a), &lease("a"), "mgr-b", "", false).unwrap();
        assert_eq!(
            shared["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let err = apply(Some(&a), &lease("b"), "mgr-b", "", false).unwrap_err();
        assert!(
            err.iter()
                .any(|(m, p)| m == "mgr-a" && dotted(p) == ".spec.holderIdentity")
        );
        let forced = apply(Some(&a), &lease("b"), "mgr-b", "", true).unwrap();
        assert_eq!(forced["spec"]["holderIdentity"], "b");
        // Releasing by an update that removes the field drops its ownership.
        let mut released = a.clone();
        released["spec"]
            .as_object_mut()
            .unwrap()
            .remove("holderIdentity");
        track_update(&a, &mut released, "mgr-a", "");
        let b = apply(Some(&released), &lease("b"), "mgr-b", "", false).unwrap();
        assert_eq!(b["spec"]["holderIdentity"], "b");
        // A field no longer applied is removed unless someone else owns it too.
        let mut cfg = lease("b");
        cfg["spec"]
            .as_object_mut()
            .unwrap()
            .remove("leaseDurationSeconds");
        let b2 = apply(Some(&b), &cfg, "mgr-b", "", false).unwrap();
        assert_eq!(
            b2["spec"]["leaseDurationSeconds"], 15,
            "still owned by mgr-a"
        );
        let c = apply(Some(&base), &lease("c"), "mgr-c", "", false).unwrap();
        let c2 = apply(Some(&c), &cfg, "mgr-c", "", false).unwrap();
        assert!(c2["spec"].get("leaseDurationSeconds").is_none());
    }
}
