//! `slurm-bridge translate`: the dry run admins use to debug annotations. Reads manifests,
//! translates every pod as the scheduler would, and prints one external job per group.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::PathBuf;

use serde::Serialize;
use slurm_rest::models::JobDescMsg;

use crate::config::Config;
use crate::workload::ir::pod_key;
use crate::workload::manifest_reader::ManifestReader;
use crate::workload::reader::ObjectRef;
use crate::workload::{GangStatus, TranslateError, translate};

/// The error of a run that found nothing to translate.
pub const NO_PODS: &str =
    "no pods found, and no Job, JobSet or LeaderWorkerSet to generate them from";

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Pretty JSON objects, one per external job.
    Json,
    /// YAML documents, one per external job.
    Yaml,
}

/// Arguments of `translate`.
#[derive(Debug, Clone, clap::Args)]
pub struct TranslateArgs {
    /// Manifest file (multi-document YAML); `-` reads stdin. Repeatable.
    #[arg(short = 'f', long = "filename", required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Json)]
    pub output: OutputFormat,
}

/// A gang that is not (yet) complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Incomplete {
    /// Pods present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<usize>,
    /// Pods required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<usize>,
    /// The scheduler's message for this state.
    pub message: String,
}

/// One external job.
#[derive(Debug, Clone, Serialize)]
pub struct GroupOutput {
    /// Group key.
    pub group: String,
    /// `ns/name` of the group's pods, sorted.
    pub pods: Vec<String>,
    /// False when the gang is incomplete: the scheduler would not submit this job yet.
    pub complete: bool,
    /// Why the gang is incomplete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<Incomplete>,
    /// The job description exactly as POSTed to /slurm/v0.0.44/job/submit (under "job").
    pub job: JobDescMsg,
}

/// Everything a translate run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// External jobs, sorted by group key.
    pub groups: Vec<GroupOutput>,
    /// Errors (the run fails when there is any).
    pub errors: Vec<String>,
    /// Warnings and notes.
    pub notes: Vec<String>,
}

/// Translate manifests given as `(source name, YAML text)`.
pub async fn translate_manifests(sources: &[(String, String)], cfg: &Config) -> Report {
    let mut report = Report::default();
    let mut reader = ManifestReader::new().with_gres_drivers(cfg.gres_drivers());
    for (name, text) in sources {
        if let Err(errors) = reader.load_yaml(name, text) {
            report.errors.extend(errors.iter().map(ToString::to_string));
        }
    }
    let (notes, errors) = reader.generate_controller_pods();
    report.notes.extend(notes);
    report.errors.extend(errors.iter().map(ToString::to_string));

    let pods = reader.pods();
    if pods.is_empty() && report.errors.is_empty() {
        report.errors.push(NO_PODS.into());
    }
    // Namespace labels are not known here: tenants selecting by label match no namespace.
    let tenancy = crate::tenancy::Tenancy::new(cfg, None);
    if crate::tenancy::Tenancy::needs_labels(cfg) {
        report.notes.push(
            "namespace labels are not known to translate: tenants with a namespaceSelector cover no namespace here".into(),
        );
    }
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut groups: BTreeSet<String> = BTreeSet::new();
    for pod in &pods {
        let key = pod_key(pod);
        if done.contains(&key) {
            continue;
        }
        let scheduler = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        if !cfg.scheduler_name.is_empty() && scheduler != cfg.scheduler_name {
            report.notes.push(format!(
                "pod {key} selects scheduler {scheduler:?}, not {:?}; translated anyway (the admission webhook sets it in managed namespaces)",
                cfg.scheduler_name
            ));
        }
        match translate(&reader, pod).await {
            Ok(t) => {
                for p in &t.ir.pods {
                    done.insert(pod_key(p));
                }
                if !groups.insert(t.group_key.clone()) {
                    continue;
                }
                for w in &t.warnings {
                    if !report.notes.contains(w) {
                        report.notes.push(w.clone());
                    }
                }
                let incomplete = match &t.gang {
                    GangStatus::Complete => None,
                    GangStatus::Incomplete {
                        ready, required, ..
                    } => Some(Incomplete {
                        ready: Some(*ready),
                        required: Some(*required),
                        message: t.gang.message(),
                    }),
                    GangStatus::Closed { .. } => Some(Incomplete {
                        ready: None,
                        required: None,
                        message: t.gang.message(),
                    }),
                };
                if let Some(i) = &incomplete {
                    report.notes.push(format!(
                        "group {} is not complete: {}",
                        t.group_key, i.message
                    ));
                }
                let granted = match tenancy.decide(&t.ir.root.namespace, &t.asked(cfg)).await {
                    Ok(g) => g,
                    Err(e) => {
                        report.errors.push(format!(
                            "group {}: {e}; the scheduler would not submit it",
                            t.group_key
                        ));
                        continue;
                    }
                };
                report.groups.push(GroupOutput {
                    group: t.group_key.clone(),
                    pods: t.ir.pod_names(),
                    complete: incomplete.is_none(),
                    incomplete,
                    job: t.to_job_desc(cfg, &granted, &[]),
                });
            }
            Err(e) => {
                done.insert(key.clone());
                report
                    .errors
                    .push(format!("pod {key}: {}", pod_error(pod, &e)));
            }
        }
    }
    report.groups.sort_by(|a, b| a.group.cmp(&b.group));
    report
}

/// A translation error for the pod's line: without the pod's own name a second time when the
/// bad annotations are the pod's own (a bare pod); with the object they came from otherwise.
fn pod_error(pod: &crate::k8s::slim_pod::Pod, e: &TranslateError) -> String {
    match e {
        TranslateError::Annotations {
            source_object,
            errors,
        } if *source_object == ObjectRef::pod(pod).to_string() => errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
        _ => e.to_string(),
    }
}

/// Run `translate`: read the files, print the jobs on `out`, notes and errors on `err`.
/// Returns false when there was any error.
pub fn run(
    args: &TranslateArgs,
    cfg: &Config,
    stdin: &mut dyn Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<bool> {
    let mut sources = Vec::new();
    let mut failed = false;
    for f in &args.files {
        if f.as_os_str() == "-" {
            let mut text = String::new();
            stdin.read_to_string(&mut text)?;
            sources.push(("-".to_string(), text));
        } else {
            match std::fs::read_to_string(f) {
                Ok(text) => sources.push((f.display().to_string(), text)),
                Err(e) => {
                    writeln!(err, "error: cannot read {}: {e}", f.display())?;
                    failed = true;
                }
            }
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let mut report = rt.block_on(translate_manifests(&sources, cfg));
    if failed {
        // "No pods" only repeats the unreadable file's error.
        report.errors.retain(|e| e != NO_PODS);
    }
    for group in &report.groups {
        match args.output {
            OutputFormat::Json => {
                serde_json::to_writer_pretty(&mut *out, group).map_err(std::io::Error::other)?;
                writeln!(out)?;
            }
            OutputFormat::Yaml => {
                let text = serde_saphyr::to_string(group)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                write!(out, "---\n{text}")?;
                if !text.ends_with('\n') {
                    writeln!(out)?;
                }
            }
        }
    }
    for n in &report.notes {
        writeln!(err, "note: {n}")?;
    }
    for e in &report.errors {
        writeln!(err, "error: {e}")?;
    }
    Ok(!failed && report.errors.is_empty())
}
