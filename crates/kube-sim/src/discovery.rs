//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`.
//!
//! Plain (legacy) discovery only: kubectl asks for aggregated discovery first and falls back to
//! these when the answer's Content-Type is plain `application/json`.

use serde_json::{Value, json};

use crate::registry::Registry;

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "36", "gitVersion": "v1.36.0-kube-sim", "gitCommit": "kube-sim",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
        "compiler": "gc", "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions(addr: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}],
    })
}

fn groups(reg: &Registry) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in reg.types().iter().filter(|t| !t.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, vs)) => {
                if !vs.contains(&t.version) {
                    vs.push(t.version.clone());
                }
            }
            None => out.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    out
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0]})
}

/// `/apis`.
pub fn group_list(reg: &Registry) -> Value {
    let gs: Vec<Value> = groups(reg).iter().map(|(g, vs)| group_doc(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `/apis/{group}`, if the group is served.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    groups(reg).iter().find(|(g, _)| g == name).map(|(g, vs)| {
        let mut d = group_doc(g, vs);
        d["kind"] = json!("APIGroup");
        d["apiVersion"] = json!("v1");
        d
    })
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut res = Vec::new();
    for t in reg
        .types()
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        let mut r = json!({
            "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
            "verbs": VERBS, "storageVersionHash": "",
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        res.push(r);
        for s in &t.subresources {
            let (kind, verbs, gv): (&str, Vec<&str>, Option<(&str, &str)>) = match s.as_str() {
                "status" => (&t.kind, vec!["get", "patch", "update"], None),
                "binding" => ("Binding", vec!["create"], None),
                "eviction" => ("Eviction", vec!["create"], Some(("policy", "v1"))),
                "scale" => (
                    "Scale",
                    vec!["get", "patch", "update"],
                    Some(("autoscaling", "v1")),
                ),
                _ => (&t.kind, vec!["get"], None),
            };
            let mut r = json!({
                "name": format!("{}/{s}", t.plural), "singularName": "", "namespaced": t.namespaced,
                "kind": kind, "verbs": verbs,
            });
            if let Some((g, v)) = gv {
                r["group"] = json!(g);
                r["version"] = json!(v);
            }
            res.push(r);
        }
    }
    if res.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}),
    )
}

/// `/openapi/v3`: one entry per served group-version.
pub fn openapi_v3_root(reg: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    for t in reg.types() {
        let key = if t.group.is_empty() {
            format!("api/{}", t.version)
        } else {
            format!("apis/{}/{}", t.group, t.version)
        };
        let url = format!("/openapi/v3/{key}?hash=kube-sim");
        paths.insert(key, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`: a minimal document with the
/// item paths and their PATCH operations (GVK and the `fieldValidation` parameter), which is
/// what kubectl reads to choose server-side field validation. Schemas are not served.
pub fn openapi_v3_gv(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for t in reg
        .types()
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let item = if t.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{prefix}/{}/{{name}}", t.plural)
        };
        let op = json!({
            "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version, "kind": t.kind},
            "x-kubernetes-action": "patch",
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            ],
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(item, json!({"patch": op}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.0-kube-sim"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
