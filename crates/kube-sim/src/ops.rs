//! The write verbs with the semantics controllers rely on: create, update, patch (main resource
//! and `status`), delete, pods/binding and pods/eviction. Each prepares the new object, runs
//! admission, then commits with a compare-and-swap on the resourceVersion it started from.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::admission::{AdmissionRequest, Operation};
use crate::defaults;
use crate::error::ApiError;
use crate::meta;
use crate::patch::{self, PatchKind};
use crate::registry::ResourceType;
use crate::server::Ctx;
use crate::store::{DeleteOpts, Obj};

const MANAGED: [&str; 4] = [
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

fn check_type(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    let av = rt.api_version();
    match obj.get("apiVersion").and_then(|v| v.as_str()) {
        Some(v) if v != av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({av})"
            )));
        }
        _ => obj["apiVersion"] = json!(av),
    }
    match obj.get("kind").and_then(|v| v.as_str()) {
        Some(k) if k != rt.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        _ => obj["kind"] = json!(rt.kind),
    }
    Ok(())
}

fn check_ns(rt: &ResourceType, obj: &mut Value, ns: &str) -> Result<(), ApiError> {
    let m = meta::meta_mut(obj);
    if rt.namespaced {
        match m.get("namespace").and_then(|v| v.as_str()) {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                m.insert("namespace".into(), json!(ns));
            }
        }
    } else {
        m.remove("namespace");
    }
    Ok(())
}

fn invalid_if(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let causes = defaults::validate(rt, obj);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(rt, meta::meta_str(obj, "name"), &causes))
    }
}

/// Create an object in namespace `ns` ("" for cluster scoped types).
pub async fn create(
    ctx: &Ctx,
    tid: usize,
    ns: &str,
    mut obj: Value,
    dry_run: bool,
) -> Result<Obj, ApiError> {
    let rt = ctx.store.rt(tid).clone();
    check_type(&rt, &mut obj)?;
    check_ns(&rt, &mut obj, ns)?;
    let m = meta::meta_mut(&mut obj);
    for k in MANAGED
        .iter()
        .chain(&["resourceVersion", "generation", "selfLink"])
    {
        m.remove(*k);
    }
    let generate = m
        .get("generateName")
        .and_then(|g| g.as_str())
        .unwrap_or("")
        .to_string();
    let given = m
        .get("name")
        .and_then(|g| g.as_str())
        .unwrap_or("")
        .to_string();
    if given.is_empty() && !generate.is_empty() {
        m.insert(
            "name".into(),
            json!(format!("{generate}{}", meta::random_suffix())),
        );
    }
    m.insert("uid".into(), json!(meta::new_uid()));
    m.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
    m.insert("generation".into(), json!(1));
    defaults::on_create(&rt, &mut obj);
    invalid_if(&rt, &obj)?;
    let name = meta::meta_str(&obj, "name").to_string();
    let obj = ctx
        .admission
        .admit(
            &ctx.store,
            AdmissionRequest {
                op: Operation::Create,
                tid,
                sub: None,
                ns,
                name: &name,
                obj,
                old: None,
                dry_run,
            },
        )
        .await?;
    invalid_if(&rt, &obj)?;
    ctx.store.write(|t| {
        if rt.namespaced {
            match t.namespace_state(ns) {
                None => return Err(ApiError::not_found(&t.store().rt(t.store().tid("", "namespaces").unwrap_or(0)), ns)),
                Some(true) => {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!(
                            "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                            rt.plural
                        ),
                    ));
                }
                Some(false) => {}
            }
        }
        if t.get(tid, ns, &name).is_some() {
            return Err(ApiError::already_exists(&rt, &name));
        }
        if dry_run {
            return Ok(dry(obj, t.rv()));
        }
        Ok(t.insert(tid, obj))
    })
    .inspect(|o| {
        if rt.is("apiextensions.k8s.io", "customresourcedefinitions") {
            register_crd(ctx, &o.value);
        }
    })
}

/// Serve the kinds a CustomResourceDefinition defines.
fn register_crd(ctx: &Ctx, crd: &Value) {
    match crate::registry::parse_types(&crd.to_string()) {
        Ok(types) => {
            for t in types {
                tracing::info!(group = %t.group, version = %t.version, plural = %t.plural, "kube-sim: serving custom resource");
                ctx.store.register(t);
            }
        }
        Err(e) => tracing::warn!(error = %e, "kube-sim: CRD not understood"),
    }
}

fn dry(v: Value, rv: u64) -> Obj {
    let mut v = v;
    meta::meta_mut(&mut v).insert("resourceVersion".into(), json!(rv.to_string()));
    let bytes = serde_json::to_vec(&v).unwrap_or_default().into();
    Obj {
        value: Arc::new(v),
        bytes,
        rv,
    }
}

