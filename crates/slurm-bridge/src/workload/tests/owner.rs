//! The owner walk (the original's owner_test): the root owner of a pod, and read failures on
//! the way.

use super::*;

#[test]
fn owner_walk_table() {
    let rs = object("apps/v1", "ReplicaSet", "rs", "", "");
    let rs_dep = object(
        "apps/v1",
        "ReplicaSet",
        "rs",
        &owned_by("apps/v1", "Deployment", "dep"),
        "",
    );
    let dep = object("apps/v1", "Deployment", "dep", "", "");
    let cases: Vec<(String, Result<ObjectRef, &str>)> = vec![
        (pod("p", "", ""), Ok(r("v1", "Pod", "p"))),
        (
            pod("p", &owned_by("apps/v1", "ReplicaSet", "rs"), "") + &rs,
            Ok(r("apps/v1", "ReplicaSet", "rs")),
        ),
        (
            pod("p", &owned_by("apps/v1", "ReplicaSet", "rs"), "") + &rs_dep + &dep,
            Ok(r("apps/v1", "Deployment", "dep")),
        ),
        // A supported kind below a readable unsupported owner wins.
        (
            pod("p", &owned_by("batch/v1", "Job", "j"), "")
                + &job("j", &owned_by("apps/v1", "Deployment", "dep"))
                + &dep,
            Ok(r("batch/v1", "Job", "j")),
        ),
        (
            pod("p", &owned_by("batch/v1", "Job", "j"), "") + &job("j", ""),
            Ok(r("batch/v1", "Job", "j")),
        ),
        // Missing higher owner and missing direct owner are errors.
        (
            pod("p", &owned_by("apps/v1", "ReplicaSet", "rs"), "") + &rs_dep,
            Err("not found"),
        ),
        (
            pod("p", &owned_by("apps/v1", "ReplicaSet", "rs"), ""),
            Err("not found"),
        ),
        // Self-referencing Job: depth error.
        (
            pod("p", &owned_by("batch/v1", "Job", "j"), "")
                + &job("j", &owned_by("batch/v1", "Job", "j")),
            Err("maximum depth of 32"),
        ),
    ];
    for (i, (yaml, want)) in cases.into_iter().enumerate() {
        let got = root_of(&reader(&yaml), "p");
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "case {i}"),
            (Err(e), Err(w)) => assert!(e.to_string().contains(w), "case {i}: {e}"),
            (g, w) => panic!("case {i}: got {g:?}, want {w:?}"),
        }
    }
}

#[test]
fn owner_walk_read_failures() {
    let yaml = pod("p", &owned_by("batch/v1", "Job", "j"), "")
        + &job("j", &owned_by("apps/v1", "Deployment", "dep"));
    let js_yaml = pod("p", &owned_by("batch/v1", "Job", "j"), "")
        + &job("j", &owned_by("jobset.x-k8s.io/v1alpha2", "JobSet", "js"));
    let dep = r("apps/v1", "Deployment", "dep");
    let js = r("jobset.x-k8s.io/v1alpha2", "JobSet", "js");
    let job_ref = r("batch/v1", "Job", "j");
    type Case<'a> = (
        &'a str,
        &'a String,
        ObjectRef,
        ReadError,
        Result<ObjectRef, &'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "forbidden unsupported parent falls back",
            &yaml,
            dep.clone(),
            forbidden(&dep),
            Ok(job_ref.clone()),
        ),
        (
            "forbidden supported parent fails",
            &js_yaml,
            js.clone(),
            forbidden(&js),
            Err("forbidden"),
        ),
        (
            "NotFound parent fails",
            &yaml,
            dep.clone(),
            ReadError::NotFound(dep.clone()),
            Err("not found"),
        ),
        (
            "no kind match fails",
            &yaml,
            dep.clone(),
            ReadError::NoKind {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
            },
            Err("not served"),
        ),
        (
            "internal error fails",
            &yaml,
            dep.clone(),
            ReadError::Other {
                object: dep.to_string(),
                message: "500".into(),
            },
            Err("500"),
        ),
        (
            "forbidden direct owner fails",
            &yaml,
            job_ref.clone(),
            forbidden(&job_ref),
            Err("forbidden"),
        ),
    ];
    for (name, yaml, at, err, want) in cases {
        let mut rd = reader(yaml);
        rd.errors.insert(at, err);
        match (root_of(&rd, "p"), want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{name}"),
            (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{name}: {e}"),
            (g, w) => panic!("{name}: got {g:?}, want {w:?}"),
        }
    }
}
