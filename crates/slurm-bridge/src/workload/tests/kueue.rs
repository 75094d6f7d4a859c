//! Issue 23: Kueue pod groups translated.

use super::*;

fn kueue_pod(name: &str, group: &str, total: Option<&str>, extra_meta: &str) -> String {
    let ann = total
        .map(|t| {
            format!(
                "  annotations: {{kueue.x-k8s.io/pod-group-total-count: \"{t}\"{extra_meta}}}\n"
            )
        })
        .unwrap_or_default();
    pod(
        name,
        &format!("  labels: {{kueue.x-k8s.io/pod-group-name: {group}}}\n{ann}"),
        "",
    )
}

#[test]
fn kueue_pod_group_table() {
    // Three pods of one group: one job for all, keyed by the group, sized by the total count.
    let yaml = kueue_pod("b", "g", Some("3"), "")
        + &kueue_pod("a", "g", Some("3"), &format!(", {}: debug", key::PARTITION))
        + &kueue_pod("c", "g", Some("3"), "")
        + &kueue_pod("x", "other", Some("1"), "");
    let rd = reader(&yaml);
    for p in ["a", "b", "c"] {
        let t = run(&rd, p).unwrap();
        assert_eq!(t.group_key, "kueue/ns/g");
        assert_eq!(t.ir.pod_names(), vec!["ns/a", "ns/b", "ns/c"]);
        assert_eq!(t.gang, GangStatus::Complete);
        assert_eq!((t.ir.job.min_nodes, t.ir.job.max_nodes), (Some(3), Some(3)));
        assert_eq!(t.ir.job.job_name.as_deref(), Some("g"));
        // The first member's slurmjob.* annotations, whichever pod is translated.
        assert_eq!(t.ir.job.partition.as_deref(), Some("debug"), "pod {p}");
    }
    // Fewer pods than the total: an incomplete gang, nothing to submit.
    let rd = reader(&(kueue_pod("a", "g", Some("3"), "") + &kueue_pod("b", "g", Some("3"), "")));
    let t = run(&rd, "a").unwrap();
    assert_eq!(
        t.gang,
        GangStatus::Incomplete {
            ready: 2,
            required: 3,
            job_id: None
        }
    );
    // A single-pod group is one job too.
    let t = run(&reader(&kueue_pod("a", "solo", Some("1"), "")), "a").unwrap();
    assert_eq!(t.group_key, "kueue/ns/solo");
    // Missing or bad total count: a clear error naming the pod, the annotation and the form.
    for (total, needle) in [
        (None, "needs the annotation"),
        (Some("zero"), "\"zero\" is not valid"),
        (Some("0"), "\"0\" is not valid"),
    ] {
        let err = run(&reader(&kueue_pod("a", "g", total, "")), "a")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ns/a"), "{err}");
        assert!(
            err.contains("kueue.x-k8s.io/pod-group-total-count"),
            "{err}"
        );
        assert!(err.contains(needle), "{err}");
        if total.is_some() {
            assert!(err.contains("a whole number of pods"), "{err}");
        }
    }
}
