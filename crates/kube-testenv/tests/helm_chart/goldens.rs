//! `helm lint` of every golden case, the pinned helm version, and `helm template` against the
//! golden files (`UPDATE_GOLDEN=1` rewrites them).

use crate::support::{CASES, NAMESPACE, chart_dir, golden_dir, helm, render};

#[test]
fn helm_lint_passes_for_every_case() {
    let chart = chart_dir();
    for (name, sets) in CASES {
        let mut args = vec![
            "lint",
            "--strict",
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
        ];
        for s in *sets {
            args.extend(["--set", s]);
        }
        let (ok, out, err) = helm(&args);
        assert!(ok, "helm lint ({name}) failed:\n{out}\n{err}");
        assert!(
            out.contains("0 chart(s) failed"),
            "helm lint ({name}):\n{out}"
        );
    }
}

#[test]
fn helm_is_the_pinned_version() {
    let (ok, out, err) = helm(&["version", "--short"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("v3.22.0"), "helm version: {out}");
}

#[test]
fn templates_match_the_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut stale = Vec::new();
    for (name, sets) in CASES {
        let rendered = render(sets);
        let path = golden_dir().join(format!("{name}.yaml"));
        if update {
            std::fs::create_dir_all(golden_dir()).unwrap();
            std::fs::write(&path, &rendered).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
                path.display()
            )
        });
        if want != rendered {
            let first = want
                .lines()
                .zip(rendered.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(want.lines().count().min(rendered.lines().count()));
            stale.push(format!(
                "{name}: first difference at line {}: golden {:?}, rendered {:?}",
                first + 1,
                want.lines().nth(first),
                rendered.lines().nth(first)
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "rendered templates differ from the golden files (UPDATE_GOLDEN=1 regenerates them):\n{}",
        stale.join("\n")
    );
}
