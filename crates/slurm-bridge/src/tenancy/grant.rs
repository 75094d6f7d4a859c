//! The decision: what a pod's author asked of the policy fields, against what its tenant
//! allows. Pure, so the webhook, the scheduler and `translate` decide alike.

use super::tenant::{PolicyKey, Tenant};
use crate::config::PriorityMapping;
use crate::workload::ir::JobInfo;

/// Where an asked value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A `slurmjob.slinky.slurm.net/*` annotation.
    Annotation,
    /// The config's mapping of the pod's PriorityClass (`priorityClasses`).
    PriorityClass(String),
}

/// One asked value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// The value, as text.
    pub value: String,
    /// Its source.
    pub origin: Origin,
}

/// What a job's authors asked of the policy fields (annotations, then a mapped PriorityClass).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    fields: Vec<(PolicyKey, Ask)>,
}

impl Asked {
    /// The asks of a translated job: its annotations, and where they give none the config's
    /// mapping of PriorityClass `class` (QoS, partition, priority).
    pub fn new(job: &JobInfo, mapped: Option<(&str, &PriorityMapping)>) -> Asked {
        let mut fields = Vec::new();
        let annotated = [
            (PolicyKey::Account, job.account.clone()),
            (PolicyKey::UserId, job.user_id.clone()),
            (PolicyKey::GroupId, job.group_id.clone()),
            (PolicyKey::Qos, job.qos.clone()),
            (PolicyKey::Partition, job.partition.clone()),
            (PolicyKey::Priority, job.priority.map(|p| p.to_string())),
            (PolicyKey::Reservation, job.reservation.clone()),
            (PolicyKey::Wckey, job.wckey.clone()),
        ];
        for (key, value) in annotated {
            let class = mapped.and_then(|(class, m)| {
                let v = match key {
                    PolicyKey::Qos => m.qos.clone(),
                    PolicyKey::Partition => m.partition.clone(),
                    PolicyKey::Priority => m.priority.map(|p| p.to_string()),
                    _ => None,
                }?;
                Some(Ask {
                    value: v,
                    origin: Origin::PriorityClass(class.to_string()),
                })
            });
            let ask = value
                .map(|value| Ask {
                    value,
                    origin: Origin::Annotation,
                })
                .or(class);
            if let Some(ask) = ask {
                fields.push((key, ask));
            }
        }
        Asked { fields }
    }

    /// The ask of `key`, if any.
    pub fn get(&self, key: PolicyKey) -> Option<&Ask> {
        self.fields.iter().find(|(k, _)| *k == key).map(|(_, a)| a)
    }

    /// Whether nothing is asked.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

/// What the job gets: the tenant's settings, with the authors' asks where allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    /// Slurm account.
    pub account: Option<String>,
    /// Slurm user (name or uid) the job runs as; `None`: the bridge's own.
    pub user: Option<String>,
    /// Unix group (name or gid); `None`: the user's primary group.
    pub group: Option<String>,
    /// QoS.
    pub qos: Option<String>,
    /// Partition; `None`: the config's.
    pub partition: Option<String>,
    /// Job priority.
    pub priority: Option<u32>,
    /// Reservation.
    pub reservation: Option<String>,
    /// Workload characterization key.
    pub wckey: Option<String>,
}

impl Granted {
    /// Every ask granted as it is, whatever a tenant allows: what the Go original submitted.
    /// For `translate --as-asked` and comparisons of translations; a submit always goes through
    /// [`grant`].
    pub fn as_asked(asked: &Asked) -> Granted {
        let ask = |key| asked.get(key).map(|a: &Ask| a.value.clone());
        Granted {
            account: ask(PolicyKey::Account),
            user: ask(PolicyKey::UserId),
            group: ask(PolicyKey::GroupId),
            qos: ask(PolicyKey::Qos),
            partition: ask(PolicyKey::Partition),
            priority: ask(PolicyKey::Priority).and_then(|p| p.parse().ok()),
            reservation: ask(PolicyKey::Reservation),
            wckey: ask(PolicyKey::Wckey),
        }
    }
}

/// The authors asked what their tenant does not allow. The message names each key, the
/// namespace, the tenant and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The keys refused, in [`PolicyKey::ALL`] order.
    pub keys: Vec<PolicyKey>,
    /// The whole message.
    pub message: String,
}

