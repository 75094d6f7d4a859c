//! The pod writer's PodScheduled=False reports: queued by a pass ([`PodWriter::report`]) and
//! sent by up to [`REPORT_WORKERS`] tasks ([`super::report_queue`] keeps them in order).

use super::report_queue::{Job, Pushed, Report, Target};
use super::{PodWriter, REPORT_WORKERS, SCHEDULING, params};
use crate::k8s::pod_key;
use crate::k8s::slim_pod::Pod;
use crate::k8s::writes::{KubeWrites, write_kind};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use serde_json::json;

impl PodWriter {
    /// Queues PodScheduled=False with `reason` and `message` and an Event (Warning when
    /// `warning`) for the report workers, unless the pod already shows exactly that or this
    /// writer has bound it. The caller does not wait ([`super::report_queue`]).
    pub fn report(
        &self,
        writes: &KubeWrites,
        pod: &Pod,
        reason: &str,
        message: &str,
        warning: bool,
    ) {
        let key = pod_key(pod);
        if self.bound().get(&key).is_some_and(|b| b.uid == pod.uid()) {
            return;
        }
        let target = Target {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            uid: pod.uid(),
            resource_version: pod.resource_version(),
        };
        let report = Report {
            reason: reason.to_string(),
            message: message.to_string(),
            warning,
        };
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
        if current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message)
        }) {
            // Nothing to write, but nothing older may land after this either.
            self.reports.shown(&key, &target, report);
            self.post_replaced(writes);
            return;
        }
        let pushed = self.reports.push(&key, target, report, REPORT_WORKERS);
        self.post_replaced(writes);
        if let Pushed::Queued { start_worker: true } = pushed {
            let (writer, writes) = (self.clone(), writes.clone());
            tokio::spawn(async move { writer.send_reports(&writes).await });
        }
    }

    /// Posts the Events of the reports replaced or dropped before they were sent.
    fn post_replaced(&self, writes: &KubeWrites) {
        for (target, old) in self.reports.take_replaced() {
            let event = self.build_event(
                SCHEDULING,
                &about(&target),
                old.warning,
                &old.reason,
                old.message,
            );
            self.post_in_background(writes, event);
        }
    }

    /// A report worker: sends queued reports until none is left.
    async fn send_reports(&self, writes: &KubeWrites) {
        while let Some(job) = self.reports.next() {
            let landed = self.send_report(writes, &job).await;
            self.reports.finished(job, landed);
        }
    }

    /// One report: the status patch, then the Event (also when the patch failed: the user sees
    /// the reason there). Returns whether the patch succeeded.
    async fn send_report(&self, writes: &KubeWrites, job: &Job) -> bool {
        let Job { target, report, .. } = job;
        let patch = json!({"status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": report.reason,
            "message": report.message,
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }]}});
        writes.inc(write_kind::CONDITION);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &target.namespace);
        let landed = match api
            .patch_status(
                &target.name,
                &params(&self.scheduler_name),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => true,
            // Deleted meanwhile: nothing to show it on.
            Err(kube::Error::Api(s)) if s.code == 404 => return false,
            Err(e) => {
                tracing::warn!(pod = %job.key, reason = %report.reason,
                    error = %crate::k8s::api_error::Brief(&e), "setting PodScheduled=False failed");
                false
            }
        };
        let event = self.build_event(
            SCHEDULING,
            &about(target),
            report.warning,
            &report.reason,
            report.message.clone(),
        );
        writes.inc(write_kind::EVENT);
        crate::k8s::events::post(&self.client, &event).await;
        landed
    }
}

/// The pod an Event of a report is about, as much of it as the Event names.
fn about(target: &Target) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(target.name.clone()),
            namespace: Some(target.namespace.clone()),
            uid: target.uid.clone(),
            resource_version: target.resource_version.clone(),
            ..Default::default()
        },
        ..Default::default()
    }
}
