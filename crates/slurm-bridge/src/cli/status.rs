//! `slurm-bridge status`: one line per pod group with its Slurm job, so "why is my pod pending?"
//! gets Slurm's answer in one command.

use super::process::slurm_client;
use crate::config::Config;
use crate::k8s::slim_pod::Pod;
use crate::wellknown::LABEL_SLURM_JOBID;
use crate::workload::admin_comment::AdminComment;
use crate::workload::kinds::{is_terminal, parse_job_id};
use anyhow::Context;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use slurm_rest::models::JobInfo;
use std::collections::BTreeMap;
use std::io::Write;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table.
    Table,
    /// The table with the pods and the pods' condition messages.
    Wide,
    /// One JSON array of groups.
    Json,
}

/// Flags of `status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
    /// Only pods in this namespace (default: every namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// One pod group as the status shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Group {
    /// `namespace/group`: the workload (Job, PodGroup, ...) or the bare pod.
    pub group: String,
    pub pods: Vec<String>,
    pub bound: usize,
    pub job_id: Option<u32>,
    /// Slurm's job state (`PENDING`, `RUNNING`, ...), or `-` without a job.
    pub state: String,
    /// Slurm's reason for a pending job, else the pods' PodScheduled reason.
    pub reason: String,
    /// The pods' PodScheduled message (the scheduler's explanation).
    pub message: String,
    /// Allocated Slurm nodes.
    pub nodes: String,
}

fn condition(pod: &Pod) -> Option<(String, String)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// The group key of a job's admin_comment (`kind/ns/name/...`) as `ns/name`.
fn group_name(comment: &AdminComment, job_id: u32) -> String {
    match comment.group.as_deref() {
        Some(g) => {
            let parts: Vec<&str> = g.split('/').collect();
            match parts.as_slice() {
                [_, ns, name, ..] => format!("{ns}/{name}"),
                _ => g.to_string(),
            }
        }
        None => format!("job {job_id}"),
    }
}

/// Groups the live pods by their Slurm job (pods without one stand alone), with the job's state.
pub fn groups(pods: &[Pod], jobs: &[JobInfo]) -> Vec<Group> {
    let by_id: BTreeMap<u32, (&JobInfo, AdminComment)> = jobs
        .iter()
        .filter_map(|j| {
            let comment = AdminComment::decode(j.admin_comment.as_deref()?).ok()?;
            Some((j.job_id, (j, comment)))
        })
        .collect();
    let mut out: BTreeMap<String, Group> = BTreeMap::new();
    for pod in pods.iter().filter(|p| !is_terminal(p)) {
        let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        let job_id = pod
            .labels()
            .get(LABEL_SLURM_JOBID)
            .and_then(|v| parse_job_id(v));
        let job = job_id.and_then(|id| by_id.get(&id));
        let name = match (job_id, job) {
            (Some(id), Some((_, comment))) => group_name(comment, id),
            _ => key.clone(),
        };
        let entry = out.entry(format!("{name}#{job_id:?}")).or_insert_with(|| {
            let (state, slurm_reason, nodes) = match (job_id, job) {
                (Some(_), Some((j, _))) => (
                    j.job_state
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                    j.state_reason.clone().filter(|r| r != "None"),
                    j.nodes.clone().unwrap_or_default(),
                ),
                (Some(_), None) => ("UNKNOWN".into(), None, String::new()),
                (None, _) => ("-".into(), None, String::new()),
            };
            Group {
                group: name.clone(),
                pods: Vec::new(),
                bound: 0,
                job_id,
                state,
                reason: slurm_reason.unwrap_or_default(),
                message: String::new(),
                nodes,
            }
        });
        entry.pods.push(key);
        if crate::k8s::is_bound(pod) {
            entry.bound += 1;
        }
        if let Some((reason, message)) = condition(pod) {
            if entry.reason.is_empty() {
                entry.reason = reason;
            }
            if entry.message.is_empty() {
                entry.message = message;
            }
        }
    }
    out.into_values().collect()
}

