//! The HTTP front: one generic handler that parses Kubernetes API paths against the registry and
//! dispatches to discovery, list/get/watch and the write verbs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query as AxQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};

use crate::admission::Admission;
use crate::discovery;
use crate::error::ApiError;
use crate::ops::{self, Change};
use crate::patch::PatchKind;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Obj, Store};
use crate::watch::{self, Filter};

/// Shared server state.
pub struct Ctx {
    /// The object store.
    pub store: Arc<Store>,
    /// Webhook caller.
    pub admission: Admission,
    /// How often watchers that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// `host:port` the server listens on.
    pub addr: String,
    /// Becomes `true` when the server stops (open watches end).
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

/// Query parameters.
pub struct Query(HashMap<String, String>);

impl Query {
    /// One parameter.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(|s| s.as_str())
    }
}

/// The router.
pub fn router(ctx: Arc<Ctx>) -> Router {
    Router::new().fallback(handle).with_state(ctx)
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn obj_response(code: StatusCode, o: &Obj) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(o.bytes.clone()),
    )
        .into_response()
}

fn not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

async fn handle(
    State(ctx): State<Arc<Ctx>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    AxQuery(q): AxQuery<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let q = Query(q);
    match dispatch(ctx, &method, uri.path(), &headers, &q, body).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%method, path = uri.path(), error = %e, "request failed");
            e.into_response()
        }
    }
}

/// A parsed resource path.
struct Target {
    tid: usize,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    watch: bool,
}

enum Routed {
    Done(Response),
    Bindings(String),
    Resource(Target),
}

fn route(ctx: &Ctx, path: &str) -> Result<Routed, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let reg = ctx.store.registry();
    let ok = |v: Value| Ok(Routed::Done(json_response(StatusCode::OK, &v)));
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["version"] => return ok(discovery::version()),
        ["healthz" | "readyz" | "livez", ..] => {
            return Ok(Routed::Done((StatusCode::OK, "ok").into_response()));
        }
        ["api"] => return ok(discovery::core_versions(&ctx.addr)),
        ["apis"] => return ok(discovery::group_list(&reg)),
        ["apis", g] => return discovery::group(&reg, g).ok_or_else(not_found).and_then(ok),
        ["api", v] => {
            return discovery::resource_list(&reg, "", v)
                .ok_or_else(not_found)
                .and_then(ok);
        }
        ["apis", g, v] => {
            return discovery::resource_list(&reg, g, v)
                .ok_or_else(not_found)
                .and_then(ok);
        }
        ["openapi", "v3"] => return ok(discovery::openapi_v3_root(&reg)),
        ["openapi", "v3", "api", v] => {
            return discovery::openapi_v3_gv(&reg, "", v)
                .ok_or_else(not_found)
                .and_then(ok);
        }
        ["openapi", "v3", "apis", g, v] => {
            return discovery::openapi_v3_gv(&reg, g, v)
                .ok_or_else(not_found)
                .and_then(ok);
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(not_found()),
    };
    let (watch_prefix, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    // Legacy core bindings resource: POST /api/v1/namespaces/{ns}/bindings.
    if let (true, ["namespaces", ns, "bindings"]) = (group.is_empty(), rest) {
        return Ok(Routed::Bindings(ns.to_string()));
    }
    let target = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if reg
                .lookup(group, version, plural)
                .is_some_and(|(_, t)| t.namespaced) =>
        {
            let (tid, _) = reg.lookup(group, version, plural).ok_or_else(not_found)?;
            if tail.len() > 2 {
                return Err(not_found());
            }
            Target {
                tid,
                ns: Some(ns.to_string()),
                name: tail.first().map(|s| s.to_string()),
                sub: tail.get(1).map(|s| s.to_string()),
                watch: watch_prefix,
            }
        }
        [plural, tail @ ..] => {
            let (tid, rt) = reg.lookup(group, version, plural).ok_or_else(not_found)?;
            if tail.len() > 2 || (rt.namespaced && !tail.is_empty()) {
                return Err(not_found());
            }
            Target {
                tid,
                ns: None,
                name: tail.first().map(|s| s.to_string()),
                sub: tail.get(1).map(|s| s.to_string()),
                watch: watch_prefix,
            }
        }
        [] => return Err(not_found()),
    };
    Ok(Routed::Resource(target))
}

