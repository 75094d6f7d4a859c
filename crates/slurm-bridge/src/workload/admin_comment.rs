//! The external job's `admin_comment`: which pods (and which group) a Slurm job stands for.
//!
//! Compatible with the original's `{"pods":["ns/name",...]}`; we add `group` (the group key)
//! and `uids` (pod uids, parallel to `pods`) so a restarted bridge recognises its jobs.
//! Decoding is strict about `pods` (an object with a `pods` array of strings; fixes
//! quirk 5, where `{}` or `null` counted as a bridge job) and tolerant of anything else.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Decoded admin_comment of a bridge job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminComment {
    /// `ns/name` of every pod, sorted.
    pub pods: Vec<String>,
    /// Group key (absent in jobs made by the Go original).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Pod uids in the order of `pods` (absent in jobs made by the Go original).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uids: Vec<String>,
    /// Hash (16 hex digits) of the job description the scheduler last sent for the job, so a
    /// restarted scheduler sends no update for a pending job whose description is unchanged
    /// (absent in jobs made by the Go original and before issue 22: those get one update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desc: Option<String>,
    /// The Kubernetes cluster whose bridge made the job (config `clusterName`), so bridges of
    /// several clusters sharing one Slurm each count, adopt, sweep and cancel only their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// Why an admin_comment is not a bridge job's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminCommentError {
    /// Empty text.
    #[error("admin_comment is empty")]
    Empty,
    /// Not JSON.
    #[error("admin_comment is not JSON: {0}")]
    NotJson(String),
    /// JSON without a `pods` array of strings.
    #[error("admin_comment has no \"pods\" array of strings")]
    NoPods,
}

impl AdminComment {
    /// The pods named, as `(namespace, name)`; entries without a namespace are skipped. Every
    /// component that follows a job to its pods (scheduler, pod controller, sweep) reads them so.
    pub fn pod_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pods.iter().filter_map(|p| p.split_once('/'))
    }

    /// This comment stamped with the bridge's cluster name (none: left unstamped).
    pub fn with_cluster(mut self, cluster: Option<&str>) -> Self {
        self.cluster = cluster.filter(|c| !c.is_empty()).map(str::to_string);
        self
    }

    /// Whether a bridge of cluster `ours` (`None`: no `clusterName`) owns the job: a job stamped
    /// with its cluster, or an unstamped one (made before clusters were named, or by the Go
    /// original). A bridge without a name never touches a stamped job.
    pub fn belongs_to(&self, ours: Option<&str>) -> bool {
        match (self.cluster.as_deref(), ours.filter(|c| !c.is_empty())) {
            (None, _) => true,
            (Some(theirs), Some(ours)) => theirs == ours,
            (Some(_), None) => false,
        }
    }

    /// Whether the comment may stand for the pod `key` (`ns/name`) with `uid`: it names that pod
    /// with that uid, or records no uids (jobs made by the Go original). A pod recreated under
    /// the same name (a StatefulSet's, a re-applied bare pod) has another uid, so its
    /// predecessor's job is not its own.
    pub fn names_pod(&self, key: &str, uid: Option<&str>) -> bool {
        // `new` and `decode` leave `pods` sorted: a gang of thousands is searched, not scanned
        // (the pod controller asks this for every member of a job, per member).
        let found = match self.pods.binary_search_by(|p| p.as_str().cmp(key)) {
            Ok(i) => Some(i),
            Err(_) if !self.pods.is_sorted() => self.pods.iter().position(|p| p == key),
            Err(_) => None,
        };
        let Some(i) = found else {
            return false;
        };
        self.uids.is_empty() || uid.is_none() || self.uids.get(i).map(String::as_str) == uid
    }

    /// Build from `(ns/name, uid)` pairs; pods are sorted so the text is deterministic.
    pub fn new(
        group: Option<String>,
        pods: impl IntoIterator<Item = (String, Option<String>)>,
    ) -> Self {
        let mut pairs: Vec<(String, Option<String>)> = pods.into_iter().collect();
        pairs.sort();
        let with_uids = pairs
            .iter()
            .all(|(_, u)| u.as_deref().is_some_and(|u| !u.is_empty()));
        AdminComment {
            pods: pairs.iter().map(|(p, _)| p.clone()).collect(),
            uids: if with_uids && !pairs.is_empty() {
                pairs.into_iter().filter_map(|(_, u)| u).collect()
            } else {
                Vec::new()
            },
            group,
            desc: None,
            cluster: None,
        }
    }

    /// The description hash of [`AdminComment::desc`], when it is one.
    pub fn desc_hash(&self) -> Option<u64> {
        u64::from_str_radix(self.desc.as_deref()?, 16).ok()
    }

    /// This comment carrying `hash` as the hash of the description it goes with.
    pub fn with_desc_hash(mut self, hash: u64) -> Self {
        self.desc = Some(format!("{hash:016x}"));
        self
    }

    /// Compact JSON: `{"pods":[...],"group":"...","uids":[...]}`.
    pub fn encode(&self) -> String {
        // Serialising strings and vectors of strings cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{\"pods\":[]}"))
    }

    /// Decode; see the module doc for what is accepted.
    pub fn decode(text: &str) -> Result<AdminComment, AdminCommentError> {
        if text.trim().is_empty() {
            return Err(AdminCommentError::Empty);
        }
        let value: Value =
            serde_json::from_str(text).map_err(|e| AdminCommentError::NotJson(e.to_string()))?;
        let Value::Object(map) = value else {
            return Err(AdminCommentError::NoPods);
        };
        let Some(Value::Array(items)) = map.get("pods") else {
            return Err(AdminCommentError::NoPods);
        };
        let pods = items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<String>>>()
            .ok_or(AdminCommentError::NoPods)?;
        let group = map.get("group").and_then(Value::as_str).map(str::to_string);
        let uids = match map.get("uids") {
            Some(Value::Array(u)) => u
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<String>>>()
                .filter(|u| u.len() == pods.len())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        // Sorted as `new` writes them (the Go original kept its own order), uids alongside.
        let (pods, uids) = if uids.is_empty() {
            let mut pods = pods;
            pods.sort();
            (pods, uids)
        } else {
            let mut pairs: Vec<(String, String)> = pods.into_iter().zip(uids).collect();
            pairs.sort();
            pairs.into_iter().unzip()
        };
        let desc = map.get("desc").and_then(Value::as_str).map(str::to_string);
        let cluster = map
            .get("cluster")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(AdminComment {
            pods,
            group,
            uids,
            desc,
            cluster,
        })
    }
}