/// Writes the groups in the chosen format.
pub fn print(groups: &[Group], output: Output, w: &mut impl Write) -> std::io::Result<()> {
    if output == Output::Json {
        serde_json::to_writer_pretty(&mut *w, groups)?;
        return writeln!(w);
    }
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    let mut rows = vec![vec![
        "GROUP".to_string(),
        "PODS".into(),
        "JOB".into(),
        "STATE".into(),
        "REASON".into(),
        "NODES".into(),
    ]];
    if output == Output::Wide {
        rows[0].extend(["POD NAMES".to_string(), "MESSAGE".into()]);
    }
    for g in groups {
        let mut row = vec![
            g.group.clone(),
            format!("{}/{}", g.bound, g.pods.len()),
            g.job_id.map_or("-".into(), |id| id.to_string()),
            g.state.clone(),
            dash(&g.reason),
            dash(&g.nodes),
        ];
        if output == Output::Wide {
            row.extend([g.pods.join(","), dash(&g.message)]);
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        writeln!(w, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Reads the pods naming the bridge's scheduler and Slurm's jobs, and prints the groups.
pub async fn run(cfg: Config, args: StatusArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster config)")?;
    let slurm = slurm_client(&cfg)?;
    let api: Api<Pod> = match &args.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let params =
        ListParams::default().fields(&format!("spec.schedulerName={}", cfg.scheduler_name));
    let pods = api.list(&params).await.context("listing pods")?.items;
    let jobs = slurm
        .jobs(None)
        .await
        .with_context(|| format!("listing Slurm jobs at {}", cfg.slurm_rest_api))?
        .jobs;
    let mut out = std::io::stdout().lock();
    print(&groups(&pods, &jobs), args.output, &mut out).context("writing the status")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(
        name: &str,
        job: Option<u32>,
        node: Option<&str>,
        condition: Option<(&str, &str)>,
    ) -> Pod {
        let mut labels = serde_json::Map::new();
        if let Some(id) = job {
            labels.insert(LABEL_SLURM_JOBID.into(), json!(id.to_string()));
        }
        let conditions: Vec<serde_json::Value> = condition
            .map(|(r, m)| json!({"type": "PodScheduled", "status": "False", "reason": r, "message": m}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"containers": [], "nodeName": node},
            "status": {"phase": "Pending", "conditions": conditions},
        }))
        .unwrap()
    }

    fn job(
        id: u32,
        state: &str,
        reason: &str,
        nodes: Option<&str>,
        group: &str,
        pods: &[&str],
    ) -> JobInfo {
        serde_json::from_value(json!({
            "job_id": id,
            "job_state": [state],
            "state_reason": reason,
            "nodes": nodes,
            "admin_comment": serde_json::to_string(&json!({"pods": pods, "group": group})).unwrap(),
        }))
        .unwrap()
    }

    #[test]
    fn one_line_per_group_with_slurms_reason_or_the_pods_condition() {
        let pods = [
            pod("trio-0", Some(4), Some("n1"), None),
            pod(
                "trio-1",
                Some(4),
                None,
                Some(("SlurmJobPending", "waiting")),
            ),
            pod("lone", None, None, Some(("NoFeasibleNodes", "0/2 nodes"))),
            pod("w-0", Some(5), None, Some(("SlurmJobPending", "Priority"))),
        ];
        let jobs = [
            job(
                4,
                "RUNNING",
                "None",
                Some("n[1-3]"),
                "coscheduling/ns/trio",
                &["ns/trio-0", "ns/trio-1"],
            ),
            job(5, "PENDING", "Priority", None, "job/ns/w/w-0", &["ns/w-0"]),
        ];
        let g = groups(&pods, &jobs);
        assert_eq!(g.len(), 3);
        let lone = g.iter().find(|g| g.group == "ns/lone").unwrap();
        assert_eq!(
            (lone.state.as_str(), lone.reason.as_str(), lone.job_id),
            ("-", "NoFeasibleNodes", None)
        );
        let trio = g.iter().find(|g| g.group == "ns/trio").unwrap();
        assert_eq!(
            (trio.bound, trio.pods.len(), trio.nodes.as_str()),
            (1, 2, "n[1-3]")
        );
        let w = g.iter().find(|g| g.group == "ns/w").unwrap();
        assert_eq!(
            (w.state.as_str(), w.reason.as_str()),
            ("PENDING", "Priority")
        );

        let mut text = Vec::new();
        print(&g, Output::Table, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.starts_with("GROUP"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("ns/trio") && l.contains("1/2") && l.contains("RUNNING")),
            "{text}"
        );
        let mut json_out = Vec::new();
        print(&g, Output::Json, &mut json_out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json_out).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 3);
    }

    #[test]
    fn a_label_naming_a_job_slurm_does_not_know_says_so() {
        let g = groups(&[pod("a", Some(9), Some("n1"), None)], &[]);
        assert_eq!(g[0].state, "UNKNOWN");
        assert_eq!(g[0].group, "ns/a");
    }
}
