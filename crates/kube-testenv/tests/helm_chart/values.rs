//! Values the chart refuses with a reason, and the Go original's values file: refused for its
//! images, rendered with this chart's binary once they are dropped.

use crate::support::{PREFIX, chart_dir, documents, find, render, try_render, try_render_files};
use serde_json::Value;
use std::path::PathBuf;

#[test]
fn bad_values_are_refused_with_a_reason() {
    let cases: &[(&[&str], &str)] = &[
        (&["mode=both"], "mode must be"),
        (
            &["scheduler.replicaCount=2", "scheduler.leaderElect=false"],
            "leaderElect",
        ),
        (
            &["controllers.replicas=2", "controllers.leaderElect=false"],
            "leaderElect",
        ),
        (
            &["admission.managedNamespaces={slinky}"],
            "release namespace",
        ),
        (&["admission.failurePolicy=Sometimes"], "failurePolicy"),
    ];
    for (sets, reason) in cases {
        let (ok, _, err) = try_render(sets);
        assert!(!ok, "{sets:?} rendered");
        assert!(err.contains(reason), "{sets:?}: {err}");
    }
}

/// The values file written for the Go original's chart (every key of reference §2.7).
fn go_original_values() -> PathBuf {
    chart_dir().join("tests/go-original-values.yaml")
}

#[test]
fn go_original_images_are_refused_naming_the_key() {
    // The original's whole values file: refused at its first Go image, named by key.
    let (ok, _, err) = try_render_files(&[&go_original_values()], &[]);
    assert!(
        !ok,
        "the original's values file rendered with its Go images"
    );
    assert!(
        err.contains("scheduler.image.repository")
            && err.contains("ghcr.io/slinkyproject/slurm-bridge-scheduler")
            && err.contains("Go original")
            && err.contains("image.repository to the slurm-bridge image"),
        "{err}"
    );
    // Each Go image under each key, mirrored registries too.
    for (key, image) in [
        (
            "scheduler.image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-scheduler",
        ),
        (
            "controllers.image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-controllers",
        ),
        (
            "admission.image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-admission",
        ),
        (
            "controllers.image.repository",
            "registry.example/mirror/slurm-bridge-controllers",
        ),
        (
            "run.image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-scheduler",
        ),
        (
            "image.repository",
            "ghcr.io/slinkyproject/slurm-bridge-admission",
        ),
    ] {
        let set = format!("{key}={image}");
        let (ok, _, err) = try_render(&[&set]);
        assert!(!ok, "{set} rendered");
        assert!(
            err.contains(&format!("{key} is \"{image}\"")),
            "{set}: {err}"
        );
    }
    // This project's own image under a name that merely contains the Go names is fine.
    render(&["scheduler.image.repository=registry.example/slurm-bridge-scheduler-rs"]);
}

#[test]
fn go_original_values_without_its_images_render_this_charts_binary() {
    // The guide's one edit: drop the three `*.image.repository` lines, name our image.
    let text = std::fs::read_to_string(go_original_values()).unwrap();
    let edited: String = text
        .lines()
        .filter(|l| !l.contains("repository: ghcr.io/slinkyproject/"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        text.lines().count() - edited.lines().count(),
        3,
        "three image lines removed"
    );
    let file = std::env::temp_dir().join(format!("go-original-values-{}.yaml", std::process::id()));
    std::fs::write(&file, edited).unwrap();
    let (ok, out, err) = try_render_files(
        &[&file],
        &["image.repository=registry.example/slurm-bridge"],
    );
    let _ = std::fs::remove_file(&file);
    assert!(ok, "{err}");
    let docs = documents(&out);
    for c in ["scheduler", "controllers", "admission"] {
        let d = find(&docs, "Deployment", &format!("{PREFIX}-{c}"));
        let container = &d["spec"]["template"]["spec"]["containers"][0];
        // One image, each Deployment with its own subcommand and only flags the binary knows.
        assert_eq!(
            container["image"], "registry.example/slurm-bridge:0.1.0",
            "{c}"
        );
        assert_eq!(container["imagePullPolicy"], "IfNotPresent", "{c}");
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args[0], c, "{c}: {args:?}");
        for gone in [
            "--feature-gates",
            "-zap-log-level",
            "--v=",
            "--metrics-bind-address",
        ] {
            assert!(!args.iter().any(|a| a.starts_with(gone)), "{c}: {args:?}");
        }
        if c != "admission" {
            // leaderElect: false in the original's values is kept.
            assert!(args.contains(&"--leader-elect=false"), "{c}: {args:?}");
            assert_eq!(container["env"][0]["name"], "SLURM_JWT_FILE");
        }
        // Selectors are this chart's (docs/migration.md: the original's Deployments go first).
        let sel = &d["spec"]["selector"]["matchLabels"];
        assert_eq!(sel["app.kubernetes.io/name"], "slurm-bridge", "{c}");
        assert_eq!(sel["app.kubernetes.io/component"], c, "{c}");
    }
    // config.yaml is the original's rendered default (reference §2.1).
    let cm = find(&docs, "ConfigMap", &format!("{PREFIX}-config"));
    let config: Value =
        serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(
        config,
        serde_json::json!({
            "schedulerName": "slurm-bridge-scheduler",
            "slurmRestApi": "http://slurm-restapi.slurm:6820",
            "managedNamespaces": ["slurm-bridge"],
            "mcsLabel": "kubernetes",
            "partition": "slurm-bridge",
        })
    );
    // cert-manager, as the original's default.
    find(&docs, "Certificate", &format!("{PREFIX}-admission"));
}