impl Refusal {
    /// A namespace no tenant covers, with tenants configured and no `defaultTenant`.
    pub fn uncovered(namespace: &str) -> Refusal {
        Refusal {
            keys: Vec::new(),
            message: format!(
                "namespace {namespace:?} belongs to no tenant of the slurm-bridge config and there is no defaultTenant: \
                 its pods are not scheduled through Slurm (an administrator adds the namespace to a tenant)"
            ),
        }
    }
}

fn quoted(list: &[String]) -> String {
    list.iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `tenant` accepts for `key`, in words.
fn accepted(tenant: &Tenant, key: PolicyKey) -> String {
    if tenant.allow_annotations.contains(&key) {
        return "any value".into();
    }
    let (list, fixed) = match key {
        PolicyKey::Qos => (tenant.qos.as_slice(), None),
        PolicyKey::Partition => (tenant.partitions.as_slice(), None),
        PolicyKey::Account => (&[][..], tenant.account.as_ref()),
        PolicyKey::UserId => (&[][..], tenant.user.as_ref()),
        PolicyKey::GroupId => (&[][..], tenant.group.as_ref()),
        _ => (&[][..], None),
    };
    match (list.is_empty(), fixed) {
        (false, _) => format!("one of {}", quoted(list)),
        (true, Some(f)) => format!("only {f:?}, the tenant's own"),
        (true, None) => "none (set by the administrator)".into(),
    }
}

fn allowed(tenant: &Tenant, key: PolicyKey, value: &str) -> bool {
    if tenant.allow_annotations.contains(&key) {
        return true;
    }
    match key {
        PolicyKey::Qos => tenant.qos.iter().any(|q| q == value),
        PolicyKey::Partition => tenant.partitions.iter().any(|p| p == value),
        PolicyKey::Account => tenant.account.as_deref() == Some(value),
        PolicyKey::UserId => tenant.user.as_deref() == Some(value),
        PolicyKey::GroupId => tenant.group.as_deref() == Some(value),
        PolicyKey::Priority | PolicyKey::Reservation | PolicyKey::Wckey => false,
    }
}

/// Decides a job of `namespace` under `tenant`: every ask the tenant does not allow is
/// refused (all of them in one message); otherwise the tenant's settings with the allowed asks.
pub fn grant(tenant: &Tenant, namespace: &str, asked: &Asked) -> Result<Granted, Refusal> {
    let mut refused = Vec::new();
    for (key, ask) in &asked.fields {
        if !allowed(tenant, *key, &ask.value) {
            refused.push((*key, ask));
        }
    }
    if !refused.is_empty() {
        let parts: Vec<String> = refused
            .iter()
            .map(|(key, ask)| {
                let source = match &ask.origin {
                    Origin::Annotation => format!("annotation {}", key.annotation()),
                    Origin::PriorityClass(c) => {
                        format!(
                            "{} of PriorityClass {c:?} (config priorityClasses)",
                            key.name()
                        )
                    }
                };
                format!(
                    "{source}={:?} is not allowed (accepted: {})",
                    ask.value,
                    accepted(tenant, *key)
                )
            })
            .collect();
        return Err(Refusal {
            keys: refused.iter().map(|(k, _)| *k).collect(),
            message: format!(
                "in namespace {namespace:?} (tenant {:?}) {}",
                tenant.name,
                parts.join("; ")
            ),
        });
    }
    let ask = |key| asked.get(key).map(|a| a.value.clone());
    Ok(Granted {
        account: ask(PolicyKey::Account).or_else(|| tenant.account.clone()),
        user: ask(PolicyKey::UserId).or_else(|| tenant.user.clone()),
        group: ask(PolicyKey::GroupId).or_else(|| tenant.group.clone()),
        qos: ask(PolicyKey::Qos).or_else(|| tenant.qos.first().cloned()),
        partition: ask(PolicyKey::Partition).or_else(|| tenant.partitions.first().cloned()),
        priority: ask(PolicyKey::Priority).and_then(|p| p.parse().ok()),
        reservation: ask(PolicyKey::Reservation),
        wckey: ask(PolicyKey::Wckey),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team_a() -> Tenant {
        Tenant {
            name: "team-a".into(),
            namespaces: vec!["team-a".into()],
            account: Some("team-a".into()),
            user: Some("alice".into()),
            qos: vec!["normal".into(), "high".into()],
            partitions: vec!["slurm-bridge".into()],
            allow_annotations: [PolicyKey::Wckey].into(),
            ..Tenant::default()
        }
    }

    fn job(f: impl FnOnce(&mut JobInfo)) -> JobInfo {
        let mut j = JobInfo::default();
        f(&mut j);
        j
    }

    #[test]
    fn nothing_asked_gives_the_tenants_settings() {
        let g = grant(&team_a(), "team-a", &Asked::new(&JobInfo::default(), None)).unwrap();
        assert_eq!(
            g,
            Granted {
                account: Some("team-a".into()),
                user: Some("alice".into()),
                qos: Some("normal".into()),
                partition: Some("slurm-bridge".into()),
                ..Granted::default()
            }
        );
    }

    #[test]
    fn asks_within_the_lists_and_allowed_keys_are_granted() {
        let asked = Asked::new(
            &job(|j| {
                j.qos = Some("high".into());
                j.wckey = Some("sim".into());
                j.account = Some("team-a".into());
            }),
            None,
        );
        let g = grant(&team_a(), "team-a", &asked).unwrap();
        assert_eq!(g.qos.as_deref(), Some("high"));
        assert_eq!(g.wckey.as_deref(), Some("sim"));
        assert_eq!(g.user.as_deref(), Some("alice"));
    }

    #[test]
    fn identity_and_priority_are_refused_with_every_key_named() {
        let asked = Asked::new(
            &job(|j| {
                j.user_id = Some("4242".into());
                j.account = Some("team-b".into());
                j.qos = Some("urgent".into());
                j.priority = Some(4_294_967_293);
            }),
            None,
        );
        let r = grant(&team_a(), "team-a", &asked).unwrap_err();
        assert_eq!(
            r.keys,
            [
                PolicyKey::Account,
                PolicyKey::UserId,
                PolicyKey::Qos,
                PolicyKey::Priority
            ]
        );
        assert_eq!(
            r.message,
            "in namespace \"team-a\" (tenant \"team-a\") \
             annotation slurmjob.slinky.slurm.net/account=\"team-b\" is not allowed (accepted: only \"team-a\", the tenant's own); \
             annotation slurmjob.slinky.slurm.net/user-id=\"4242\" is not allowed (accepted: only \"alice\", the tenant's own); \
             annotation slurmjob.slinky.slurm.net/qos=\"urgent\" is not allowed (accepted: one of \"normal\", \"high\"); \
             annotation slurmjob.slinky.slurm.net/priority=\"4294967293\" is not allowed (accepted: none (set by the administrator))"
        );
    }

    #[test]
    fn the_implicit_tenant_allows_no_policy_annotation() {
        for key in PolicyKey::ALL {
            let asked = Asked {
                fields: vec![(
                    key,
                    Ask {
                        value: "1".into(),
                        origin: Origin::Annotation,
                    },
                )],
            };
            let r = grant(&Tenant::implicit(), "default", &asked).unwrap_err();
            assert_eq!(r.keys, [key]);
            assert!(r.message.contains(key.annotation()), "{}", r.message);
        }
        assert_eq!(
            grant(&Tenant::implicit(), "default", &Asked::default()).unwrap(),
            Granted::default()
        );
    }

    #[test]
    fn a_priority_class_mapping_must_be_allowed_too() {
        let mapping = PriorityMapping {
            qos: Some("urgent".into()),
            partition: None,
            priority: Some(900),
        };
        let asked = Asked::new(&JobInfo::default(), Some(("critical", &mapping)));
        let r = grant(&team_a(), "team-a", &asked).unwrap_err();
        assert_eq!(r.keys, [PolicyKey::Qos, PolicyKey::Priority]);
        assert!(
            r.message
                .contains("qos of PriorityClass \"critical\" (config priorityClasses)=\"urgent\""),
            "{}",
            r.message
        );
        // An annotation wins over the mapping, field by field.
        let asked = Asked::new(
            &job(|j| j.qos = Some("high".into())),
            Some((
                "critical",
                &PriorityMapping {
                    qos: Some("urgent".into()),
                    ..Default::default()
                },
            )),
        );
        assert_eq!(
            grant(&team_a(), "team-a", &asked).unwrap().qos.as_deref(),
            Some("high")
        );
        // Allowed by the tenant: granted.
        let mut t = team_a();
        t.qos.push("urgent".into());
        t.allow_annotations.insert(PolicyKey::Priority);
        let asked = Asked::new(&JobInfo::default(), Some(("critical", &mapping)));
        let g = grant(&t, "team-a", &asked).unwrap();
        assert_eq!((g.qos.as_deref(), g.priority), (Some("urgent"), Some(900)));
    }

    #[test]
    fn an_uncovered_namespace_says_so() {
        assert!(
            Refusal::uncovered("web")
                .message
                .starts_with("namespace \"web\" belongs to no tenant")
        );
    }
}
