//! The controllers kube-testenv runs, as their release manifests configure them: binaries,
//! configuration files, flags and webhooks.

use super::certs::TRAINER_WEBHOOK_CONFIGURATION;
use super::{Controller, Hook, Launch};

pub const JOBSET: Controller = Controller {
    name: "jobset",
    binary: "jobset-controller",
    launch: Launch::Config {
        api: "config.jobset.x-k8s.io/v1alpha1",
        extra: "",
        args: &[],
        must_exist: None,
    },
    configurations: (
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
    ),
    hooks: &[
        Hook {
            name: "mjobset.kb.io",
            mutating: true,
            path: "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
            group: "jobset.x-k8s.io",
            version: "v1alpha2",
            resources: &["jobsets"],
            operations: &["CREATE"],
            label: None,
            exclude_namespaces: &[],
        },
        Hook {
            name: "mpod.kb.io",
            mutating: true,
            path: "/mutate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: &["CREATE"],
            label: Some("jobset.sigs.k8s.io/jobset-name"),
            exclude_namespaces: &[],
        },
        Hook {
            name: "vjobset.kb.io",
            mutating: false,
            path: "/validate-jobset-x-k8s-io-v1alpha2-jobset",
            group: "jobset.x-k8s.io",
            version: "v1alpha2",
            resources: &["jobsets"],
            operations: &["CREATE", "UPDATE"],
            label: None,
            exclude_namespaces: &[],
        },
        Hook {
            name: "vpod.kb.io",
            mutating: false,
            path: "/validate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: &["CREATE"],
            label: Some("jobset.sigs.k8s.io/jobset-name"),
            exclude_namespaces: &[],
        },
    ],
};

pub const LWS: Controller = Controller {
    name: "lws",
    binary: "lws-controller",
    launch: Launch::Config {
        api: "config.lws.x-k8s.io/v1alpha1",
        extra: "",
        args: &[],
        must_exist: None,
    },
    configurations: (
        "lws-mutating-webhook-configuration",
        "lws-validating-webhook-configuration",
    ),
    hooks: &[
        Hook {
            name: "mleaderworkerset.kb.io",
            mutating: true,
            path: "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            group: "leaderworkerset.x-k8s.io",
            version: "v1",
            resources: &["leaderworkersets"],
            operations: &["CREATE", "UPDATE"],
            label: None,
            exclude_namespaces: &[],
        },
        Hook {
            name: "mpod.kb.io",
            mutating: true,
            path: "/mutate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: &["CREATE"],
            label: Some("leaderworkerset.sigs.k8s.io/name"),
            exclude_namespaces: &[],
        },
        Hook {
            name: "vleaderworkerset.kb.io",
            mutating: false,
            path: "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            group: "leaderworkerset.x-k8s.io",
            version: "v1",
            resources: &["leaderworkersets"],
            operations: &["CREATE", "UPDATE"],
            label: None,
            exclude_namespaces: &[],
        },
        Hook {
            name: "vpod.kb.io",
            mutating: false,
            path: "/validate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: &["CREATE", "UPDATE"],
            label: Some("leaderworkerset.sigs.k8s.io/name"),
            exclude_namespaces: &[],
        },
        Hook {
            name: "vdisaggregatedset.kb.io",
            mutating: false,
            path: "/validate-disaggregatedset-x-k8s-io-v1-disaggregatedset",
            group: "disaggregatedset.x-k8s.io",
            version: "v1",
            resources: &["disaggregatedsets"],
            operations: &["CREATE", "UPDATE"],
            label: None,
            exclude_namespaces: &[],
        },
    ],
};
/// A Kueue webhook on `group/version` `resources`.
const fn kueue_hook(
    name: &'static str,
    mutating: bool,
    path: &'static str,
    group: &'static str,
    version: &'static str,
    resources: &'static [&'static str],
    operations: &'static [&'static str],
) -> Hook {
    Hook {
        name,
        mutating,
        path,
        group,
        version,
        resources,
        operations,
        label: None,
        exclude_namespaces: &[],
    }
}

/// Namespaces Kueue's pod webhooks never see (its release's `namespaceSelector`).
const KUEUE_EXCLUDED: &[&str] = &["kube-system", "kueue-system"];
const CREATE: &[&str] = &["CREATE"];
const CREATE_UPDATE: &[&str] = &["CREATE", "UPDATE"];

