//! Watch streams: from a resourceVersion (history replay), from the current state (synthetic
//! ADDED events, or a streaming list with `sendInitialEvents`), with bookmarks, timeouts, label
//! and field selectors, and 410 Expired for versions older than the history kept or watchers
//! that fall behind it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

use crate::error::ApiError;
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::{Ctx, Query};
use crate::store::{Event, EventType, Obj, Subscription};

/// What a watcher wants to see.
pub struct Filter {
    /// Type id.
    pub tid: usize,
    /// Namespace, or all.
    pub ns: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Answer each object as a one-row `Table` (kubectl get --watch).
    pub table: bool,
}

impl Filter {
    /// The bytes sent for an object: the object, or a one-row Table of it.
    fn render<'a>(
        &self,
        rt: &ResourceType,
        rv: u64,
        bytes: &'a [u8],
        value: impl FnOnce() -> Arc<Value>,
    ) -> std::borrow::Cow<'a, [u8]> {
        if self.table {
            let v = value();
            let t = crate::table::table(rt, rv, None, std::iter::once(&*v));
            std::borrow::Cow::Owned(serde_json::to_vec(&t).unwrap_or_default())
        } else {
            std::borrow::Cow::Borrowed(bytes)
        }
    }

    fn matches_obj(&self, o: &Obj) -> bool {
        self.matches_value(&o.value)
    }

    fn matches_value(&self, v: &Value) -> bool {
        self.labels.matches(v) && (self.fields.is_empty() || self.fields.matches(v))
    }

    /// The event type this watcher sees for `ev`, if any (selector transitions become
    /// ADDED/DELETED as in the real server).
    fn view(&self, ev: &Event) -> Option<EventType> {
        if ev.tid != self.tid || self.ns.as_deref().is_some_and(|ns| ns != ev.ns) {
            return None;
        }
        if self.labels.is_empty() && self.fields.is_empty() {
            return Some(ev.kind);
        }
        let now = self.matches_value(&ev.obj.value());
        match ev.kind {
            EventType::Modified => {
                let before = ev
                    .old
                    .as_ref()
                    .is_some_and(|o| self.matches_value(&o.value()));
                match (before, now) {
                    (true, true) => Some(EventType::Modified),
                    (false, true) => Some(EventType::Added),
                    (true, false) => Some(EventType::Deleted),
                    (false, false) => None,
                }
            }
            k => now.then_some(k),
        }
    }
}

fn line(buf: &mut BytesMut, kind: &str, obj: &[u8]) {
    buf.put_slice(b"{\"type\":\"");
    buf.put_slice(kind.as_bytes());
    buf.put_slice(b"\",\"object\":");
    buf.put_slice(obj);
    buf.put_slice(b"}\n");
}

fn bookmark(buf: &mut BytesMut, api_version: &str, kind: &str, rv: u64, initial_end: bool) {
    let mut md = serde_json::json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = serde_json::json!({"k8s.io/initial-events-end": "true"});
    }
    let o = serde_json::json!({"kind": kind, "apiVersion": api_version, "metadata": md});
    line(buf, "BOOKMARK", o.to_string().as_bytes());
}

fn error_line(buf: &mut BytesMut, e: &ApiError) {
    line(buf, "ERROR", e.status().to_string().as_bytes());
}

/// Serve a watch request.
pub fn watch(ctx: Arc<Ctx>, filter: Filter, q: &Query) -> Result<Response, ApiError> {
    let rt = ctx.store.rt(filter.tid).clone();
    let bookmarks = q.get("allowWatchBookmarks") == Some("true");
    let initial = q.get("sendInitialEvents") == Some("true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map(Duration::from_secs);
    let rv_param = q.get("resourceVersion").unwrap_or("");
    if initial && q.get("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::invalid(
            &rt,
            "",
            &[(
                "resourceVersionMatch".into(),
                "\"\": sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                    .into(),
            )],
        ));
    }
    let from: Option<u64> = if rv_param.is_empty() || rv_param == "0" || initial {
        None
    } else {
        Some(rv_param.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid resource version: {rv_param:?}"))
        })?)
    };
    let mut first = BytesMut::new();
    let (mut rx, start_rv, backlog): (Option<Subscription>, u64, Vec<Arc<Event>>) = {
        let view = ctx.store.read();
        match from {
            None => {
                for (_, o) in view.iter(filter.tid, filter.ns.as_deref(), None) {
                    if filter.matches_obj(o) {
                        line(
                            &mut first,
                            "ADDED",
                            &filter.render(&rt, o.rv, &o.bytes, || o.value.clone()),
                        );
                    }
                }
                let rv = view.rv();
                if initial && bookmarks {
                    bookmark(&mut first, &rt.api_version(), &rt.kind, rv, true);
                }
                (Some(view.subscribe(&ctx.store)), rv, Vec::new())
            }
            Some(rv) => match view.subscribe_from(&ctx.store, rv) {
                Ok((backlog, rx)) => (Some(rx), rv, backlog),
                Err(e) => {
                    error_line(&mut first, &e);
                    (None, rv, Vec::new())
                }
            },
        }
    };
    for ev in &backlog {
        if let Some(k) = filter.view(ev) {
            line(
                &mut first,
                k.as_str(),
                &filter.render(&rt, ev.obj.rv, &ev.obj.bytes, || ev.obj.value()),
            );
        }
    }
    let mut last_rv = backlog.last().map(|e| e.rv).unwrap_or(start_rv);
    let (tx, out) = mpsc::channel::<Bytes>(64);
    let interval = ctx.bookmark_interval;
    let mut shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        if !first.is_empty() && tx.send(first.freeze()).await.is_err() {
            return;
        }
        let Some(rx) = rx.as_mut() else { return };
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            let mut buf = BytesMut::new();
            tokio::select! {
                r = rx.recv() => {
                    let mut next = Some(r);
                    let mut n = 0;
                    while let Some(r) = next.take() {
                        match r {
                            // A watch from a version not reached yet starts after it.
                            Ok(ev) if ev.rv <= start_rv => {}
                            Ok(ev) => {
                                last_rv = ev.rv;
                                if let Some(k) = filter.view(&ev) {
                                    line(&mut buf, k.as_str(), &filter.render(&rt, ev.obj.rv, &ev.obj.bytes, || ev.obj.value()));
                                }
                            }
                            Err(broadcast::error::RecvError::Lagged(_)) => {
                                error_line(&mut buf, &ApiError::expired("too old resource version: watcher fell behind the event history"));
                                let _ = tx.send(buf.freeze()).await;
                                return;
                            }
                            Err(broadcast::error::RecvError::Closed) => {
                                let _ = tx.send(buf.freeze()).await;
                                return;
                            }
                        }
                        n += 1;
                        if n < 512 && let Ok(ev) = rx.try_recv() {
                            next = Some(Ok(ev));
                        }
                    }
                }
                _ = tick.tick(), if bookmarks => {
                    bookmark(&mut buf, &rt.api_version(), &rt.kind, last_rv, false);
                }
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                    return;
                }
                _ = tx.closed() => return,
                _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
            }
            if !buf.is_empty() && tx.send(buf.freeze()).await.is_err() {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(out, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<Bytes, Infallible>(b), rx))
    });
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}
