//! Tenancy: the administrator maps namespaces to Slurm identities and policy (`tenants` and
//! `defaultTenant` in config.yaml); a pod's author chooses only within that. See
//! docs/tenancy.md.
//!
//! - [`tenant`]: a tenant as configured, and the policy annotations;
//! - [`grant`]: the pure decision, the authors' asks against the tenant;
//! - [`namespaces`]: namespace labels, for tenants that select namespaces by label;
//! - [`Tenancy`]: which tenant a namespace has, and the decision for a job of it, as the
//!   webhook, the scheduler and `translate` all ask it.

pub mod grant;
pub mod namespaces;
pub mod tenant;

pub use grant::{Ask, Asked, Granted, Origin, Refusal, grant};
pub use namespaces::{LabelsError, NamespaceLabels};
pub use tenant::{PolicyKey, Tenant};

use std::sync::{Arc, LazyLock};

use crate::config::Config;

static IMPLICIT: LazyLock<Tenant> = LazyLock::new(Tenant::implicit);

/// Why a job of a namespace gets no grant.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TenancyError {
    /// The policy refuses it: the authors' asks, or a namespace no tenant covers.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The namespace's labels could not be read (retried).
    #[error(transparent)]
    Labels(#[from] LabelsError),
}

/// The tenant of `namespace` with `labels`: the first tenant covering it, else
/// `defaultTenant`, else (no tenants configured at all) the implicit tenant.
pub fn resolve<'a>(
    cfg: &'a Config,
    namespace: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<&'a Tenant, Refusal> {
    if let Some(t) = cfg.tenants.iter().find(|t| t.covers(namespace, labels)) {
        return Ok(t);
    }
    match (&cfg.default_tenant, cfg.tenants.is_empty()) {
        (Some(t), _) => Ok(t),
        (None, true) => Ok(&IMPLICIT),
        (None, false) => Err(Refusal::uncovered(namespace)),
    }
}

/// The tenancy policy of a config, with the namespace labels its selectors need.
#[derive(Debug, Clone)]
pub struct Tenancy {
    config: Arc<Config>,
    labels: NamespaceLabels,
}

impl Tenancy {
    /// The policy of `cfg`; namespace labels are read through `client` only when a tenant
    /// selects namespaces by label.
    pub fn new(cfg: &Config, client: Option<kube::Client>) -> Tenancy {
        let labels = match client {
            Some(c) if Self::needs_labels(cfg) => NamespaceLabels::fetched(c),
            _ => NamespaceLabels::Unneeded,
        };
        Tenancy::with_labels(cfg, labels)
    }

    /// The policy of `cfg` with labels from `labels`.
    pub fn with_labels(cfg: &Config, labels: NamespaceLabels) -> Tenancy {
        Tenancy {
            config: Arc::new(cfg.clone()),
            labels,
        }
    }

    /// Whether any tenant selects namespaces by label.
    pub fn needs_labels(cfg: &Config) -> bool {
        cfg.tenants.iter().any(|t| t.namespace_selector.is_some())
    }

    /// The decision for a job of `namespace` whose authors asked `asked`.
    pub async fn decide(&self, namespace: &str, asked: &Asked) -> Result<Granted, TenancyError> {
        let labels = self.labels.labels(namespace).await?;
        let tenant = resolve(&self.config, namespace, &labels)?;
        Ok(grant(tenant, namespace, asked)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_takes_the_first_covering_tenant_then_the_default() {
        let cfg = Config::from_yaml(
            "tenants:\n\
             - {name: a, namespaces: [team-a], account: a}\n\
             - {name: labelled, namespaceSelector: {matchLabels: {team: b}}, account: b}\n\
             - {name: a-too, namespaces: [team-a, team-c], account: c}\n",
        )
        .unwrap();
        let none = Default::default();
        let team_b = [("team".to_string(), "b".to_string())].into();
        assert_eq!(resolve(&cfg, "team-a", &none).unwrap().name, "a");
        assert_eq!(resolve(&cfg, "x", &team_b).unwrap().name, "labelled");
        assert_eq!(resolve(&cfg, "team-c", &none).unwrap().name, "a-too");
        assert!(resolve(&cfg, "web", &none).is_err());
        let with_default = Config::from_yaml(
            "tenants: [{name: a, namespaces: [team-a]}]\ndefaultTenant: {account: shared}\n",
        )
        .unwrap();
        assert_eq!(
            resolve(&with_default, "web", &none)
                .unwrap()
                .account
                .as_deref(),
            Some("shared")
        );
        assert_eq!(
            resolve(&Config::default(), "web", &none).unwrap(),
            &Tenant::implicit()
        );
    }

    #[tokio::test]
    async fn decide_reads_the_labels_for_selectors() {
        let cfg = Config::from_yaml(
            "tenants: [{name: b, namespaceSelector: {matchLabels: {team: b}}, account: b, qos: [normal]}]\n",
        )
        .unwrap();
        assert!(Tenancy::needs_labels(&cfg));
        let labels = NamespaceLabels::Static(Arc::new(
            [(
                "ns-b".to_string(),
                [("team".to_string(), "b".to_string())].into(),
            )]
            .into(),
        ));
        let t = Tenancy::with_labels(&cfg, labels);
        let g = t.decide("ns-b", &Asked::default()).await.unwrap();
        assert_eq!(
            (g.account.as_deref(), g.qos.as_deref()),
            (Some("b"), Some("normal"))
        );
        let e = t.decide("ns-c", &Asked::default()).await.unwrap_err();
        assert!(matches!(e, TenancyError::Refused(_)), "{e}");
    }
}
