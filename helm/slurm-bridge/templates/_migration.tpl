{{/*
Coming from the Go original's chart (docs/migration.md). Two checks that fail the render with
what to do, included from configmap.yaml:
- an `*.image.repository` naming one of the original's three images: each of those takes its own
  binary's flags (kube-scheduler's, controller-runtime's), so it would crash on ours, or worse;
- the original's Deployments still in the release namespace (seen with `lookup` on install and
  upgrade; `helm template` sees none): both bridges would schedule at once, and their selectors
  (`app.kubernetes.io/name: slurm-bridge-scheduler`, ...) differ from ours, which a Deployment
  cannot change in place.
*/}}

{{/* The last path segment of an image repository (`ghcr.io/x/slurm-bridge-scheduler` -> `slurm-bridge-scheduler`). */}}
{{- define "slurm-bridge.imageBaseName" -}}
{{- . | toString | splitList "/" | last | splitList "@" | first -}}
{{- end -}}

{{- define "slurm-bridge.validateMigration" -}}
{{- $goImages := list "slurm-bridge-scheduler" "slurm-bridge-controllers" "slurm-bridge-admission" -}}
{{- $repos := list (list "image.repository" .Values.image.repository) -}}
{{- range $c := list "scheduler" "controllers" "admission" "run" -}}
{{- $own := (index $.Values $c | default dict).image | default dict -}}
{{- $repos = append $repos (list (printf "%s.image.repository" $c) ($own.repository | default "")) -}}
{{- end -}}
{{- range $r := $repos -}}
{{- $key := index $r 0 -}}
{{- $repo := index $r 1 -}}
{{- if and $repo (has (include "slurm-bridge.imageBaseName" $repo) $goImages) -}}
{{- fail (printf "%s is %q, an image of the Go original, which takes its own flags and not slurm-bridge's: this chart runs the one slurm-bridge image in every component; remove %s (and the other components' Go images) and set image.repository to the slurm-bridge image (docs/migration.md)" $key $repo $key) -}}
{{- end -}}
{{- end -}}
{{- $ns := include "slurm-bridge.namespace" . -}}
{{- $name := include "slurm-bridge.name" . -}}
{{- $theirs := list "slurm-bridge-scheduler" .Values.schedulerConfig.schedulerName (printf "%s-controllers" $name) (printf "%s-admission" $name) -}}
{{- $found := list -}}
{{- $existing := lookup "apps/v1" "Deployment" $ns "" | default dict -}}
{{- range $d := ($existing.items | default list) -}}
{{- $sel := (($d.spec | default dict).selector | default dict).matchLabels | default dict -}}
{{- if and (has (get $sel "app.kubernetes.io/name") $theirs) (not (hasKey $sel "app.kubernetes.io/component")) -}}
{{- $found = append $found $d.metadata.name -}}
{{- end -}}
{{- end -}}
{{- if $found -}}
{{- fail (printf "the Go original's Deployments %s run in namespace %s: both bridges must not schedule at once, and a Deployment's selector cannot change in place. Stop the original first: kubectl -n %s delete deployment %s; then run this again (docs/migration.md)" (join ", " $found) $ns $ns (join " " $found)) -}}
{{- end -}}
{{- end -}}