/// Split a `ns/name` pod string; a string without `/` is a name without namespace.
/// More than one `/` is not a pod key (the reference kept the first part as the name).
pub fn split_pod_key(key: &str) -> Option<(&str, &str)> {
    match key.split_once('/') {
        None => Some(("", key)),
        Some((ns, name)) if !name.contains('/') => Some((ns, name)),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encodes_like_the_original_when_only_pods() {
        assert_eq!(AdminComment::default().encode(), r#"{"pods":[]}"#);
        let c = AdminComment::new(None, [("bar/foo".to_string(), None)]);
        assert_eq!(c.encode(), r#"{"pods":["bar/foo"]}"#);
    }

    #[test]
    fn encodes_group_and_sorted_pods_with_uids() {
        let c = AdminComment::new(
            Some("podgroup/ns/pg".into()),
            [
                ("ns/b".to_string(), Some("u-b".to_string())),
                ("ns/a".to_string(), Some("u-a".to_string())),
            ],
        );
        assert_eq!(
            c.encode(),
            r#"{"pods":["ns/a","ns/b"],"group":"podgroup/ns/pg","uids":["u-a","u-b"]}"#
        );
        assert_eq!(AdminComment::decode(&c.encode()).unwrap(), c);
    }

    #[test]
    fn the_description_hash_goes_last_and_comes_back() {
        let c = AdminComment::new(None, [("ns/a".to_string(), None)]).with_desc_hash(0xab);
        assert_eq!(c.encode(), r#"{"pods":["ns/a"],"desc":"00000000000000ab"}"#);
        let back = AdminComment::decode(&c.encode()).unwrap();
        assert_eq!(back.desc_hash(), Some(0xab));
        assert_eq!(back, c);
        let other = AdminComment::decode(r#"{"pods":["ns/a"],"desc":"not hex"}"#).unwrap();
        assert_eq!(
            other.desc_hash(),
            None,
            "not a hash: the job gets an update"
        );
    }

    #[test]
    fn decodes_original_and_rejects_non_bridge_comments() {
        assert_eq!(
            AdminComment::decode(r#"{"pods":[]}"#).unwrap().pods,
            Vec::<String>::new()
        );
        assert_eq!(
            AdminComment::decode(r#"{"pods":["bar/foo"]}"#)
                .unwrap()
                .pods,
            vec!["bar/foo"]
        );
        assert_eq!(
            AdminComment::decode(r#"{"pods":["a/b"],"x":1}"#)
                .unwrap()
                .pods,
            vec!["a/b"]
        );
        assert_eq!(AdminComment::decode(""), Err(AdminCommentError::Empty));
        // quirk 5 fixed: {} and null are not bridge jobs
        for text in [
            "{}",
            "null",
            "[]",
            r#"{"pods":"a/b"}"#,
            r#"{"pods":[1]}"#,
            "\"x\"",
        ] {
            assert_eq!(
                AdminComment::decode(text),
                Err(AdminCommentError::NoPods),
                "{text}"
            );
        }
        assert!(matches!(
            AdminComment::decode("not json"),
            Err(AdminCommentError::NotJson(_))
        ));
    }

    #[test]
    fn pod_keys() {
        assert_eq!(split_pod_key(""), Some(("", "")));
        assert_eq!(split_pod_key("foo/bar"), Some(("foo", "bar")));
        assert_eq!(split_pod_key("bar"), Some(("", "bar")));
        assert_eq!(split_pod_key("a/b/c"), None);
    }

    #[test]
    fn equality_is_by_content() {
        let a = AdminComment::new(None, [("ns/a".to_string(), None)]);
        assert_eq!(a, AdminComment::decode(r#"{"pods":["ns/a"]}"#).unwrap());
        assert_ne!(a, AdminComment::default());
    }

    #[test]
    fn a_job_belongs_to_its_clusters_bridge_and_unstamped_jobs_to_any() {
        let c = AdminComment::new(None, [("ns/a".to_string(), None)]);
        let east = c.clone().with_cluster(Some("east"));
        assert_eq!(east.encode(), r#"{"pods":["ns/a"],"cluster":"east"}"#);
        assert_eq!(AdminComment::decode(&east.encode()).unwrap(), east);
        assert!(east.belongs_to(Some("east")));
        assert!(!east.belongs_to(Some("west")));
        assert!(
            !east.belongs_to(None),
            "an unnamed bridge leaves named jobs alone"
        );
        assert!(c.belongs_to(Some("east")) && c.belongs_to(None));
        assert_eq!(c.clone().with_cluster(Some("")), c);
    }

    #[test]
    fn a_pod_recreated_under_the_same_name_is_not_named() {
        let c = AdminComment::new(
            None,
            [
                ("ns/a".to_string(), Some("u-a".to_string())),
                ("ns/b".to_string(), Some("u-b".to_string())),
            ],
        );
        assert!(c.names_pod("ns/b", Some("u-b")));
        assert!(!c.names_pod("ns/b", Some("u-b2")), "recreated");
        assert!(!c.names_pod("ns/c", Some("u-b")), "not listed");
        // The Go original's jobs carry no uids: the name decides.
        let go = AdminComment::decode(r#"{"pods":["ns/b"]}"#).unwrap();
        assert!(go.names_pod("ns/b", Some("anything")));
    }

    #[test]
    fn pods_in_any_order_are_named_with_their_own_uids() {
        // Decoded: sorted, each uid kept with its pod.
        let c =
            AdminComment::decode(r#"{"pods":["ns/c","ns/a","ns/b"],"uids":["u-c","u-a","u-b"]}"#)
                .unwrap();
        assert_eq!(c.pods, ["ns/a", "ns/b", "ns/c"]);
        for (pod, uid) in [("ns/a", "u-a"), ("ns/b", "u-b"), ("ns/c", "u-c")] {
            assert!(c.names_pod(pod, Some(uid)), "{pod}");
            assert!(!c.names_pod(pod, Some("u-x")), "{pod} with another uid");
        }
        assert!(!c.names_pod("ns/d", None));
        // Built unsorted by hand: still found.
        let literal = AdminComment {
            pods: vec!["ns/z".into(), "ns/a".into()],
            uids: vec!["u-z".into(), "u-a".into()],
            ..Default::default()
        };
        assert!(literal.names_pod("ns/a", Some("u-a")) && literal.names_pod("ns/z", Some("u-z")));
        assert!(!literal.names_pod("ns/m", None));
    }

    #[test]
    fn mismatched_uids_are_dropped() {
        let c = AdminComment::decode(r#"{"pods":["a/b","a/c"],"uids":["1"]}"#).unwrap();
        assert!(c.uids.is_empty());
    }

    proptest! {
        #[test]
        fn decode_never_panics(s in "\\PC*") {
            let _ = AdminComment::decode(&s);
        }

        #[test]
        fn round_trips(pods in proptest::collection::vec("[a-z0-9-]{1,8}/[a-z0-9.-]{1,12}", 0..6), group in proptest::option::of("[a-z/0-9-]{1,20}")) {
            let c = AdminComment::new(group, pods.into_iter().map(|p| (p, None)));
            prop_assert_eq!(AdminComment::decode(&c.encode()).unwrap(), c);
        }
    }
}
