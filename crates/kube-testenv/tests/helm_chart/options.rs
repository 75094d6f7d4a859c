//! What the options render: the pre-delete hook, the split and run modes, certificates,
//! high availability, admission disabled, which pods the webhooks are sent, and the fixed quirks
//! of the reference chart.

use crate::support::{CASES, NAMESPACE, PREFIX, documents, find, kinds, render, strings};

/// The pre-delete hook (issue 21): a Job running `release-finalizers` under its own
/// ServiceAccount, with the Slurm token and config mounted as the Deployments have them; its
/// objects are hooks (created before the Job, deleted after it succeeds); a value turns it off.
#[test]
fn the_pre_delete_hook_releases_finalizers() {
    let name = format!("{PREFIX}-release-finalizers");
    let docs = documents(&render(&[]));
    for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"] {
        let d = find(&docs, kind, &name);
        let a = &d["metadata"]["annotations"];
        assert_eq!(a["helm.sh/hook"], "pre-delete", "{kind}");
        assert_eq!(
            a["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded",
            "{kind}"
        );
    }
    let weight = |kind: &str| -> i32 {
        find(&docs, kind, &name)["metadata"]["annotations"]["helm.sh/hook-weight"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(weight("ServiceAccount") < weight("Job"));
    assert!(weight("ClusterRoleBinding") < weight("Job"));
    let job = find(&docs, "Job", &name);
    let spec = &job["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], name);
    assert_eq!(spec["restartPolicy"], "Never");
    let c = &spec["containers"][0];
    assert_eq!(
        strings(&c["args"]),
        [
            "release-finalizers",
            "--config=/etc/slurm-bridge/config.yaml"
        ]
    );
    assert!(
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "SLURM_JWT_FILE")
    );
    let secret = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "slurm-token")
        .expect("the Slurm token volume");
    assert_eq!(secret["secret"]["secretName"], "slurm-bridge-token");
    let binding = find(&docs, "ClusterRoleBinding", &name);
    assert_eq!(binding["roleRef"]["name"], name);
    assert_eq!(binding["subjects"][0]["name"], name);
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    // Rendered in both modes; --cancel-running by value; none when disabled.
    let run = documents(&render(&["mode=run"]));
    find(&run, "Job", &name);
    let cancel = documents(&render(&["releaseFinalizers.cancelRunning=true"]));
    let args =
        strings(&find(&cancel, "Job", &name)["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.contains(&"--cancel-running".to_string()), "{args:?}");
    let off = documents(&render(&["releaseFinalizers.enabled=false"]));
    assert!(
        !kinds(&off)
            .iter()
            .any(|k| k.ends_with("-release-finalizers")),
        "disabled, yet rendered: {:?}",
        kinds(&off)
    );
}

#[test]
fn the_options_render_what_they_say() {
    // split: three Deployments, each with its ServiceAccount.
    let docs = documents(&render(&[]));
    for c in ["scheduler", "controllers", "admission"] {
        let d = find(&docs, "Deployment", &format!("{PREFIX}-{c}"));
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(spec["serviceAccountName"], format!("{PREFIX}-{c}"));
        assert_eq!(spec["containers"][0]["args"][0], c);
        let checksum = d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            .as_str()
            .unwrap();
        assert!(
            checksum.len() == 64 && checksum.chars().all(|c| c.is_ascii_hexdigit()),
            "{checksum}"
        );
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        let container = &spec["containers"][0];
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        let env: Vec<&str> = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        if c == "admission" {
            // Admission does not call Slurm: no token.
            assert!(!env.contains(&"SLURM_JWT_FILE"), "{env:?}");
        } else {
            let jwt = &container["env"][0];
            assert_eq!(jwt["name"], "SLURM_JWT_FILE");
            assert_eq!(jwt["value"], "/var/run/secrets/slurm/auth-token");
            let vol = spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == "slurm-token")
                .unwrap();
            assert_eq!(vol["secret"]["secretName"], "slurm-bridge-token");
            assert_eq!(vol["secret"]["items"][0]["key"], "auth-token");
        }
        find(&docs, "Service", &format!("{PREFIX}-{c}-metrics"));
    }
    // Only admission has two replicas and a PodDisruptionBudget by default (issue 40).
    let pdbs: Vec<String> = kinds(&docs)
        .into_iter()
        .filter(|k| k.starts_with("PodDisruptionBudget/"))
        .collect();
    assert_eq!(pdbs, [format!("PodDisruptionBudget/{PREFIX}-admission")]);
    let adm = find(&docs, "Deployment", &format!("{PREFIX}-admission"));
    assert_eq!(adm["spec"]["replicas"], 2);
    let pdb = find(&docs, "PodDisruptionBudget", &format!("{PREFIX}-admission"));
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        adm["spec"]["selector"]["matchLabels"]
    );
    // cert-manager by default: the CA is injected, the serving certificate mounted.
    let m = find(
        &docs,
        "MutatingWebhookConfiguration",
        &format!("{PREFIX}-admission"),
    );
    assert_eq!(
        m["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/{PREFIX}-admission")
    );
    assert_eq!(m["webhooks"][0]["failurePolicy"], "Fail");
    assert_eq!(
        m["webhooks"][0]["rules"][0]["resources"],
        serde_json::json!(["pods"])
    );
    let v = find(
        &docs,
        "ValidatingWebhookConfiguration",
        &format!("{PREFIX}-admission"),
    );
    assert_eq!(
        v["webhooks"][0]["rules"][0]["resources"],
        serde_json::json!(["pods", "pods/resize"])
    );
    find(&docs, "Certificate", &format!("{PREFIX}-admission"));
    let cm = find(&docs, "ConfigMap", &format!("{PREFIX}-config"));
    let config = cm["data"]["config.yaml"].as_str().unwrap();
    assert!(
        config.contains("schedulerName: \"slurm-bridge-scheduler\""),
        "{config}"
    );
    assert!(
        config.contains("managedNamespaces:\n  - slurm-bridge"),
        "{config}"
    );
    assert!(!config.contains("priorityClasses"), "{config}");
    // priorityClasses reach config.yaml as given.
    let docs = documents(&render(&[
        "schedulerConfig.priorityClasses.high.qos=urgent",
        "schedulerConfig.priorityClasses.high.priority=1000",
    ]));
    let cm = find(&docs, "ConfigMap", &format!("{PREFIX}-config"));
    let config = cm["data"]["config.yaml"].as_str().unwrap();
    assert!(
        config.contains("priorityClasses:\n  high:\n    priority: 1000\n    qos: urgent\n"),
        "{config}"
    );

    // run: one Deployment, its ServiceAccount bound to the three components' roles.
    let docs = documents(&render(&["mode=run"]));
    let deployments: Vec<_> = kinds(&docs)
        .into_iter()
        .filter(|k| k.starts_with("Deployment/"))
        .collect();
    assert_eq!(deployments, vec![format!("Deployment/{PREFIX}-run")]);
    let run = find(&docs, "Deployment", &format!("{PREFIX}-run"));
    let args = &run["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[0], "run");
    assert!(
        args.as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--cert-dir=/var/run/slurm-bridge/certs")
    );
    let svc = find(&docs, "Service", &format!("{PREFIX}-admission"));
    assert_eq!(
        svc["spec"]["selector"]["app.kubernetes.io/component"],
        "run"
    );

    // Self-managed certificates: the bridge's own flags, a writable cert dir, no cert-manager.
    let docs = documents(&render(&["admission.certManager.enabled=false"]));
    assert!(
        !kinds(&docs)
            .iter()
            .any(|k| k.starts_with("Certificate/") || k.starts_with("Issuer/"))
    );
    let adm = find(&docs, "Deployment", &format!("{PREFIX}-admission"));
    let spec = &adm["spec"]["template"]["spec"];
    let args: Vec<&str> = spec["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&format!("--webhook-configurations={PREFIX}-admission").as_str()),
        "{args:?}"
    );
    // The CA is shared through a Secret, so more than one replica serves one CA.
    assert!(
        args.contains(&format!("--self-signed-ca-secret={PREFIX}-admission-ca").as_str()),
        "{args:?}"
    );
    assert!(
        args.contains(
            &format!("--self-signed-names={PREFIX}-admission,{PREFIX}-admission.{NAMESPACE},{PREFIX}-admission.{NAMESPACE}.svc,{PREFIX}-admission.{NAMESPACE}.svc.cluster.local").as_str()
        ),
        "{args:?}"
    );
    let certs = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "certs")
        .unwrap();
    assert!(certs["emptyDir"].is_object(), "{certs}");
    let m = find(
        &docs,
        "MutatingWebhookConfiguration",
        &format!("{PREFIX}-admission"),
    );
    assert!(m["metadata"]["annotations"].is_null());

    // High availability: PDBs only over more than one replica.
    let docs = documents(&render(CASES[4].1));
    let pdb = find(
        &docs,
        "PodDisruptionBudget",
        &format!("{PREFIX}-controllers"),
    );
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"]["minAvailable"].is_null());
    let pdb = find(&docs, "PodDisruptionBudget", &format!("{PREFIX}-scheduler"));
    assert_eq!(pdb["spec"]["minAvailable"], 1);

    // Admission disabled: no webhook objects at all.
    let docs = documents(&render(&["admission.enabled=false"]));
    assert!(
        !kinds(&docs).iter().any(|k| k.contains("admission")),
        "{:?}",
        kinds(&docs)
    );
}

/// The webhooks' matchConditions and namespaceSelectors, per configuration.
fn webhook_entries(docs: &[serde_json::Value]) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let c = find(docs, kind, &format!("{PREFIX}-admission"));
        for w in c["webhooks"].as_array().unwrap() {
            out.push((kind.to_string(), w.clone()));
        }
    }
    out
}

