{{/* Chart name. */}}
{{- define "slurm-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name, the prefix of every object name (one definition: reference quirk 19). */}}
{{- define "slurm-bridge.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "slurm-bridge.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Object name of a component: `<fullname>-<component>`. Call with (list $ "scheduler"). */}}
{{- define "slurm-bridge.component.name" -}}
{{- printf "%s-%s" (include "slurm-bridge.fullname" (index . 0)) (index . 1) -}}
{{- end -}}

{{- define "slurm-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "slurm-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slurm-bridge
{{- end -}}

{{/* Selector labels of a component. Call with (list $ "scheduler"). */}}
{{- define "slurm-bridge.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "slurm-bridge.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Labels of a component's objects. Call with (list $ "scheduler"). */}}
{{- define "slurm-bridge.componentLabels" -}}
{{ include "slurm-bridge.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* `repository:tag` of a component, the chart-wide `image` filling what it leaves empty. */}}
{{- define "slurm-bridge.image" -}}
{{- $ := index . 0 -}}
{{- $own := (index $.Values (index . 1)).image | default dict -}}
{{- $repo := $own.repository | default $.Values.image.repository -}}
{{- $tag := $own.tag | default $.Values.image.tag | default $.Chart.AppVersion -}}
{{- printf "%s:%s" $repo (toString $tag) -}}
{{- end -}}

{{- define "slurm-bridge.pullPolicy" -}}
{{- $ := index . 0 -}}
{{- $own := (index $.Values (index . 1)).image | default dict -}}
{{- $own.pullPolicy | default $.Values.image.pullPolicy -}}
{{- end -}}

{{/* The Slurm JWT Secret's name and key: `slurmJwtSecret` is a name (key `auth-token`) or {name, key}. */}}
{{- define "slurm-bridge.jwtSecretName" -}}
{{- $s := .Values.sharedConfig.slurmJwtSecret -}}
{{- if kindIs "map" $s -}}{{ required "sharedConfig.slurmJwtSecret.name is required" $s.name }}{{- else -}}{{ required "sharedConfig.slurmJwtSecret is required" $s }}{{- end -}}
{{- end -}}
{{- define "slurm-bridge.jwtSecretKey" -}}
{{- $s := .Values.sharedConfig.slurmJwtSecret -}}
{{- if and (kindIs "map" $s) $s.key -}}{{ $s.key }}{{- else -}}auth-token{{- end -}}
{{- end -}}

{{/* RUST_LOG from a verbosity value: null -> info; 0-2 info, 3-4 debug, 5+ trace; a string as is. */}}
{{- define "slurm-bridge.logLevel" -}}
{{- $v := . -}}
{{- if kindIs "invalid" $v -}}info
{{- else if kindIs "string" $v -}}{{ $v }}
{{- else if ge (int $v) 5 -}}trace
{{- else if ge (int $v) 3 -}}debug
{{- else -}}info
{{- end -}}
{{- end -}}

{{/* The admission webhook configurations' name. */}}
{{- define "slurm-bridge.webhookName" -}}
{{- include "slurm-bridge.component.name" (list . "admission") -}}
{{- end -}}

{{/* The component serving the webhooks: `admission`, or `run` in mode run. */}}
{{- define "slurm-bridge.webhookComponent" -}}
{{- if eq .Values.mode "run" -}}run{{- else -}}admission{{- end -}}
{{- end -}}

{{/* The DNS names of the webhook Service. */}}
{{- define "slurm-bridge.webhookDNSNames" -}}
{{- $svc := include "slurm-bridge.webhookName" . -}}
{{- $ns := include "slurm-bridge.namespace" . -}}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- with .Values.admission.externalUrl -}}
{{- $names = append $names (urlParse .).hostname -}}
{{- end -}}
{{- $names | toJson -}}
{{- end -}}

{{/* Value checks: fail the render with a clear message. */}}
{{- define "slurm-bridge.validate" -}}
{{- if not (has .Values.mode (list "split" "run")) -}}
{{- fail (printf "mode must be \"split\" or \"run\", got %q" (toString .Values.mode)) -}}
{{- end -}}
{{- if not .Values.schedulerConfig.schedulerName -}}
{{- fail "schedulerConfig.schedulerName must be set" -}}
{{- end -}}
{{- if eq .Values.mode "split" -}}
{{- if and (gt (int .Values.scheduler.replicaCount) 1) (not .Values.scheduler.leaderElect) -}}
{{- fail "scheduler.replicaCount > 1 needs scheduler.leaderElect: true (two schedulers would both act)" -}}
{{- end -}}
{{- if and (gt (int .Values.controllers.replicas) 1) (not .Values.controllers.leaderElect) -}}
{{- fail "controllers.replicas > 1 needs controllers.leaderElect: true (two controllers would both act)" -}}
{{- end -}}
{{- else -}}
{{- if and (gt (int .Values.run.replicas) 1) (not .Values.run.leaderElect) -}}
{{- fail "run.replicas > 1 needs run.leaderElect: true" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.admission.enabled (not .Values.admission.managedNamespaceSelector) (has (include "slurm-bridge.namespace" .) (.Values.admission.managedNamespaces | default list)) -}}
{{- fail (printf "admission.managedNamespaces lists the release namespace %q, which the webhooks exclude (they must not gate their own pods): install the chart in another namespace" (include "slurm-bridge.namespace" .)) -}}
{{- end -}}
{{- if not (has .Values.admission.failurePolicy (list "Fail" "Ignore")) -}}
{{- fail "admission.failurePolicy must be Fail or Ignore" -}}
{{- end -}}
{{- end -}}

{{/* Pod-spec fields every component shares. Call with (list $ "scheduler"). */}}
{{- define "slurm-bridge.podCommon" -}}
{{- $ := index . 0 -}}
{{- $c := index $.Values (index . 1) -}}
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Probes and the probe/metrics port. */}}
{{- define "slurm-bridge.probes" -}}
ports:
  - name: health
    containerPort: 8081
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: health
  initialDelaySeconds: 5
  periodSeconds: 10
readinessProbe:
  httpGet:
    path: /readyz
    port: health
  initialDelaySeconds: 2
  periodSeconds: 5
{{- end -}}

{{/* Environment of the processes that call Slurm. Call with (list $ verbosity). */}}
{{- define "slurm-bridge.env" -}}
{{- $ := index . 0 -}}
- name: SLURM_JWT_FILE
  value: /var/run/secrets/slurm/auth-token
{{- if $.Values.sharedConfig.slurmCaSecret }}
- name: SLURM_CA_FILE
  value: /var/run/secrets/slurm/ca.crt
{{- end }}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- /* The Lease holder's identity (without it: the host name and PID, `<pod>-1`). */}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: RUST_LOG
  value: {{ include "slurm-bridge.logLevel" (index . 1) | quote }}
{{- end -}}

{{/* The Slurm token volume: the Secret's key mounted as /var/run/secrets/slurm/auth-token. */}}
{{- define "slurm-bridge.jwtVolume" -}}
{{- $ca := .Values.sharedConfig.slurmCaSecret -}}
- name: slurm-token
{{- if $ca }}
  projected:
    sources:
      - secret:
          name: {{ include "slurm-bridge.jwtSecretName" . }}
          items:
            - key: {{ include "slurm-bridge.jwtSecretKey" . }}
              path: auth-token
      - secret:
          name: {{ if kindIs "map" $ca }}{{ required "sharedConfig.slurmCaSecret.name is required" $ca.name }}{{ else }}{{ $ca }}{{ end }}
          items:
            - key: {{ if and (kindIs "map" $ca) $ca.key }}{{ $ca.key }}{{ else }}ca.crt{{ end }}
              path: ca.crt
{{- else }}
  secret:
    secretName: {{ include "slurm-bridge.jwtSecretName" . }}
    items:
      - key: {{ include "slurm-bridge.jwtSecretKey" . }}
        path: auth-token
{{- end }}
{{- end -}}

{{/* PodDisruptionBudget of a component (only with more than one replica). Call with (list $ "scheduler" replicas). */}}
{{- define "slurm-bridge.pdb" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- $c := index $.Values $component -}}
{{- if and $c.pdb.enabled (gt (int (index . 2)) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "slurm-bridge.component.name" (list $ $component) }}
  namespace: {{ include "slurm-bridge.namespace" $ }}
  labels:
    {{- include "slurm-bridge.componentLabels" (list $ $component) | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" $c.pdb.maxUnavailable) }}
  maxUnavailable: {{ $c.pdb.maxUnavailable }}
  {{- else }}
  minAvailable: {{ $c.pdb.minAvailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "slurm-bridge.selectorLabels" (list $ $component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/* Metrics Service (headless) of a component. Call with (list $ "scheduler"). */}}
{{- define "slurm-bridge.metricsService" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- if $.Values.metrics.service.enabled }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ include "slurm-bridge.component.name" (list $ $component) }}-metrics
  namespace: {{ include "slurm-bridge.namespace" $ }}
  labels:
    {{- include "slurm-bridge.componentLabels" (list $ $component) | nindent 4 }}
spec:
  clusterIP: None
  selector:
    {{- include "slurm-bridge.selectorLabels" (list $ $component) | nindent 4 }}
  ports:
    - name: metrics
      port: 8081
      targetPort: health
      protocol: TCP
{{- end }}
{{- end -}}

{{/* The alert rules (docs/operations.md, "Alerts"): `groups:` of a Prometheus rules file. */}}
{{- define "slurm-bridge.alertGroups" -}}
{{- $a := .Values.metrics.prometheusRule -}}
{{- $sel := printf "namespace=%q" (include "slurm-bridge.namespace" .) -}}
{{- $by := "by (namespace)" -}}
groups:
  - name: slurm-bridge
    rules:
      - alert: SlurmBridgePodsWaiting
        expr: max {{ $by }} (slurm_bridge_scheduler_pending_groups{ {{- $sel -}} }) > 0
        for: {{ $a.podsWaitingFor }}
        labels:
          severity: warning
        annotations:
          summary: Pods have waited {{ $a.podsWaitingFor }} or more for Slurm to allocate their jobs
          description: '{{ "{{" }} $value {{ "}}" }} pod groups have had a pending Slurm job for {{ $a.podsWaitingFor }}; `slurm-bridge status` shows each one with the reason Slurm gives (Resources, Priority, QOSMaxJobsPerUser...).'
      - alert: SlurmBridgeSlurmErrors
        expr: |
          sum {{ $by }} (rate(slurm_bridge_scheduler_slurm_requests_total{ {{- $sel -}} ,outcome="error"}[5m]))
            / sum {{ $by }} (rate(slurm_bridge_scheduler_slurm_requests_total{ {{- $sel -}} }[5m]))
            > {{ $a.slurmErrorRatio }}
        for: {{ $a.errorsFor }}
        labels:
          severity: critical
        annotations:
          summary: More than {{ mulf $a.slurmErrorRatio 100 }} % of the bridge's Slurm REST requests fail
          description: 'slurmrestd or slurmctld is unreachable or refuses the bridge (token, permissions): pods are not scheduled and jobs not ended. The bridge logs each failure with Slurm''s message.'
      - alert: SlurmBridgeReconcileErrors
        expr: sum by (namespace, controller) (rate(slurm_bridge_controllers_reconcile_errors_total{ {{- $sel -}} }[5m])) > {{ $a.reconcileErrorRate }}
        for: {{ $a.errorsFor }}
        labels:
          severity: warning
        annotations:
          summary: 'The {{ "{{" }} $labels.controller {{ "}}" }} controller keeps failing (Kubernetes API or Slurm errors)'
          description: '{{ "{{" }} $value | humanize {{ "}}" }} failed passes per second; each is retried with backoff. The controllers'' log names the object and the error.'
      - alert: SlurmBridgeWebhookErrors
        expr: sum by (namespace, webhook) (rate(slurm_bridge_admission_requests_total{ {{- $sel -}} ,outcome=~"Errored|BadRequest"}[5m])) > 0
        for: {{ $a.errorsFor }}
        labels:
          severity: warning
        annotations:
          summary: 'The {{ "{{" }} $labels.webhook {{ "}}" }} webhook cannot decide on some pods'
          description: 'With failurePolicy Fail the API server refuses those pods in the managed namespaces. The admission log says why.'
      - alert: SlurmBridgeWritesFenced
        expr: sum by (namespace, target) (increase(slurm_bridge_leader_writes_total{ {{- $sel -}} ,outcome="fenced"}[10m])) > 0
        labels:
          severity: warning
        annotations:
          summary: A replica that lost its leader Lease tried to write
          description: 'The fence kept {{ "{{" }} $value {{ "}}" }} writes from being sent (docs/operations.md, "Fencing"): the Lease could not be renewed in time (API server slow or unreachable).'
      - alert: SlurmBridgeSlurmStateLoss
        expr: max {{ $by }} (slurm_bridge_controllers_slurm_state_loss{ {{- $sel -}} }) > 0
        labels:
          severity: critical
        annotations:
          summary: Slurm no longer knows the jobs of many running pods; the bridge holds them
          description: 'Slurm''s state may have been lost or rolled back (slurmctld restarted without its StateSaveLocation). The bridge keeps those pods running and drains their nodes in Slurm instead of deleting them (docs/controllers.md, "Slurm losing its state"): restore Slurm''s state, or delete the held pods to accept the loss.'
      - alert: SlurmBridgeNoLeader
        expr: max {{ $by }} (slurm_bridge_scheduler_leader{ {{- $sel -}} }) < 1
        for: {{ $a.noLeaderFor }}
        labels:
          severity: critical
        annotations:
          summary: No scheduler replica holds the leader Lease
          description: 'No pod of the bridge is being scheduled: every replica fails to acquire or renew its Lease (API server errors, RBAC on leases, clock skew).'
{{- end -}}

{{/* config.yaml (reference §2.1). */}}
{{- define "slurm-bridge.configYaml" -}}
schedulerName: {{ .Values.schedulerConfig.schedulerName | quote }}
slurmRestApi: {{ .Values.sharedConfig.slurmRestApi | quote }}
mcsLabel: {{ .Values.schedulerConfig.mcsLabel | quote }}
partition: {{ .Values.schedulerConfig.partition | quote }}
{{- with .Values.schedulerConfig.clusterName }}
clusterName: {{ . | quote }}
{{- end }}
{{- with .Values.schedulerConfig.defaultMemPerCpu }}
defaultMemPerCpu: {{ . | int64 }}
{{- end }}
{{- with .Values.schedulerConfig.draDeviceDrivers }}
draDeviceDrivers:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.schedulerConfig.priorityClasses }}
priorityClasses:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.schedulerConfig.tenants }}
tenants:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.schedulerConfig.defaultTenant }}
defaultTenant:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .Values.admission.managedNamespaceSelector }}
managedNamespaceSelector:
  {{- toYaml .Values.admission.managedNamespaceSelector | nindent 2 }}
{{- else }}
managedNamespaces:
  {{- toYaml (.Values.admission.managedNamespaces | default list) | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod annotations that roll the pods when the config changes. */}}
{{- define "slurm-bridge.checksums" -}}
checksum/config: {{ include "slurm-bridge.configYaml" . | sha256sum }}
{{- end -}}

