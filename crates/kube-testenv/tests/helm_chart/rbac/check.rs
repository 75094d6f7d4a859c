//! The RBAC checker: every grant a render gives, through its bindings, against the allow-lists
//! of `calls`, both ways (no grant beyond the calls, no call without its grant).

use super::calls::{
    Perm, admission_calls, ca_secret_calls, controllers_calls, lease_calls, node_agent_calls,
    release_finalizers_calls, scheduler_calls,
};
use crate::support::{NAMESPACE, PREFIX, strings};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A grant: what a ServiceAccount may do, where (`None`: cluster-wide), on which names
/// (`None`: any).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    account: String,
    namespace: Option<String>,
    perm: (String, String, String),
    names: Option<Vec<String>>,
}

/// Every grant the rendered objects give, through the bindings to the roles they define. A
/// binding to a role the chart does not render (e.g. `cluster-admin`) is an error.
fn grants(docs: &[Value]) -> Result<Vec<Grant>, String> {
    let mut out = Vec::new();
    for b in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        let ns = (b["kind"] == "RoleBinding").then(|| {
            b["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string()
        });
        let role_kind = b["roleRef"]["kind"].as_str().unwrap_or("");
        let role_name = b["roleRef"]["name"].as_str().unwrap_or("");
        let role = docs
            .iter()
            .find(|d| {
                d["kind"] == role_kind
                    && d["metadata"]["name"] == role_name
                    && (role_kind == "ClusterRole"
                        || d["metadata"]["namespace"].as_str() == ns.as_deref())
            })
            .ok_or_else(|| {
                format!(
                    "binding {} refers to {role_kind} {role_name}, not in the chart",
                    b["metadata"]["name"]
                )
            })?;
        if role["aggregationRule"].is_object() {
            return Err(format!("{role_name} aggregates other roles"));
        }
        for s in b["subjects"].as_array().into_iter().flatten() {
            if s["kind"] != "ServiceAccount" || s["namespace"] != NAMESPACE {
                return Err(format!("binding {} has subject {s}", b["metadata"]["name"]));
            }
            let account = s["name"].as_str().unwrap().to_string();
            for rule in role["rules"].as_array().into_iter().flatten() {
                if rule["nonResourceURLs"].is_array() {
                    return Err(format!("{role_name} grants nonResourceURLs"));
                }
                let names = rule["resourceNames"]
                    .is_array()
                    .then(|| strings(&rule["resourceNames"]));
                for g in strings(&rule["apiGroups"]) {
                    for r in strings(&rule["resources"]) {
                        for v in strings(&rule["verbs"]) {
                            out.push(Grant {
                                account: account.clone(),
                                namespace: ns.clone(),
                                perm: (g.clone(), r.clone(), v),
                                names: names.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// What each ServiceAccount may be granted, for the values of a case.
struct Allowed {
    cluster: Vec<Perm>,
    leases: bool,
    /// Namespaced permissions on the shared CA Secret (with the names they must be limited to).
    ca_secret: Vec<(Perm, Option<Vec<String>>)>,
    /// Permissions that must name these objects (resourceNames).
    named: Vec<(Perm, Vec<String>)>,
}

fn allowed_for(component: &str, selector: bool, self_managed: bool, admission: bool) -> Allowed {
    let adm = if admission {
        admission_calls(selector, self_managed)
    } else {
        vec![]
    };
    let webhook = format!("{PREFIX}-admission");
    let named = adm
        .iter()
        .filter(|p| p.0 == "admissionregistration.k8s.io")
        .map(|p| (*p, vec![webhook.clone()]))
        .collect();
    let ca_secret = if admission && self_managed {
        ca_secret_calls()
    } else {
        vec![]
    };
    match component {
        "scheduler" => Allowed {
            cluster: scheduler_calls(),
            leases: true,
            ca_secret: vec![],
            named: vec![],
        },
        "controllers" => Allowed {
            cluster: controllers_calls(),
            leases: true,
            ca_secret: vec![],
            named: vec![],
        },
        "admission" => Allowed {
            cluster: adm,
            leases: false,
            ca_secret,
            named,
        },
        "node-agent" => Allowed {
            cluster: node_agent_calls(),
            leases: false,
            ca_secret: vec![],
            named: vec![],
        },
        "run" => Allowed {
            cluster: [scheduler_calls(), controllers_calls(), adm].concat(),
            leases: true,
            ca_secret,
            named,
        },
        "release-finalizers" => Allowed {
            cluster: release_finalizers_calls(),
            leases: false,
            ca_secret: vec![],
            named: vec![],
        },
        other => panic!("unknown component {other}"),
    }
}

/// Checks the grants of a render against the allow-lists: the errors (grants beyond what the
/// code calls, and calls not granted).
pub fn check_rbac(
    docs: &[Value],
    selector: bool,
    self_managed: bool,
    admission: bool,
    leader: bool,
) -> Vec<String> {
    let grants = match grants(docs) {
        Ok(g) => g,
        Err(e) => return vec![e],
    };
    let mut errors = Vec::new();
    let accounts: BTreeSet<String> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceAccount")
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let mut by_account: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in &grants {
        by_account.entry(&g.account).or_default().push(g);
    }
    for g in &grants {
        let Some(component) = g.account.strip_prefix(&format!("{PREFIX}-")) else {
            errors.push(format!("grant to a foreign account: {g:?}"));
            continue;
        };
        if !accounts.contains(&g.account) {
            errors.push(format!(
                "grant to an account the chart does not create: {g:?}"
            ));
        }
        let allowed = allowed_for(component, selector, self_managed, admission);
        let (grp, res, verb) = (&g.perm.0, &g.perm.1, &g.perm.2);
        if [grp, res, verb].iter().any(|s| s.contains('*')) {
            errors.push(format!("{component}: wildcard in {:?}", g.perm));
            continue;
        }
        let is = |p: &Perm| p.0 == grp && p.1 == res && p.2 == verb;
        match &g.namespace {
            Some(ns) => {
                let lease = allowed.leases && lease_calls().iter().any(is);
                let secret = allowed.ca_secret.iter().find(|(p, _)| is(p));
                let secret = match secret {
                    Some((_, Some(names))) => g.names.as_ref() == Some(names),
                    Some((_, None)) => true,
                    None => false,
                };
                if !(ns == NAMESPACE && (lease || secret)) {
                    errors.push(format!(
                        "{component}: namespaced grant beyond the leader Lease and the CA Secret: {g:?}"
                    ));
                }
            }
            None => {
                if !allowed.cluster.iter().any(is) {
                    errors.push(format!(
                        "{component}: ClusterRole grants {verb} on {grp}/{res}, which the code does not call"
                    ));
                } else if let Some((_, names)) = allowed.named.iter().find(|(p, _)| is(p))
                    && g.names.as_ref() != Some(names)
                {
                    errors.push(format!(
                        "{component}: {verb} on {grp}/{res} must be limited to {names:?}, is {:?}",
                        g.names
                    ));
                }
            }
        }
    }
    // And the other way round: each running component can make every call its code makes.
    for d in docs
        .iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job" || d["kind"] == "DaemonSet")
    {
        let spec = &d["spec"]["template"]["spec"];
        // The node agent without draCpu runs with no account and no token.
        let Some(account) = spec["serviceAccountName"].as_str() else {
            continue;
        };
        let component = account.strip_prefix(&format!("{PREFIX}-")).unwrap();
        let allowed = allowed_for(component, selector, self_managed, admission);
        let have = by_account.get(account).cloned().unwrap_or_default();
        for p in &allowed.cluster {
            if !have
                .iter()
                .any(|g| g.namespace.is_none() && g.perm == (p.0.into(), p.1.into(), p.2.into()))
            {
                errors.push(format!(
                    "{component}: the code calls {} on {}/{}, not granted",
                    p.2, p.0, p.1
                ));
            }
        }
        for (p, _) in &allowed.ca_secret {
            if !have.iter().any(|g| {
                g.namespace.as_deref() == Some(NAMESPACE)
                    && g.perm == (p.0.into(), p.1.into(), p.2.into())
            }) {
                errors.push(format!(
                    "{component}: the shared CA needs {} on secrets, not granted",
                    p.2
                ));
            }
        }
        if allowed.leases && leader {
            for p in lease_calls() {
                if !have.iter().any(|g| {
                    g.namespace.as_deref() == Some(NAMESPACE)
                        && g.perm == (p.0.into(), p.1.into(), p.2.into())
                }) {
                    errors.push(format!(
                        "{component}: leader election needs {} on leases, not granted",
                        p.2
                    ));
                }
            }
        }
    }
    errors
}