/// Issue 40: the API server sends the webhooks only the bridge's pods. A pod naming the bridge
/// scheduler (CREATE, UPDATE; any namespace but kube-system and the release namespace, by a CEL
/// matchCondition), and on CREATE a pod naming no scheduler in a managed namespace (a
/// namespaceSelector from `managedNamespaces` or `managedNamespaceSelector`). The configurations
/// on a real API server: `webhook_outage_e2e` (slurm-bridge).
#[test]
fn the_webhooks_are_sent_only_the_bridges_pods() {
    use serde_json::json;
    let excluded = json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn",
        "values": ["kube-system", NAMESPACE]});
    let scheduler_condition = |name: &str| {
        json!([{"name": "names-the-bridge-scheduler", "expression":
            format!("has(object.spec.schedulerName) && object.spec.schedulerName == '{name}'")}])
    };
    let default_condition = json!([{"name": "names-no-scheduler", "expression":
        "!has(object.spec.schedulerName) || object.spec.schedulerName == '' || object.spec.schedulerName == 'default-scheduler'"}]);
    let check = |sets: &[&str], scheduler: &str, managed: Option<serde_json::Value>| {
        let entries = webhook_entries(&documents(&render(sets)));
        assert_eq!(
            entries.len(),
            if managed.is_some() { 4 } else { 2 },
            "{sets:?}"
        );
        for (kind, w) in &entries {
            let mutating = kind == "MutatingWebhookConfiguration";
            match w["name"].as_str().unwrap() {
                "pods.slinky.slurm.net" => {
                    assert_eq!(
                        w["matchConditions"],
                        scheduler_condition(scheduler),
                        "{sets:?}"
                    );
                    assert_eq!(
                        w["namespaceSelector"],
                        json!({"matchExpressions": [excluded]})
                    );
                    assert_eq!(w["rules"][0]["operations"], json!(["CREATE", "UPDATE"]));
                    let resources = if mutating {
                        json!(["pods"])
                    } else {
                        json!(["pods", "pods/resize"])
                    };
                    assert_eq!(w["rules"][0]["resources"], resources);
                }
                "managed-namespaces.pods.slinky.slurm.net" => {
                    assert_eq!(w["matchConditions"], default_condition, "{sets:?}");
                    assert_eq!(Some(&w["namespaceSelector"]), managed.as_ref(), "{sets:?}");
                    assert_eq!(w["rules"][0]["operations"], json!(["CREATE"]));
                    assert_eq!(w["rules"][0]["resources"], json!(["pods"]));
                }
                other => panic!("unexpected webhook {other} in {kind}"),
            }
            let path = if mutating {
                "/mutate--v1-pod"
            } else {
                "/validate--v1-pod"
            };
            assert_eq!(w["clientConfig"]["service"]["path"], path);
        }
    };
    // managedNamespaces: an In on the name label every namespace has.
    check(
        &[],
        "slurm-bridge-scheduler",
        Some(json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["slurm-bridge"]},
            excluded]})),
    );
    check(
        &[
            "admission.managedNamespaces={a,b}",
            "schedulerConfig.schedulerName=hpc",
        ],
        "hpc",
        Some(json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]},
            excluded]})),
    );
    // No managed namespace: only pods naming the bridge scheduler.
    check(
        &["admission.managedNamespaces=null"],
        "slurm-bridge-scheduler",
        None,
    );
    // managedNamespaceSelector: as given, label values as strings (`--set ...=true` is a bool).
    check(
        &["admission.managedNamespaceSelector.matchLabels.slurm-bridge/managed=true"],
        "slurm-bridge-scheduler",
        Some(json!({"matchLabels": {"slurm-bridge/managed": "true"},
            "matchExpressions": [excluded]})),
    );
    check(
        &[
            "admission.managedNamespaceSelector.matchExpressions[0].key=tier",
            "admission.managedNamespaceSelector.matchExpressions[0].operator=In",
            "admission.managedNamespaceSelector.matchExpressions[0].values={1,hpc}",
        ],
        "slurm-bridge-scheduler",
        Some(json!({"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["1", "hpc"]}, excluded]})),
    );
    // failurePolicy and timeoutSeconds reach every webhook.
    for (_, w) in webhook_entries(&documents(&render(&[
        "admission.failurePolicy=Ignore",
        "admission.timeoutSeconds=3",
    ]))) {
        assert_eq!(w["failurePolicy"], "Ignore");
        assert_eq!(w["timeoutSeconds"], 3);
    }
}

/// Reference quirk 19: the controllers Deployment took `admission.resources`, and the scheduler's
/// objects were always named `slurm-bridge-scheduler` (a duplicated name helper).
#[test]
fn chart_quirks_are_fixed() {
    let docs = documents(&render(&[
        "fullnameOverride=bridge",
        "controllers.resources.limits.memory=256Mi",
        "admission.resources.limits.memory=64Mi",
    ]));
    let ctl = find(&docs, "Deployment", "bridge-controllers");
    assert_eq!(
        ctl["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "256Mi"
    );
    let adm = find(&docs, "Deployment", "bridge-admission");
    assert_eq!(
        adm["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "64Mi"
    );
    for kind in [
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    ] {
        find(&docs, kind, "bridge-scheduler");
    }
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "slurm-bridge-scheduler"),
        "an object still has the hard-coded name"
    );
}

/// The node agent (issue 39): off by default; on, a DaemonSet on the hybrid nodes running
/// `node-agent` for its own node, as root without capabilities on a read-only root fs, with the
/// host's NRI socket folder, the Slurm token and no Kubernetes token; `defaultMemPerCpu` reaches
/// config.yaml.
#[test]
fn the_node_agent_runs_on_hybrid_nodes_when_enabled() {
    let name = format!("{PREFIX}-node-agent");
    assert!(!kinds(&documents(&render(&[]))).contains(&format!("DaemonSet/{name}")));
    let docs = documents(&render(&[
        "nodeAgent.enabled=true",
        "nodeAgent.unmanagedCpus=0-1",
        "schedulerConfig.defaultMemPerCpu=512",
    ]));
    let ds = find(&docs, "DaemonSet", &name);
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["nodeSelector"]["slinky.slurm.net/hybrid"], "true");
    assert_eq!(spec["securityContext"]["runAsUser"], 0);
    let c = &spec["containers"][0];
    assert_eq!(
        strings(&c["args"]),
        [
            "node-agent",
            "--config=/etc/slurm-bridge/config.yaml",
            "--node=$(NODE_NAME)",
            "--nri-socket=/var/run/nri/nri.sock",
            "--unmanaged-cpus=0-1",
            "--health-probe-bind-address=0.0.0.0:8081",
        ]
    );
    // Probed on the pod IP, at the named port; the probes' timing from values.
    assert_eq!(c["ports"][0]["name"], "health");
    assert_eq!(c["ports"][0]["containerPort"], 8081);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "health");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "health");
    assert_eq!(c["readinessProbe"]["periodSeconds"], 5);
    // Its metrics behind a headless Service, as the other components'.
    let svc = find(&docs, "Service", &format!("{name}-metrics"));
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "health");
    assert!(
        !kinds(&docs).contains("DeviceClass/dra.cpu"),
        "no DeviceClass without draCpu"
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        strings(&c["securityContext"]["capabilities"]["drop"]),
        ["ALL"]
    );
    let env = c["env"].as_array().unwrap();
    assert!(
        env.iter().any(|e| e["name"] == "NODE_NAME"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName")
    );
    assert!(env.iter().any(|e| e["name"] == "SLURM_JWT_FILE"));
    let nri = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "nri")
        .expect("the NRI socket volume");
    assert_eq!(nri["hostPath"]["path"], "/var/run/nri");
    let config = find(&docs, "ConfigMap", &format!("{PREFIX}-config"));
    let yaml = config["data"]["config.yaml"].as_str().unwrap();
    assert!(yaml.contains("defaultMemPerCpu: 512"), "{yaml}");
    assert!(!kinds(&docs).contains(&format!("ClusterRole/{name}")));

    // As the nodes' dra.cpu DRA driver: a ServiceAccount with its token, a ClusterRole reading
    // claims and nodes and keeping slices, the kubelet's plugin folders and the CDI folder
    // mounted as on the host (the kubelet dials the socket path the agent reports).
    let docs = documents(&render(&[
        "nodeAgent.enabled=true",
        "nodeAgent.draCpu=true",
        "nodeAgent.kubeletRootDir=/data/kubelet/",
    ]));
    let ds = find(&docs, "DaemonSet", &name);
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["automountServiceAccountToken"], true);
    assert_eq!(spec["serviceAccountName"], name.as_str());
    let args = strings(&spec["containers"][0]["args"]);
    assert_eq!(
        args[args.len() - 4..],
        [
            "--dra-cpu",
            "--kubelet-registry-dir=/data/kubelet/plugins_registry",
            "--kubelet-plugins-dir=/data/kubelet/plugins",
            "--cdi-dir=/var/run/cdi",
        ]
    );
    let mounts = spec["containers"][0]["volumeMounts"].as_array().unwrap();
    for (volume, path) in [
        ("kubelet-registry", "/data/kubelet/plugins_registry"),
        ("kubelet-plugins", "/data/kubelet/plugins"),
        ("cdi", "/var/run/cdi"),
    ] {
        let v = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == volume)
            .unwrap_or_else(|| panic!("volume {volume}"));
        assert_eq!(v["hostPath"]["path"], path, "{volume}");
        assert!(
            mounts
                .iter()
                .any(|m| m["name"] == volume && m["mountPath"] == path),
            "{volume} mounted at {path}"
        );
    }
    find(&docs, "ServiceAccount", &name);
    let role = find(&docs, "ClusterRole", &name);
    let rules: Vec<(String, Vec<String>)> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            strings(&r["resources"])
                .into_iter()
                .map(|res| (res, strings(&r["verbs"])))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        rules,
        [
            (
                "resourceclaims".to_string(),
                strings(&serde_json::json!(["get"]))
            ),
            (
                "resourceslices".to_string(),
                strings(&serde_json::json!(["list", "create", "patch", "delete"]))
            ),
            ("nodes".to_string(), strings(&serde_json::json!(["get"]))),
        ]
    );
    let binding = find(&docs, "ClusterRoleBinding", &name);
    assert_eq!(binding["subjects"][0]["name"], name.as_str());

    // The dra.cpu DeviceClass, selecting the driver's devices, unless the site manages it.
    let class = find(&docs, "DeviceClass", "dra.cpu");
    assert_eq!(
        class["spec"]["selectors"][0]["cel"]["expression"],
        "device.driver == \"dra.cpu\""
    );
    let docs = documents(&render(&[
        "nodeAgent.enabled=true",
        "nodeAgent.draCpu=true",
        "nodeAgent.deviceClass.create=false",
        "nodeAgent.readinessProbe.failureThreshold=6",
        "nodeAgent.livenessProbe.timeoutSeconds=3",
    ]));
    assert!(
        !kinds(&docs).contains("DeviceClass/dra.cpu"),
        "a site's own DeviceClass"
    );
    let c = &find(&docs, "DaemonSet", &name)["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["readinessProbe"]["failureThreshold"], 6);
    assert_eq!(c["readinessProbe"]["periodSeconds"], 5);
    assert_eq!(c["livenessProbe"]["timeoutSeconds"], 3);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
}

/// `schedulerConfig.draDeviceDrivers` reaches config.yaml as `draDeviceDrivers`; by default it
/// is left out (the built-in GPU drivers only).
#[test]
fn dra_device_drivers_reach_config_yaml() {
    let config_of = |sets: &[&str]| -> serde_json::Value {
        let docs = documents(&render(sets));
        let cm = find(&docs, "ConfigMap", &format!("{PREFIX}-config"));
        serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap()
    };
    assert!(config_of(&[]).get("draDeviceDrivers").is_none());
    let config = config_of(&[
        "schedulerConfig.draDeviceDrivers[0].name=test-driver.cdi.k8s.io",
        "schedulerConfig.draDeviceDrivers[0].index=name",
    ]);
    assert_eq!(
        config["draDeviceDrivers"],
        serde_json::json!([{"name": "test-driver.cdi.k8s.io", "index": "name"}])
    );
}
