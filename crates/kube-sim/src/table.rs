//! Server-side printing: `meta.k8s.io/v1 Table` answers for clients that ask for them
//! (kubectl get), with the columns kubectl shows for pods, nodes, jobs and namespaces, and
//! Name/Age for every other type.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceType;

/// Whether an Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn col(name: &str, ty: &str, priority: u8) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": ty, "format": format, "description": name, "priority": priority})
}

fn columns(rt: &ResourceType) -> Vec<Value> {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => vec![
            col("Name", "string", 0),
            col("Ready", "string", 0),
            col("Status", "string", 0),
            col("Restarts", "string", 0),
            col("Age", "string", 0),
            col("IP", "string", 1),
            col("Node", "string", 1),
        ],
        ("", "nodes") => vec![
            col("Name", "string", 0),
            col("Status", "string", 0),
            col("Roles", "string", 0),
            col("Age", "string", 0),
            col("Version", "string", 0),
        ],
        ("", "namespaces") => vec![
            col("Name", "string", 0),
            col("Status", "string", 0),
            col("Age", "string", 0),
        ],
        ("batch", "jobs") => vec![
            col("Name", "string", 0),
            col("Status", "string", 0),
            col("Completions", "string", 0),
            col("Age", "string", 0),
        ],
        _ => vec![col("Name", "string", 0), col("Age", "string", 0)],
    }
}

/// Age as kubectl prints it (`5s`, `3m2s`, `4h`, `2d3h`).
fn age(created: &str) -> String {
    let Some(t) = parse_rfc3339(created) else {
        return "<unknown>".into();
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let s = (now - t).max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok());
    let (y, mo, d, h, mi, se) = (
        n(0..4)?,
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    );
    // Days from civil (Howard Hinnant).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    meta::path(v, p).and_then(|x| x.as_str()).unwrap_or("")
}

fn cells(rt: &ResourceType, o: &Value) -> Vec<Value> {
    let name = meta::meta_str(o, "name");
    let age = age(meta::meta_str(o, "creationTimestamp"));
    let deleting = o
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some();
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => {
            let total = meta::path(o, "spec.containers")
                .and_then(|c| c.as_array())
                .map_or(0, |a| a.len());
            let statuses = meta::path(o, "status.containerStatuses")
                .and_then(|c| c.as_array())
                .cloned()
                .unwrap_or_default();
            let ready = statuses
                .iter()
                .filter(|c| c.get("ready").and_then(|r| r.as_bool()) == Some(true))
                .count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|c| c.get("restartCount").and_then(|r| r.as_i64()))
                .sum();
            let mut status = match s(o, "status.reason") {
                "" => s(o, "status.phase").to_string(),
                r => r.to_string(),
            };
            for c in &statuses {
                if let Some(r) = meta::path(c, "state.waiting.reason").and_then(|r| r.as_str()) {
                    status = r.to_string();
                } else if let Some(r) =
                    meta::path(c, "state.terminated.reason").and_then(|r| r.as_str())
                {
                    status = r.to_string();
                }
            }
            if deleting {
                status = "Terminating".into();
            }
            let ip = match s(o, "status.podIP") {
                "" => "<none>",
                x => x,
            };
            let node = match s(o, "spec.nodeName") {
                "" => "<none>",
                x => x,
            };
            vec![
                json!(name),
                json!(format!("{ready}/{total}")),
                json!(status),
                json!(restarts.to_string()),
                json!(age),
                json!(ip),
                json!(node),
            ]
        }
        ("", "nodes") => {
            let ready = meta::path(o, "status.conditions")
                .and_then(|c| c.as_array())
                .and_then(|a| {
                    a.iter()
                        .find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready"))
                })
                .and_then(|c| c.get("status").and_then(|s| s.as_str()))
                .unwrap_or("Unknown");
            let mut status = if ready == "True" {
                "Ready".to_string()
            } else {
                "NotReady".to_string()
            };
            if meta::path(o, "spec.unschedulable").and_then(|u| u.as_bool()) == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<&str> = meta::labels(o)
                .map(|l| {
                    l.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .collect()
                })
                .unwrap_or_default();
            let roles = if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            };
            vec![
                json!(name),
                json!(status),
                json!(roles),
                json!(age),
                json!(s(o, "status.nodeInfo.kubeletVersion")),
            ]
        }
        ("", "namespaces") => vec![json!(name), json!(s(o, "status.phase")), json!(age)],
        ("batch", "jobs") => {
            let conds = meta::path(o, "status.conditions")
                .and_then(|c| c.as_array())
                .cloned()
                .unwrap_or_default();
            let has = |t: &str| {
                conds.iter().any(|c| {
                    c.get("type").and_then(|x| x.as_str()) == Some(t)
                        && c.get("status").and_then(|x| x.as_str()) == Some("True")
                })
            };
            let status = if has("Complete") {
                "Complete"
            } else if has("Failed") {
                "Failed"
            } else if has("Suspended") {
                "Suspended"
            } else {
                "Running"
            };
            let succeeded = meta::path(o, "status.succeeded")
                .and_then(|x| x.as_i64())
                .unwrap_or(0);
            let completions = meta::path(o, "spec.completions")
                .and_then(|x| x.as_i64())
                .unwrap_or(1);
            vec![
                json!(name),
                json!(status),
                json!(format!("{succeeded}/{completions}")),
                json!(age),
            ]
        }
        _ => vec![json!(name), json!(age)],
    }
}

fn row(rt: &ResourceType, o: &Value) -> Value {
    let md = o.get("metadata").cloned().unwrap_or(json!({}));
    json!({
        "cells": cells(rt, o),
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md},
    })
}

/// A Table for a list of objects.
pub fn table<'a>(
    rt: &ResourceType,
    rv: u64,
    cont: Option<&str>,
    objs: impl Iterator<Item = &'a Value>,
) -> Value {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        md["continue"] = json!(c);
    }
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md,
        "columnDefinitions": columns(rt),
        "rows": objs.map(|o| row(rt, o)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn pod_rows_and_ages() {
        let reg = Registry::builtin();
        let (_, pods) = reg.lookup("", "v1", "pods").unwrap();
        let p = json!({"metadata": {"name": "p", "creationTimestamp": meta::now_rfc3339()},
                       "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
                       "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}});
        let t = table(&pods, 7, None, [&p].into_iter());
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "p");
        assert_eq!(cells[1], "1/1");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[3], "2");
        assert_eq!(cells[6], "n1");
        assert_eq!(parse_rfc3339("1970-01-02T00:00:01Z"), Some(86_401));
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }
}