/// Build the object an update of `cur` with `new` stores: status kept (main resource) or only
/// status taken (`status` subresource), server-managed metadata kept, generation bumped on a
/// spec change.
fn merge_update(
    rt: &ResourceType,
    cur: &Value,
    mut new: Value,
    status_only: bool,
    applied: bool,
) -> Result<Value, ApiError> {
    let name = meta::meta_str(cur, "name").to_string();
    if !applied {
        match cur.get("metadata").and_then(|m| m.get("managedFields")) {
            Some(mf) => {
                meta::meta_mut(&mut new).insert("managedFields".into(), mf.clone());
            }
            None => {
                meta::meta_mut(&mut new).remove("managedFields");
            }
        }
    }
    if status_only {
        let mut out = cur.clone();
        if let Some(mf) = new.get("metadata").and_then(|m| m.get("managedFields")) {
            meta::meta_mut(&mut out).insert("managedFields".into(), mf.clone());
        }
        match new.as_object_mut().and_then(|o| o.remove("status")) {
            Some(s) => out["status"] = s,
            None => {
                out.as_object_mut().map(|o| o.remove("status"));
            }
        }
        return Ok(out);
    }
    if rt.has_status() {
        match cur.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                new.as_object_mut().map(|o| o.remove("status"));
            }
        }
    }
    let cur_meta = cur.get("metadata").cloned().unwrap_or(json!({}));
    let m = meta::meta_mut(&mut new);
    for k in MANAGED.iter().chain(&["generation", "namespace"]) {
        match cur_meta.get(*k) {
            Some(v) => m.insert(k.to_string(), v.clone()),
            None => m.remove(*k),
        };
    }
    m.remove("selfLink");
    if cur_meta.get("deletionTimestamp").is_some() {
        let old_f = meta::finalizers(cur);
        if meta::finalizers(&new).iter().any(|f| !old_f.contains(f)) {
            return Err(ApiError::invalid(
                rt,
                &name,
                &[(
                    "metadata.finalizers".into(),
                    "Forbidden: no new finalizers can be added if the object is being deleted"
                        .into(),
                )],
            ));
        }
    }
    if spec_changed(cur, &new) {
        let g = cur_meta
            .get("generation")
            .and_then(|g| g.as_i64())
            .unwrap_or(0);
        meta::meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    if rt.is("", "pods")
        && let Some(msg) = defaults::pod_spec_update_error(cur, &new)
    {
        return Err(ApiError::invalid(rt, &name, &[("spec".into(), msg)]));
    }
    Ok(new)
}

/// Whether anything outside `metadata` and `status` differs (what bumps `generation`).
fn spec_changed(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a != b;
    };
    let skip = |k: &String| k == "metadata" || k == "status";
    a.iter()
        .filter(|(k, _)| !skip(k))
        .any(|(k, v)| b.get(k) != Some(v))
        || b.keys().filter(|k| !skip(k)).any(|k| !a.contains_key(k))
}

/// How the new object of an update or patch is made from the current one.
pub enum Change<'a> {
    /// PUT with a full object.
    Replace(Value),
    /// PATCH with a body.
    Patch(PatchKind, &'a [u8]),
    /// Server-side apply of a configuration.
    Apply {
        /// The applied configuration.
        config: Value,
        /// `force=true`.
        force: bool,
    },
}

fn conflict_error(
    rt: &ResourceType,
    name: &str,
    conflicts: &[(String, crate::ssa::FieldPath)],
) -> ApiError {
    let lines: Vec<String> = conflicts
        .iter()
        .map(|(m, p)| {
            format!(
                "conflict with \"{m}\" using {}: {}",
                rt.api_version(),
                crate::ssa::dotted(p)
            )
        })
        .collect();
    let mut e = ApiError::new(
        409,
        "Conflict",
        format!(
            "Apply failed with {} conflict{}: {}",
            conflicts.len(),
            if conflicts.len() == 1 { "" } else { "s" },
            lines.join("\n")
        ),
    );
    e.details = Some(json!({
        "name": name, "group": rt.group, "kind": rt.plural,
        "causes": conflicts.iter().map(|(m, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\" using {}", rt.api_version()), "field": crate::ssa::dotted(p)})).collect::<Vec<_>>(),
    }));
    e
}