/// Kueue with the `batch/job` and `pod` integrations (plain pods and pod groups), and the
/// webhooks of those and of its own kinds. The visibility API server is off: it would need an
/// APIService and binds a fixed port.
pub const KUEUE: Controller = Controller {
    name: "kueue",
    binary: "kueue",
    launch: Launch::Config {
        api: "config.kueue.x-k8s.io/v1beta2",
        extra: "integrations:\n  frameworks: [\"batch/job\", \"pod\"]\n",
        args: &["--feature-gates=VisibilityOnDemand=false"],
        must_exist: Some("/etc/kueue/metrics/certs"),
    },
    configurations: (
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    ),
    hooks: &[
        kueue_hook(
            "mjob.kb.io",
            true,
            "/mutate-batch-v1-job",
            "batch",
            "v1",
            &["jobs"],
            CREATE,
        ),
        kueue_hook(
            "vjob.kb.io",
            false,
            "/validate-batch-v1-job",
            "batch",
            "v1",
            &["jobs"],
            CREATE_UPDATE,
        ),
        Hook {
            name: "mpod.kb.io",
            mutating: true,
            path: "/mutate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: CREATE,
            label: None,
            exclude_namespaces: KUEUE_EXCLUDED,
        },
        Hook {
            name: "vpod.kb.io",
            mutating: false,
            path: "/validate--v1-pod",
            group: "",
            version: "v1",
            resources: &["pods"],
            operations: CREATE_UPDATE,
            label: None,
            exclude_namespaces: KUEUE_EXCLUDED,
        },
        kueue_hook(
            "mworkload.kb.io",
            true,
            "/mutate-kueue-x-k8s-io-v1beta2-workload",
            "kueue.x-k8s.io",
            "v1beta2",
            &["workloads"],
            CREATE,
        ),
        kueue_hook(
            "vworkload.kb.io",
            false,
            "/validate-kueue-x-k8s-io-v1beta2-workload",
            "kueue.x-k8s.io",
            "v1beta2",
            &["workloads", "workloads/status"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "mclusterqueue.kb.io",
            true,
            "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
            "kueue.x-k8s.io",
            "v1beta2",
            &["clusterqueues"],
            CREATE,
        ),
        kueue_hook(
            "vclusterqueue.kb.io",
            false,
            "/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
            "kueue.x-k8s.io",
            "v1beta2",
            &["clusterqueues"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "vcohort.kb.io",
            false,
            "/validate-kueue-x-k8s-io-v1beta2-cohort",
            "kueue.x-k8s.io",
            "v1beta2",
            &["cohorts"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "mresourceflavor.kb.io",
            true,
            "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor",
            "kueue.x-k8s.io",
            "v1beta2",
            &["resourceflavors"],
            CREATE,
        ),
        kueue_hook(
            "vresourceflavor.kb.io",
            false,
            "/validate-kueue-x-k8s-io-v1beta2-resourceflavor",
            "kueue.x-k8s.io",
            "v1beta2",
            &["resourceflavors"],
            CREATE_UPDATE,
        ),
    ],
};

/// Kubeflow Trainer v2's controller manager and its validating webhooks (it has no mutating
/// ones; the configuration name is the one its rotator updates).
pub const TRAINER: Controller = Controller {
    name: "trainer",
    binary: "trainer-controller-manager",
    launch: Launch::Trainer,
    configurations: ("", TRAINER_WEBHOOK_CONFIGURATION),
    hooks: &[
        kueue_hook(
            "validator.clustertrainingruntime.trainer.kubeflow.org",
            false,
            "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime",
            "trainer.kubeflow.org",
            "v1alpha1",
            &["clustertrainingruntimes"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "validator.trainingruntime.trainer.kubeflow.org",
            false,
            "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime",
            "trainer.kubeflow.org",
            "v1alpha1",
            &["trainingruntimes"],
            CREATE_UPDATE,
        ),
        kueue_hook(
            "validator.trainjob.trainer.kubeflow.org",
            false,
            "/validate-trainer-kubeflow-org-v1alpha1-trainjob",
            "trainer.kubeflow.org",
            "v1alpha1",
            &["trainjobs"],
            CREATE_UPDATE,
        ),
    ],
};