{{/* Whether the admission component needs any ClusterRole rule. */}}
{{- define "slurm-bridge.admission.needsRules" -}}
{{- if and .Values.admission.enabled (or .Values.admission.managedNamespaceSelector (not .Values.admission.certManager.enabled)) -}}true{{- end -}}
{{- end -}}

{{/* ClusterRole rules of the scheduler: what src/scheduler and src/workload call. */}}
{{- define "slurm-bridge.rules.scheduler" -}}
# Pod reflector (cluster-wide, by spec.schedulerName), group listing, re-reads after a
# conflict; label, toleration, finalizer and node-annotation patches.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
# The Binding.
- apiGroups: [""]
  resources: ["pods/binding"]
  verbs: ["create"]
# PodScheduled=False with Slurm's reason.
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# Node reflector (placement feasibility, Slurm node -> Kubernetes node).
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
# Scheduled / FailedScheduling Events on pods.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create"]
# The owner walk and the workload translators (reference §4.3: ReplicaSets and StatefulSets
# are readable, Deployments and DaemonSets are not, so a Deployment's root is its ReplicaSet),
# served by one reflector per kind (caches/objects.rs: list, watch), a live get on a miss.
- apiGroups: ["apps"]
  resources: ["replicasets", "statefulsets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["scheduling.k8s.io"]
  resources: ["podgroups", "workloads"]
  verbs: ["get", "list", "watch"]
# A coscheduling PodGroup's owner (Kubeflow Trainer's TrainJob) lends its slurmjob.* annotations.
- apiGroups: ["trainer.kubeflow.org"]
  resources: ["trainjobs"]
  verbs: ["get", "list", "watch"]
# PodGroupScheduled condition (server-side apply on the status subresource).
- apiGroups: ["scheduling.k8s.io"]
  resources: ["podgroups/status"]
  verbs: ["patch"]
# DRA: the ResourceSlice reflector (caches/); the DeviceClasses a claim may use, the pod's
# ResourceClaim made, allocated in its status, replaced or deleted (scheduler/claims.rs).
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceslices"]
  verbs: ["list", "watch"]
- apiGroups: ["resource.k8s.io"]
  resources: ["deviceclasses"]
  verbs: ["get"]
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims"]
  verbs: ["get", "list", "create", "delete"]
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims/status"]
  verbs: ["patch"]
# Kubernetes checks this extra permission when a status write sets allocation or reservedFor.
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims/binding"]
  verbs: ["patch"]
# Volumes (caches/ reflectors; volumes/bind.rs): a static PV reserved for a claim (claimRef),
# the selected node of a claim to provision, what binding has done read back.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: [""]
  resources: ["persistentvolumes"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["storage.k8s.io"]
  resources: ["storageclasses"]
  verbs: ["list", "watch"]
{{- end -}}

{{/* ClusterRole rules of the controllers: what src/controllers calls. */}}
{{- define "slurm-bridge.rules.controllers" -}}
# Pod reflector; finalizer release and label clean-up; removal of pods whose job does not run.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "patch", "delete"]
# DisruptionTarget condition before a removal.
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# Node reflector; the bridge taint and labels of external nodes.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch", "patch"]
# The node condition mirroring Slurm's drain state.
- apiGroups: [""]
  resources: ["nodes/status"]
  verbs: ["patch"]
# Events on pods and nodes.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create"]
# DRA: the ResourceSlice reflector (caches/); a finished pod's ResourceClaim deleted
# (pod/actions.rs -> scheduler/claims.rs delete_pod_claim).
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceslices"]
  verbs: ["list", "watch"]
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims"]
  verbs: ["delete"]
{{- end -}}

{{/* ClusterRole rules of the admission webhooks: what src/admission calls. */}}
{{- define "slurm-bridge.rules.admission" -}}
{{- if .Values.admission.managedNamespaceSelector }}
# managedNamespaceSelector: the Namespace watch cache, and a GET for a namespace not seen yet.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- if not .Values.admission.certManager.enabled }}
# Self-managed certificates: the caBundle of the chart's own webhook configurations.
- apiGroups: ["admissionregistration.k8s.io"]
  resources: ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"]
  resourceNames: [{{ include "slurm-bridge.webhookName" . | quote }}]
  verbs: ["get", "update"]
{{- end }}
{{- end -}}

{{/* The leader-election Role (namespaced: the Lease lives in the release namespace). */}}
{{- define "slurm-bridge.leaseRole" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{ "\n" }}---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "slurm-bridge.component.name" (list $ $component) }}-leader-election
  namespace: {{ include "slurm-bridge.namespace" $ }}
  labels:
    {{- include "slurm-bridge.componentLabels" (list $ $component) | nindent 4 }}
rules:
  # kube-lease-manager (get, create, patch) and the Lease watch of src/leader.rs.
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "list", "watch", "create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "slurm-bridge.component.name" (list $ $component) }}-leader-election
  namespace: {{ include "slurm-bridge.namespace" $ }}
  labels:
    {{- include "slurm-bridge.componentLabels" (list $ $component) | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "slurm-bridge.component.name" (list $ $component) }}-leader-election
subjects:
  - kind: ServiceAccount
    name: {{ include "slurm-bridge.component.name" (list $ $component) }}
    namespace: {{ include "slurm-bridge.namespace" $ }}
{{- end -}}

{{/* A ClusterRole with the given rules and its binding to a ServiceAccount. Call with (list $ role subjectComponent rulesTemplate). */}}
{{- define "slurm-bridge.clusterRole" -}}
{{- $ := index . 0 -}}
{{- $role := index . 1 -}}
{{- $subject := index . 2 -}}
{{ "\n" }}---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "slurm-bridge.component.name" (list $ $role) }}
  labels:
    {{- include "slurm-bridge.componentLabels" (list $ $role) | nindent 4 }}