/// Update (PUT) or patch an object or its `status`.
#[allow(clippy::too_many_arguments)]
pub async fn update(
    ctx: &Ctx,
    tid: usize,
    ns: &str,
    name: &str,
    change: Change<'_>,
    sub: Option<&str>,
    manager: &str,
    dry_run: bool,
) -> Result<Obj, ApiError> {
    let rt = ctx.store.rt(tid).clone();
    let status_only = sub == Some("status");
    let applied = matches!(change, Change::Apply { .. });
    if let Some(s) = sub
        && (s != "status" || !rt.has_status())
    {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({s})"),
        ));
    }
    let mut precondition: Option<String> = None;
    let mut nameless_apply = false;
    let mut body = match &change {
        Change::Replace(v) => {
            let mut v = v.clone();
            check_type(&rt, &mut v)?;
            check_ns(&rt, &mut v, ns)?;
            let n = meta::meta_str(&v, "name");
            if n != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            let r = meta::meta_str(&v, "resourceVersion");
            if !r.is_empty() {
                precondition = Some(r.to_string());
            }
            Some(v)
        }
        Change::Patch(..) => None,
        Change::Apply { config, .. } => {
            let mut v = config.clone();
            check_type(&rt, &mut v)?;
            check_ns(&rt, &mut v, ns)?;
            // kube-apiserver checks the name of the merged object, not of the body: a body
            // without a name applies to the live object named in the URL (kube-lease-manager
            // relies on this). Creating through apply still needs the name in the body.
            let n = meta::meta_str(&v, "name").to_string();
            if n.is_empty() {
                nameless_apply = true;
                meta::meta_mut(&mut v).insert("name".into(), json!(name));
            } else if n != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            Some(v)
        }
    };
    for _attempt in 0..64 {
        let found = ctx.store.read().get(tid, ns, name).cloned();
        let cur = match (found, &change, &body) {
            (Some(c), _, _) => c,
            (None, Change::Apply { .. }, Some(_)) if nameless_apply => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object () does not match the name on the URL ({name})"
                )));
            }
            (None, Change::Apply { .. }, Some(config)) if !status_only => {
                let obj = crate::ssa::apply(None, config, manager, "", true)
                    .map_err(|c| conflict_error(&rt, name, &c))?;
                match create(ctx, tid, ns, obj, dry_run).await {
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    r => return r,
                }
            }
            _ => return Err(ApiError::not_found(&rt, name)),
        };
        let new = match &change {
            Change::Replace(_) => body.take().unwrap_or_default(),
            Change::Apply { force, .. } => {
                let config = body.as_ref().cloned().unwrap_or_default();
                crate::ssa::apply(
                    Some(&cur.value),
                    &config,
                    manager,
                    sub.unwrap_or(""),
                    *force,
                )
                .map_err(|c| conflict_error(&rt, name, &c))?
            }
            Change::Patch(kind, bytes) => {
                let mut doc = (*cur.value).clone();
                patch::apply(*kind, &mut doc, bytes).map_err(|m| match kind {
                    PatchKind::Json => ApiError::new(422, "Invalid", m),
                    _ => ApiError::bad_request(m),
                })?;
                check_type(&rt, &mut doc)?;
                let r = meta::meta_str(&doc, "resourceVersion");
                if !r.is_empty() && r != cur.rv.to_string() {
                    return Err(ApiError::stale(&rt, name));
                }
                if meta::meta_str(&doc, "name") != name {
                    return Err(ApiError::bad_request(
                        "metadata.name cannot be changed by a patch",
                    ));
                }
                doc
            }
        };
        let keep_body = matches!(change, Change::Replace(_)).then(|| new.clone());
        if let Some(p) = &precondition
            && *p != cur.rv.to_string()
        {
            return Err(ApiError::stale(&rt, name));
        }
        let mut new = merge_update(&rt, &cur.value, new, status_only, applied)?;
        if !applied {
            crate::ssa::track_update(&cur.value, &mut new, manager, sub.unwrap_or(""));
        }
        invalid_if(&rt, &new)?;
        new = ctx
            .admission
            .admit(
                &ctx.store,
                AdmissionRequest {
                    op: Operation::Update,
                    tid,
                    sub,
                    ns,
                    name,
                    obj: new,
                    old: Some((*cur.value).clone()),
                    dry_run,
                },
            )
            .await?;
        invalid_if(&rt, &new)?;
        let done = ctx.store.write(|t| {
            let now = t
                .get(tid, ns, name)
                .ok_or_else(|| ApiError::not_found(&rt, name))?;
            if now.rv != cur.rv {
                return Ok(None);
            }
            if dry_run {
                return Ok(Some(dry(new, cur.rv)));
            }
            Ok(Some(t.replace(tid, new)))
        })?;
        match done {
            Some(o) => return Ok(o),
            None => body = keep_body,
        }
    }
    Err(ApiError::stale(&rt, name))
}

/// Delete an object; returns the object (marked, or its last state) and whether it is gone.
pub fn delete(
    ctx: &Ctx,
    tid: usize,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
    dry_run: bool,
) -> Result<(Obj, bool), ApiError> {
    if dry_run {
        let rt = ctx.store.rt(tid).clone();
        let o = ctx.store.read().get(tid, ns, name).cloned();
        return o
            .map(|o| (o, false))
            .ok_or_else(|| ApiError::not_found(&rt, name));
    }
    ctx.store.write(|t| t.delete(tid, ns, name, opts))
}

