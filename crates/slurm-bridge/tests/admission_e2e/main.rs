//! The admission webhooks against a real API server (kube-testenv): registered through
//! Mutating- and ValidatingWebhookConfigurations (failurePolicy Fail) with a caBundle, called
//! over TLS on 127.0.0.1, served in-process.
//!
//! - pods created in a managed namespace (kube client and kubectl) get the bridge scheduler and
//!   are bound through Slurm; a forged jobid label is refused with the reference message; a
//!   running pod's jobid label cannot change; another scheduler's pod is left alone; bad
//!   AdmissionReviews get 400 and the webhook goes on; a certificate rotated while serving;
//! - self-managed certificates: the bridge fills the caBundle and the API server calls it;
//!   then 1,000 pod creations through both webhooks, with the latency figures.
//!
//! The helpers are in `support`; the tests by what they check: `managed_pods` (provided
//! certificates, the first list), `self_managed` (the second, in-process and in `slurm-bridge
//! run`), `bind_writes` (the finalizer and toleration set at creation, issue 22).

#[path = "../e2e/mod.rs"]
mod e2e;

mod bind_writes;
mod managed_pods;
mod self_managed;
mod support;