rules:
  {{- include (index . 3) $ | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "slurm-bridge.component.name" (list $ $role) }}
  labels:
    {{- include "slurm-bridge.componentLabels" (list $ $role) | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "slurm-bridge.component.name" (list $ $role) }}
subjects:
  - kind: ServiceAccount
    name: {{ include "slurm-bridge.component.name" (list $ $subject) }}
    namespace: {{ include "slurm-bridge.namespace" $ }}
{{- end -}}

{{/* A component's ServiceAccount. Call with (list $ component). */}}
{{- define "slurm-bridge.serviceAccount" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{ "\n" }}---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "slurm-bridge.component.name" (list $ $component) }}
  namespace: {{ include "slurm-bridge.namespace" $ }}
  labels:
    {{- include "slurm-bridge.componentLabels" (list $ $component) | nindent 4 }}
automountServiceAccountToken: true
{{- end -}}

{{/* The webhook server's flags, certificate volume mount and volume. */}}
{{- define "slurm-bridge.webhookArgs" -}}
- --listen=0.0.0.0:9443
- --cert-dir=/var/run/slurm-bridge/certs
{{- if not .Values.admission.certManager.enabled }}
- --self-signed-names={{ include "slurm-bridge.webhookDNSNames" . | fromJsonArray | join "," }}
- --webhook-configurations={{ include "slurm-bridge.webhookName" . }}
- --self-signed-validity={{ .Values.admission.selfSigned.validity }}
- --self-signed-renew-before={{ .Values.admission.selfSigned.renewBefore }}
- --self-signed-ca-secret={{ include "slurm-bridge.webhookName" . }}-ca
{{- end }}
{{- end -}}
{{- define "slurm-bridge.webhookVolume" -}}
- name: certs
{{- if .Values.admission.certManager.enabled }}
  secret:
    secretName: {{ include "slurm-bridge.webhookName" . }}-tls
{{- else }}
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- end -}}
{{- define "slurm-bridge.webhookMount" -}}
- name: certs
  mountPath: /var/run/slurm-bridge/certs
  readOnly: {{ .Values.admission.certManager.enabled }}
{{- end -}}
