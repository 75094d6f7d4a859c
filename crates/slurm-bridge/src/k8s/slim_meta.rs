//! A cached object's metadata decoded without what no component reads: the managed fields and
//! kubectl's last-applied annotation are skipped as the watch's JSON is read, never allocated.
//! [`super::trim`] used to drop them after decoding, so every pod event of a burst built and
//! freed a tree of JSON values (a few per writer of the pod), costing decode time and leaving
//! the allocator's heap full of holes between the long-lived pods.

use super::trim::LAST_APPLIED;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use std::collections::BTreeMap;

/// `ObjectMeta`'s fields but `managedFields`, which serde passes over unread.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Meta {
    #[serde(deserialize_with = "annotations")]
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// Decodes an object's metadata without its managed fields and last-applied annotation
/// (`#[serde(deserialize_with = ...)]` on a cached type's `metadata`).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Option::<Meta>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

/// The annotations but kubectl's last-applied copy of the object (as large as the object).
fn annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Annotations;
    impl<'de> Visitor<'de> for Annotations {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if key == LAST_APPLIED {
                    map.next_value::<IgnoredAny>()?;
                } else {
                    out.insert(key, map.next_value::<String>()?);
                }
            }
            Ok(Some(out))
        }
    }
    d.deserialize_option(Annotations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Obj {
        #[serde(deserialize_with = "deserialize")]
        metadata: ObjectMeta,
    }

    fn full() -> serde_json::Value {
        json!({
            "name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
            "generateName": "p-", "generation": 3, "selfLink": "/api/v1/namespaces/ns/pods/p",
            "creationTimestamp": "2026-12-03T10:00:00Z",
            "deletionTimestamp": "2026-12-03T11:00:00Z", "deletionGracePeriodSeconds": 30,
            "labels": {"app": "x", "slinky.slurm.net/slurm-jobid": "7"},
            "annotations": {"a": "1", LAST_APPLIED: "{\"kind\":\"Pod\"}"},
            "finalizers": ["slinky.slurm.net/slurm-bridge"],
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                 "uid": "u-0", "controller": true}],
            "managedFields": [
                {"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}},
                {"manager": "slurm-bridge", "operation": "Update", "apiVersion": "v1",
                 "subresource": "status", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {}}}},
            ],
        })
    }

    /// Every field as k8s-openapi decodes it, but the two skipped.
    #[test]
    fn metadata_decodes_as_k8s_openapi_without_managed_fields_or_last_applied() {
        let slim: Obj = serde_json::from_value(json!({"metadata": full()})).unwrap();
        let mut expected: ObjectMeta = serde_json::from_value(full()).unwrap();
        assert!(expected.managed_fields.is_some());
        super::super::trim::trim_metadata(&mut expected);
        assert_eq!(slim.metadata, expected);
        assert_eq!(slim.metadata.annotations.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn absent_or_null_metadata_and_annotations_are_none() {
        let o: Obj = serde_json::from_value(json!({"metadata": null})).unwrap();
        assert_eq!(o.metadata, ObjectMeta::default());
        let o: Obj =
            serde_json::from_value(json!({"metadata": {"name": "a", "annotations": null}}))
                .unwrap();
        assert_eq!(o.metadata.name.as_deref(), Some("a"));
        assert_eq!(o.metadata.annotations, None);
    }

    #[test]
    fn a_bad_annotation_value_is_an_error_naming_it() {
        let e = serde_json::from_value::<Obj>(json!({"metadata": {"annotations": {"a": 1}}}))
            .err()
            .expect("a number is no annotation value");
        assert!(e.to_string().contains("expected a string"), "{e}");
    }
}
