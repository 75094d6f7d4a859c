//! The tenancy check of the validating webhook: asks beyond the tenant are denied with the
//! scheduler's message, on CREATE and on an UPDATE that changes them, and nothing else is.

use super::*;
use crate::config::Config;
use crate::tenancy::{NamespaceLabels, Tenancy};

fn webhooks(config: &str) -> Webhooks {
    let config = Config::from_yaml(config).unwrap();
    let labels = NamespaceLabels::Static(Arc::new(
        [(
            "ml".to_string(),
            [("team".to_string(), "b".to_string())].into(),
        )]
        .into(),
    ));
    Webhooks {
        scheduler_name: BRIDGE.into(),
        tenancy: Tenancy::with_labels(&config, labels),
        config,
        namespaces: Namespaces::listed(&[MANAGED.to_string(), "ml".to_string()]),
        metrics: AdmissionMetrics::unregistered(),
    }
}

const TENANTS: &str = "\
tenants:
  - name: team-a
    namespaces: [slinky]
    account: team-a
    user: alice
    qos: [normal, high]
    allowAnnotations: [wckey]
  - name: team-b
    namespaceSelector: {matchLabels: {team: b}}
    account: team-b
priorityClasses:
  critical: {qos: urgent}
";

fn annotated(ns: &str, scheduler: Option<&str>, annotations: Value) -> Pod {
    pod(
        ns,
        scheduler,
        json!({"metadata": {"annotations": annotations}}),
    )
}

fn denied(v: Verdict) -> String {
    match v {
        Verdict::Deny(m) => m,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[tokio::test]
async fn asks_beyond_the_tenant_are_denied_naming_key_namespace_and_what_is_allowed() {
    let w = webhooks(TENANTS);
    let r = create(annotated(
        MANAGED,
        Some("default-scheduler"),
        json!({"slurmjob.slinky.slurm.net/user-id": "4242", "slurmjob.slinky.slurm.net/qos": "urgent"}),
    ));
    let m = denied(w.decide(Webhook::Validate, &r).await);
    assert!(
        m.contains("in namespace \"slinky\" (tenant \"team-a\")")
            && m.contains(
                "annotation slurmjob.slinky.slurm.net/user-id=\"4242\" is not allowed (accepted: only \"alice\""
            )
            && m.contains("qos=\"urgent\" is not allowed (accepted: one of \"normal\", \"high\")"),
        "{m}"
    );
    // The tenant selected by label.
    let r = create(annotated(
        "ml",
        Some(BRIDGE),
        json!({"slurmjob.slinky.slurm.net/priority": "4294967293"}),
    ));
    let m = denied(w.decide(Webhook::Validate, &r).await);
    assert!(
        m.contains("(tenant \"team-b\")") && m.contains("priority"),
        "{m}"
    );
    // A PriorityClass mapped to a QoS the tenant does not allow.
    let r = create(pod(
        MANAGED,
        Some(BRIDGE),
        json!({"spec": {"priorityClassName": "critical"}}),
    ));
    let m = denied(w.decide(Webhook::Validate, &r).await);
    assert!(m.contains("PriorityClass \"critical\""), "{m}");
}

#[tokio::test]
async fn asks_within_the_tenant_and_pods_the_bridge_does_not_take_are_allowed() {
    let w = webhooks(TENANTS);
    for (ns, scheduler, annotations) in [
        (
            MANAGED,
            Some(BRIDGE),
            json!({"slurmjob.slinky.slurm.net/qos": "high", "slurmjob.slinky.slurm.net/wckey": "sim",
                   "slurmjob.slinky.slurm.net/account": "team-a"}),
        ),
        // Another scheduler's pod: not the bridge's business.
        (
            MANAGED,
            Some("other"),
            json!({"slurmjob.slinky.slurm.net/user-id": "0"}),
        ),
        // An unmanaged namespace, default scheduler: not taken.
        (
            "default",
            None,
            json!({"slurmjob.slinky.slurm.net/user-id": "0"}),
        ),
    ] {
        let r = create(annotated(ns, scheduler, annotations.clone()));
        assert_eq!(
            w.decide(Webhook::Validate, &r).await,
            Verdict::allow(),
            "{ns} {annotations}"
        );
    }
}

#[tokio::test]
async fn a_namespace_without_a_tenant_is_denied_when_tenants_are_configured() {
    let w = webhooks("tenants: [{name: a, namespaces: [other]}]\n");
    let m = denied(
        w.decide(
            Webhook::Validate,
            &create(pod(MANAGED, Some(BRIDGE), json!({}))),
        )
        .await,
    );
    assert!(m.contains("belongs to no tenant"), "{m}");
    // With no tenants at all, the implicit tenant: plain pods pass, identity does not.
    let w = webhooks("");
    assert_eq!(
        w.decide(
            Webhook::Validate,
            &create(pod(MANAGED, Some(BRIDGE), json!({})))
        )
        .await,
        Verdict::allow()
    );
    let r = create(annotated(
        MANAGED,
        Some(BRIDGE),
        json!({"slurmjob.slinky.slurm.net/user-id": "4242"}),
    ));
    let m = denied(w.decide(Webhook::Validate, &r).await);
    assert!(m.contains("(tenant \"(default)\")"), "{m}");
}

#[tokio::test]
async fn updates_are_judged_only_when_they_change_a_policy_annotation() {
    let w = webhooks(TENANTS);
    let bad = annotated(
        MANAGED,
        Some(BRIDGE),
        json!({"slurmjob.slinky.slurm.net/user-id": "4242"}),
    );
    // A pod admitted under an older policy keeps being updatable (its finalizer removed, ...).
    let mut later = bad.clone();
    later.metadata.finalizers = Some(vec![]);
    assert_eq!(
        w.decide(Webhook::Validate, &update(later, bad.clone()))
            .await,
        Verdict::allow()
    );
    // Adding a refused ask to a pod is denied.
    let clean = pod(MANAGED, Some(BRIDGE), json!({}));
    let m = denied(w.decide(Webhook::Validate, &update(bad, clean)).await);
    assert!(m.contains("user-id"), "{m}");
}