/// Parse DeleteOptions from a body (may be empty) and query parameters.
pub fn delete_opts(body: &[u8], q: &crate::server::Query) -> Result<DeleteOpts, ApiError> {
    let mut o = DeleteOpts::default();
    if !body.iter().all(|b| b.is_ascii_whitespace()) {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        apply_delete_options(&mut o, &v);
    }
    if let Some(g) = q.get("gracePeriodSeconds") {
        o.grace = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request("invalid gracePeriodSeconds"))?,
        );
    }
    if let Some(p) = q.get("propagationPolicy") {
        o.propagation = Some(p.to_string());
    }
    if q.get("orphanDependents") == Some("true") {
        o.propagation = Some("Orphan".into());
    }
    if let Some(p) = &o.propagation
        && !["Orphan", "Background", "Foreground"].contains(&p.as_str())
    {
        return Err(ApiError::bad_request(format!(
            "unsupported propagationPolicy {p:?}"
        )));
    }
    Ok(o)
}

fn apply_delete_options(o: &mut DeleteOpts, v: &Value) {
    if let Some(g) = v.get("gracePeriodSeconds").and_then(|g| g.as_i64()) {
        o.grace = Some(g);
    }
    if let Some(p) = v.get("propagationPolicy").and_then(|p| p.as_str()) {
        o.propagation = Some(p.to_string());
    }
    if v.get("orphanDependents").and_then(|p| p.as_bool()) == Some(true) {
        o.propagation = Some("Orphan".into());
    }
    if let Some(pre) = v.get("preconditions") {
        o.pre_uid = pre.get("uid").and_then(|u| u.as_str()).map(String::from);
        o.pre_rv = pre
            .get("resourceVersion")
            .and_then(|u| u.as_str())
            .map(String::from);
    }
}

/// A success `Status`.
pub fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

/// pods/binding: set `spec.nodeName` once and the PodScheduled condition.
pub fn bind(ctx: &Ctx, tid: usize, ns: &str, name: &str, body: &Value) -> Result<Value, ApiError> {
    let rt = ctx.store.rt(tid).clone();
    let node = body
        .get("target")
        .and_then(|t| t.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("")
        .to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            &rt,
            name,
            &[("target.name".into(), "\"\": Required value".into())],
        ));
    }
    let annotations = body
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.as_object())
        .cloned();
    let pre_uid = body
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(|u| u.as_str())
        .map(String::from);
    ctx.store.write(|t| {
        let cur = t.get(tid, ns, name).ok_or_else(|| ApiError::not_found(&rt, name))?;
        if let Some(u) = &pre_uid
            && u != meta::meta_str(&cur.value, "uid")
        {
            return Err(ApiError::conflict(&rt, name, "Precondition failed: UID mismatch"));
        }
        if cur.value.get("metadata").and_then(|m| m.get("deletionTimestamp")).is_some() {
            return Err(ApiError::conflict(&rt, name, &format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        let existing = meta::path(&cur.value, "spec.nodeName").and_then(|n| n.as_str()).unwrap_or("");
        if !existing.is_empty() {
            return Err(ApiError::conflict(&rt, name, &format!("pod {name} is already assigned to node \"{existing}\"")));
        }
        let mut v = (*cur.value).clone();
        v["spec"]["nodeName"] = json!(node);
        if let Some(a) = &annotations {
            let m = meta::meta_mut(&mut v);
            let ann = m.entry("annotations").or_insert_with(|| json!({}));
            if let Some(ann) = ann.as_object_mut() {
                for (k, val) in a {
                    ann.insert(k.clone(), val.clone());
                }
            }
        }
        set_condition(&mut v, json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": meta::now_rfc3339()}));
        t.replace(tid, v);
        Ok(success(201))
    })
}

fn set_condition(v: &mut Value, cond: Value) {
    if !v.get("status").is_some_and(|s| s.is_object()) {
        v["status"] = json!({});
    }
    let conds = v["status"]
        .as_object_mut()
        .expect("object")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let a = conds.as_array_mut().expect("array");
    match a.iter_mut().find(|c| c.get("type") == cond.get("type")) {
        Some(c) => *c = cond,
        None => a.push(cond),
    }
}

/// pods/eviction: delete the pod with the eviction's delete options.
pub fn evict(ctx: &Ctx, tid: usize, ns: &str, name: &str, body: &Value) -> Result<Value, ApiError> {
    let mut o = DeleteOpts::default();
    if let Some(d) = body.get("deleteOptions") {
        apply_delete_options(&mut o, d);
    }
    ctx.store.write(|t| t.delete(tid, ns, name, &o))?;
    Ok(success(201))
}