async fn dispatch(
    ctx: Arc<Ctx>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    q: &Query,
    body: Bytes,
) -> Result<Response, ApiError> {
    match route(&ctx, path)? {
        Routed::Done(r) => Ok(r),
        Routed::Bindings(ns) => {
            if method != Method::POST {
                return Err(ApiError::method_not_allowed());
            }
            let v: Value = parse_body(headers, &body)?;
            let name = v
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or("")
                .to_string();
            let tid = ctx.store.tid("", "pods").ok_or_else(not_found)?;
            let s = ops::bind(&ctx, tid, &ns, &name, &v)?;
            Ok(json_response(StatusCode::CREATED, &s))
        }
        Routed::Resource(t) => serve(ctx, method, t, headers, q, body).await,
    }
}

fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("application/json");
    if ct.contains("yaml") {
        serde_saphyr::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid YAML body: {e}")))
    } else if ct.contains("protobuf") || ct.contains("cbor") {
        Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {ct:?}; kube-sim serves JSON only)"
            ),
        ))
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

fn selectors(q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let l = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let f = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    Ok((l, f))
}

async fn serve(
    ctx: Arc<Ctx>,
    method: &Method,
    t: Target,
    headers: &HeaderMap,
    q: &Query,
    body: Bytes,
) -> Result<Response, ApiError> {
    let rt = ctx.store.rt(t.tid).clone();
    let ns = t.ns.clone().unwrap_or_default();
    let dry_run = q.get("dryRun") == Some("All");
    let sub = t.sub.as_deref();
    if let Some(s) = sub
        && !rt.subresources.iter().any(|x| x == s)
    {
        return Err(not_found());
    }
    match (method.clone(), t.name.as_deref()) {
        (Method::GET, None) => {
            let watching = t.watch || matches!(q.get("watch"), Some("true" | "1"));
            let (labels, fields) = selectors(q)?;
            let filter = Filter {
                tid: t.tid,
                ns: t.ns.clone(),
                labels,
                fields,
                table: wants_table(headers),
            };
            if watching {
                watch::watch(ctx, filter, q)
            } else {
                list(&ctx, &filter, q)
            }
        }
        (Method::GET, Some(name)) => {
            if t.watch {
                let (labels, _) = selectors(q)?;
                let fields = FieldSelector::parse(&format!("metadata.name={name}"))
                    .map_err(ApiError::bad_request)?;
                return watch::watch(
                    ctx,
                    Filter {
                        tid: t.tid,
                        ns: t.ns.clone(),
                        labels,
                        fields,
                        table: wants_table(headers),
                    },
                    q,
                );
            }
            let o = ctx
                .store
                .read()
                .get(t.tid, &ns, name)
                .cloned()
                .ok_or_else(|| ApiError::not_found(&rt, name))?;
            if wants_table(headers) && sub.is_none() {
                let t = crate::table::table(&rt, o.rv, None, std::iter::once(&*o.value));
                return Ok(json_response(StatusCode::OK, &t));
            }
            Ok(obj_response(StatusCode::OK, &o))
        }
        (Method::POST, None) => {
            if rt.namespaced && t.ns.is_none() {
                return Err(ApiError::method_not_allowed());
            }
            let v = parse_body(headers, &body)?;
            let o = ops::create(&ctx, t.tid, &ns, v, dry_run).await?;
            Ok(obj_response(StatusCode::CREATED, &o))
        }
        (Method::POST, Some(name)) => {
            let v = parse_body(headers, &body)?;
            let s = match sub {
                Some("binding") if rt.is("", "pods") => ops::bind(&ctx, t.tid, &ns, name, &v)?,
                Some("eviction") if rt.is("", "pods") => ops::evict(&ctx, t.tid, &ns, name, &v)?,
                _ => return Err(ApiError::method_not_allowed()),
            };
            Ok(json_response(StatusCode::CREATED, &s))
        }
        (Method::PUT, Some(name)) => {
            let v = parse_body(headers, &body)?;
            let fm = manager(q, headers);
            let o = ops::update(
                &ctx,
                t.tid,
                &ns,
                name,
                Change::Replace(v),
                sub,
                &fm,
                dry_run,
            )
            .await?;
            Ok(obj_response(StatusCode::OK, &o))
        }
        (Method::PATCH, Some(name)) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|c| c.to_str().ok())
                .unwrap_or("");
            if ct.starts_with("application/apply-patch+yaml") {
                let Some(fm) = q.get("fieldManager").filter(|f| !f.is_empty()) else {
                    return Err(ApiError::new(
                        422,
                        "Invalid",
                        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                    ));
                };
                let config: Value = serde_saphyr::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                let force = q.get("force") == Some("true");
                let change = Change::Apply { config, force };
                let o = ops::update(&ctx, t.tid, &ns, name, change, sub, fm, dry_run).await?;
                return Ok(obj_response(StatusCode::OK, &o));
            }
            let kind =
                PatchKind::from_content_type(ct).ok_or_else(|| ApiError::unsupported_media(ct))?;
            if kind == PatchKind::Strategic && is_custom(&rt) {
                return Err(ApiError::unsupported_media(ct));
            }
            let o = ops::update(
                &ctx,
                t.tid,
                &ns,
                name,
                Change::Patch(kind, &body),
                sub,
                &manager(q, headers),
                dry_run,
            )
            .await?;
            Ok(obj_response(StatusCode::OK, &o))
        }
        (Method::DELETE, Some(name)) => {
            if sub.is_some() {
                return Err(ApiError::method_not_allowed());
            }
            let opts = ops::delete_opts(&body, q)?;
            let (o, _gone) = ops::delete(&ctx, t.tid, &ns, name, &opts, dry_run)?;
            Ok(obj_response(StatusCode::OK, &o))
        }
        (Method::DELETE, None) => {
            let opts = ops::delete_opts(&body, q)?;
            let (labels, fields) = selectors(q)?;
            let filter = Filter {
                tid: t.tid,
                ns: t.ns.clone(),
                labels,
                fields,
                table: false,
            };
            let names: Vec<(String, String)> = {
                let view = ctx.store.read();
                view.iter(t.tid, filter.ns.as_deref(), None)
                    .filter(|(_, o)| {
                        filter.labels.matches(&o.value) && filter.fields.matches(&o.value)
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            let mut items = Vec::new();
            for (ons, name) in names {
                match ops::delete(&ctx, t.tid, &ons, &name, &opts, dry_run) {
                    Ok((o, _)) => items.push(o),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let rv = ctx.store.read().rv();
            Ok(list_response(
                &rt.api_version(),
                &rt.kind,
                rv,
                None,
                None,
                items.iter(),
            ))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// The field manager of a non-apply write: `fieldManager`, else the client's user agent
/// program name, as the real server defaults it.
fn manager(q: &Query, headers: &HeaderMap) -> String {
    if let Some(f) = q.get("fieldManager").filter(|f| !f.is_empty()) {
        return f.to_string();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|u| u.to_str().ok())
        .and_then(|u| u.split('/').next())
        .filter(|u| !u.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// Types that the real server serves as custom resources (no strategic merge patch).
fn is_custom(rt: &crate::registry::ResourceType) -> bool {
    rt.group.ends_with(".x-k8s.io")
        || !(rt.group.is_empty()
            || rt.group.ends_with(".k8s.io")
            || ["apps", "batch", "policy", "autoscaling"].contains(&rt.group.as_str()))
}

fn list_response<'a>(
    api_version: &str,
    kind: &str,
    rv: u64,
    cont: Option<String>,
    remaining: Option<usize>,
    items: impl Iterator<Item = &'a Obj>,
) -> Response {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        md["continue"] = json!(c);
        if let Some(r) = remaining {
            md["remainingItemCount"] = json!(r);
        }
    }
    let head = json!({"kind": format!("{kind}List"), "apiVersion": api_version, "metadata": md})
        .to_string();
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    out.extend_from_slice(b",\"items\":[");
    for (i, o) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&o.bytes);
    }
    out.extend_from_slice(b"]}");
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        out,
    )
        .into_response()
}

fn list(ctx: &Ctx, f: &Filter, q: &Query) -> Result<Response, ApiError> {
    let rt = ctx.store.rt(f.tid).clone();
    let limit: usize = match q.get("limit") {
        Some(l) if !l.is_empty() => l
            .parse()
            .map_err(|_| ApiError::bad_request("invalid limit"))?,
        _ => 0,
    };
    let after: Option<(String, String)> = match q.get("continue") {
        Some(c) if !c.is_empty() => {
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .map_err(|_| ApiError::bad_request("invalid continue token"))?;
            let v: Value = serde_json::from_slice(&raw)
                .map_err(|_| ApiError::bad_request("invalid continue token"))?;
            Some((
                v.get("ns")
                    .and_then(|s| s.as_str())
                    .unwrap_or("")
                    .to_string(),
                v.get("name")
                    .and_then(|s| s.as_str())
                    .unwrap_or("")
                    .to_string(),
            ))
        }
        _ => None,
    };
    let view = ctx.store.read();
    let cur = view.rv();
    let rv_param = q.get("resourceVersion").unwrap_or("");
    if !rv_param.is_empty() && rv_param != "0" {
        let want: u64 = rv_param.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid resource version: {rv_param:?}"))
        })?;
        if after.is_some() {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        if want > cur {
            return Err(ApiError::new(
                504,
                "Timeout",
                format!("Too large resource version: {want}, current: {cur}"),
            ));
        }
        if q.get("resourceVersionMatch") == Some("Exact") && want != cur {
            return Err(ApiError::expired(format!(
                "The resourceVersion for the provided list is too old: {want} (current {cur}); kube-sim serves exact lists only at the current version"
            )));
        }
    }
    let selecting = !f.labels.is_empty() || !f.fields.is_empty();
    let name_only = f.fields.name().map(String::from);
    let mut items: Vec<&Obj> = Vec::new();
    let mut last_key = None;
    let mut more = false;
    let mut remaining = 0usize;
    let mut iter = view.iter(f.tid, f.ns.as_deref(), after.as_ref());
    for (k, o) in iter.by_ref() {
        if name_only.as_deref().is_some_and(|n| n != k.1) {
            continue;
        }
        if selecting && !(f.labels.matches(&o.value) && f.fields.matches(&o.value)) {
            continue;
        }
        if limit > 0 && items.len() == limit {
            more = true;
            remaining = 1;
            break;
        }
        last_key = Some(k.clone());
        items.push(o);
    }
    let cont = if more {
        if !selecting {
            remaining += iter.count();
        }
        last_key.map(|(ns, name)| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(json!({"rv": cur, "ns": ns, "name": name}).to_string())
        })
    } else {
        None
    };
    if f.table {
        let t = crate::table::table(&rt, cur, cont.as_deref(), items.iter().map(|o| &*o.value));
        return Ok(json_response(StatusCode::OK, &t));
    }
    Ok(list_response(
        &rt.api_version(),
        &rt.kind,
        cur,
        cont,
        (!selecting).then_some(remaining),
        items.into_iter(),
    ))
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(crate::table::wants_table)
}
