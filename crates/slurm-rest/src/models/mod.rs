//! Serde models of the slurmrestd data parser v0.0.44, written by hand from the OpenAPI
//! document in `openapi/v0.0.44.json` (only what the bridge needs, with the same names and
//! types). Unknown fields are ignored and every enum has an `Other` fallback, so a newer
//! Slurm that adds fields or values still decodes; each unknown value is logged once
//! ([`unknown_values`] lists them).

mod common;
mod enums;
mod job;
mod node;
mod noval;
mod partition;
mod reservation;
mod unknown;

pub use common::*;
pub use enums::*;
pub use job::*;
pub use node::*;
pub use noval::{NoVal, NoValNumber};
pub use partition::*;
pub use reservation::*;
pub use unknown::unknown_values;

/// Declares a string enum with serde support and an `Other(String)` fallback.
macro_rules! slurm_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $(#[doc = concat!("`", $s, "`")] $variant,)*
            /// A value this client does not know (for example one added by a newer Slurm).
            Other(String),
        }

        impl $name {
            /// The string Slurm uses for this value.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $s,)*
                    Self::Other(s) => s.as_str(),
                }
            }
            /// Parse Slurm's string; unknown strings become `Other`.
            pub fn parse(s: &str) -> Self {
                match s {
                    $($s => Self::$variant,)*
                    other => Self::Other(other.to_string()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ok(Self::parse(s))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                let v = Self::parse(&s);
                if let Self::Other(o) = &v {
                    $crate::models::unknown::note(stringify!($name), o);
                }
                Ok(v)
            }
        }
    };
}
pub(crate) use slurm_enum;

/// Serde helpers for Slurm's loosely typed fields.
pub(crate) mod de {
    use serde::{Deserialize, Deserializer};

    /// A `csv_string`: a JSON array of strings, or (older parsers) one comma-separated string.
    pub fn csv<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Csv {
            List(Vec<String>),
            One(String),
            Null(()),
        }
        Ok(match Csv::deserialize(d)? {
            Csv::List(v) => v,
            Csv::One(s) => s
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
            Csv::Null(()) => Vec::new(),
        })
    }

    /// `null` decodes as the type's default (Slurm sometimes sends `null` for empty lists).
    pub fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de> + Default,
    {
        Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn enums_round_trip_and_keep_unknown_values() {
        assert_eq!(JobState::parse("RUNNING"), JobState::Running);
        assert_eq!(JobFlag::ExternalJob.as_str(), "EXTERNAL_JOB");
        let v: Vec<NodeState> = serde_json::from_value(json!(["IDLE", "SHINY_NEW"])).unwrap();
        assert_eq!(v, [NodeState::Idle, NodeState::Other("SHINY_NEW".into())]);
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            json!(["IDLE", "SHINY_NEW"])
        );
        assert_eq!(Shared::None.to_string(), "none");
        assert_eq!(
            "TIME=100%".parse::<JobState>().unwrap(),
            JobState::Other("TIME=100%".into())
        );
    }

    #[test]
    fn job_desc_msg_serialises_only_set_fields_with_json_names() {
        let d = JobDescMsg {
            flags: Some(vec![JobFlag::ExternalJob]),
            nodes: Some("1".into()),
            mcs_label: Some(String::new()),
            memory_per_node: Some(NoVal::Set(100)),
            priority: Some(NoVal::Unset),
            shared: Some(vec![Shared::None]),
            required_nodes: Some(vec!["n1".into(), "n2".into()]),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            json!({
                "flags": ["EXTERNAL_JOB"], "nodes": "1", "mcs_label": "",
                "memory_per_node": {"set": true, "infinite": false, "number": 100},
                "priority": {"set": false, "infinite": false},
                "shared": ["none"], "required_nodes": ["n1", "n2"]
            })
        );
        let back: JobDescMsg = serde_json::from_value(serde_json::to_value(&d).unwrap()).unwrap();
        assert_eq!(back, d);
        // An older parser's comma string decodes too.
        let old: JobDescMsg = serde_json::from_value(json!({"excluded_nodes": "a,b"})).unwrap();
        assert_eq!(
            old.excluded_nodes,
            Some(vec!["a".to_string(), "b".to_string()])
        );
    }

    #[test]
    fn unknown_fields_and_nulls_are_tolerated() {
        let j: JobInfo = serde_json::from_value(json!({
            "job_id": 4, "job_state": null, "brand_new": {"x": 1}, "flags": ["EXTERNAL_JOB", "FUTURE_FLAG"]
        }))
        .unwrap();
        assert_eq!(j.job_id, 4);
        assert!(j.job_state.is_empty());
        assert_eq!(j.flags[1], JobFlag::Other("FUTURE_FLAG".into()));
        let n: Node =
            serde_json::from_value(json!({"name": "a", "features": "x,y", "partitions": null}))
                .unwrap();
        assert_eq!(n.features, ["x", "y"]);
        assert!(n.partitions.is_empty());
    }
}
