//! `events.k8s.io/v1` Events, as every component records them: plain creates of the typed
//! Event. Unlike kube-runtime's `Recorder`, nothing is kept in memory per event (it keeps each
//! event for six minutes to aggregate repeats: tens of MiB with thousands of pods); the bridge
//! reports changes, not repeats.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

/// Namespace of Events about cluster-scoped objects (nodes), where kubectl looks for them.
pub const CLUSTER_EVENT_NAMESPACE: &str = "default";

/// The Events API limits `note` to 1 KiB.
const NOTE_LIMIT: usize = 1024;

/// Who reports: `reportingController` and `reportingInstance`.
#[derive(Clone, Debug)]
pub struct Reporter {
    pub controller: String,
    pub instance: String,
}

/// One Event about an object.
pub struct Note<'a> {
    pub warning: bool,
    /// What the reporter did (`Scheduling`, `Deleting`, `Register`, ...).
    pub action: &'a str,
    /// Why, in UpperCamelCase.
    pub reason: &'a str,
    /// The text users read; cut to 1 KiB.
    pub note: String,
}

/// `note` cut to the API's limit at a character boundary, with `...` when cut.
fn cut(mut note: String) -> String {
    if note.len() > NOTE_LIMIT {
        let mut at = NOTE_LIMIT - 3;
        while !note.is_char_boundary(at) {
            at -= 1;
        }
        note.truncate(at);
        note.push_str("...");
    }
    note
}

/// The Event about `object` (namespaced objects get it in their namespace, cluster-scoped ones
/// in [`CLUSTER_EVENT_NAMESPACE`]).
pub fn build<K>(reporter: &Reporter, object: &K, what: Note<'_>) -> Event
where
    K: Resource<DynamicType = ()>,
{
    let now = k8s_openapi::jiff::Timestamp::now();
    let namespace = object
        .namespace()
        .unwrap_or_else(|| CLUSTER_EVENT_NAMESPACE.to_string());
    let regarding = ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        namespace: object.namespace(),
        name: Some(object.name_any()),
        uid: object.uid(),
        resource_version: object.resource_version(),
        ..Default::default()
    };
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", object.name_any(), now.as_nanosecond())),
            namespace: Some(namespace),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        action: Some(what.action.to_string()),
        reason: Some(what.reason.to_string()),
        note: Some(cut(what.note)),
        type_: Some(if what.warning { "Warning" } else { "Normal" }.to_string()),
        regarding: Some(regarding),
        ..Default::default()
    }
}

/// Records the Event; a failure is logged as a warning and never fails the caller.
pub async fn publish<K>(client: &kube::Client, reporter: &Reporter, object: &K, what: Note<'_>)
where
    K: Resource<DynamicType = ()>,
{
    post(client, &build(reporter, object, what)).await
}

/// Creates an Event made by [`build`] (a background sender keeps the small Event, not the
/// object it is about); a failure is logged as a warning and never fails the caller.
pub async fn post(client: &kube::Client, event: &Event) {
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Err(e) = api.create(&PostParams::default(), event).await {
        let object = event.regarding.as_ref().and_then(|r| r.name.as_deref());
        tracing::warn!(error = %e, object, reason = event.reason.as_deref(), "publishing an event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::slim_pod::Pod;
    use k8s_openapi::api::core::v1::Node;

    fn reporter() -> Reporter {
        Reporter {
            controller: "slurm-bridge-scheduler".into(),
            instance: "host-1".into(),
        }
    }

    #[test]
    fn a_pod_event_is_in_the_pod_namespace_and_names_the_pod() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("a".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("u1".into());
        let e = build(
            &reporter(),
            &pod,
            Note {
                warning: true,
                action: "Deleting",
                reason: "SlurmJobCancelled",
                note: "x".repeat(2000),
            },
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        let r = e.regarding.unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.api_version.as_deref()),
            (Some("Pod"), Some("v1"))
        );
        assert_eq!(r.uid.as_deref(), Some("u1"));
        let note = e.note.unwrap();
        assert_eq!(note.len(), NOTE_LIMIT);
        assert!(note.ends_with("..."));
    }

    #[test]
    fn a_node_event_goes_to_the_default_namespace() {
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        let e = build(
            &reporter(),
            &node,
            Note {
                warning: false,
                action: "Register",
                reason: "SlurmNodeRegistered",
                note: "é".repeat(600),
            },
        );
        assert_eq!(
            e.metadata.namespace.as_deref(),
            Some(CLUSTER_EVENT_NAMESPACE)
        );
        assert_eq!(e.regarding.unwrap().namespace, None);
        assert!(e.note.unwrap().len() <= NOTE_LIMIT);
    }
}
