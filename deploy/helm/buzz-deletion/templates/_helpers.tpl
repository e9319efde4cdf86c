{{/* Chart name, truncated to the 63 characters Kubernetes allows in a label. */}}
{{- define "buzz-deletion.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Resource name prefix: the release name, plus the chart name unless the release already contains it. */}}
{{- define "buzz-deletion.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every resource; add app.kubernetes.io/component per resource. */}}
{{- define "buzz-deletion.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "buzz-deletion.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels of the worker Deployment, its pods and the resources that point at them. */}}
{{- define "buzz-deletion.workerLabels" -}}
{{ include "buzz-deletion.labels" . }}
app.kubernetes.io/component: worker
{{- end -}}

{{/* Labels that select the worker pods; stable across upgrades. */}}
{{- define "buzz-deletion.selectorLabels" -}}
app.kubernetes.io/name: {{ include "buzz-deletion.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: worker
{{- end -}}

{{- define "buzz-deletion.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "buzz-deletion.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "buzz-deletion.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding DATABASE_URL, REDIS_URL and BUZZ_S3_*; rendering fails without one. */}}
{{- define "buzz-deletion.secretName" -}}
{{- if .Values.secret.existingSecret -}}
{{- .Values.secret.existingSecret -}}
{{- else if .Values.secret.create -}}
{{- printf "%s-connections" (include "buzz-deletion.fullname" .) -}}
{{- else -}}
{{- fail "set secret.existingSecret to the Secret with DATABASE_URL, REDIS_URL and BUZZ_S3_* (or secret.create=true with secret.values, for evaluation)" -}}
{{- end -}}
{{- end -}}

{{/*
The Secret (name, key) holding the schema owner's URL for the migration Job; rendering fails
without one while migrations are enabled.
*/}}
{{- define "buzz-deletion.ownerSecretName" -}}
{{- if .Values.database.ownerSecret.name -}}
{{- .Values.database.ownerSecret.name -}}
{{- else if and .Values.secret.create (not .Values.secret.existingSecret) .Values.secret.values.BUZZ_OWNER_DATABASE_URL -}}
{{- printf "%s-owner" (include "buzz-deletion.fullname" .) -}}
{{- else -}}
{{- fail "set database.ownerSecret.name to the Secret with the schema owner's URL (key database.ownerSecret.key): only `buzz-deletion migrate` connects as the owner, the workers' DATABASE_URL is the worker role (or disable migrations.enabled and migrate another way)" -}}
{{- end -}}
{{- end -}}

{{- define "buzz-deletion.ownerSecretKey" -}}
{{- if .Values.database.ownerSecret.name -}}
{{- .Values.database.ownerSecret.key | default "BUZZ_OWNER_DATABASE_URL" -}}
{{- else -}}
BUZZ_OWNER_DATABASE_URL
{{- end -}}
{{- end -}}

{{/*
Environment shared by the worker and the migration Job: the legacy connection Secret (only when
`secret.*` is used; the recommended path mounts each secret as a file, see _files.tpl) and the
Temporal settings. Grace-period invariants are checked here so that no
manifest renders with a worker that could be killed mid-activity.
*/}}
{{- define "buzz-deletion.env" -}}
{{- $w := .Values.worker -}}
{{- if le (int $w.shutdownGraceSeconds) (int $w.activityHeartbeatTimeoutSeconds) -}}
{{- fail (printf "worker.shutdownGraceSeconds (%v) must exceed worker.activityHeartbeatTimeoutSeconds (%v)" $w.shutdownGraceSeconds $w.activityHeartbeatTimeoutSeconds) -}}
{{- end -}}
{{- if le (int $w.terminationGracePeriodSeconds) (int $w.shutdownGraceSeconds) -}}
{{- fail (printf "worker.terminationGracePeriodSeconds (%v) must exceed worker.shutdownGraceSeconds (%v)" $w.terminationGracePeriodSeconds $w.shutdownGraceSeconds) -}}
{{- end -}}
{{- if include "buzz-deletion.legacySecret" . }}
envFrom:
  - secretRef:
      name: {{ include "buzz-deletion.secretName" . }}
{{- end }}
env:
  - name: TEMPORAL_ADDRESS
    value: {{ required "temporal.address is required" .Values.temporal.address | quote }}
  - name: TEMPORAL_NAMESPACE
    value: {{ required "temporal.namespace is required" .Values.temporal.namespace | quote }}
  - name: BUZZ_TASK_QUEUE
    value: {{ required "temporal.taskQueue is required" .Values.temporal.taskQueue | quote }}
{{- end -}}

{{/*
The worker's Worker Deployment identity (docs/upgrades.md): deployment name, build id (the image
tag unless set) and the versioning choice, refused unless off, pinned or auto-upgrade.
*/}}
{{- define "buzz-deletion.deploymentEnv" -}}
{{- $d := .Values.worker.deployment -}}
{{- $versioning := toString $d.versioning -}}
{{- if not (has $versioning (list "off" "pinned" "auto-upgrade")) -}}
{{- fail (printf "worker.deployment.versioning must be \"off\", \"pinned\" or \"auto-upgrade\" (quoted), not %v" $d.versioning) -}}
{{- end -}}
- name: BUZZ_WORKER_DEPLOYMENT
  value: {{ required "worker.deployment.name is required" $d.name | quote }}
- name: BUZZ_WORKER_BUILD_ID
  value: {{ default (default .Chart.AppVersion .Values.image.tag) $d.buildId | quote }}
- name: BUZZ_WORKER_VERSIONING
  value: {{ $versioning | quote }}
{{- end -}}

{{/*
The receipt signing key: a read-only volume from its Secret (only the one key, mode 0400), and
the variables that point the worker at it and at the archive bucket.
*/}}
{{- define "buzz-deletion.receiptKeySecret" -}}
{{- required "set receipts.signingKeySecret.name to the Secret holding the worker's receipt signing key (`buzz-deletion keys generate` writes one; docs/certificates.md): a deletion cannot finish without its signed receipt" .Values.receipts.signingKeySecret.name -}}
{{- end -}}

{{- define "buzz-deletion.receiptEnv" -}}
- name: BUZZ_RECEIPT_SIGNING_KEY_FILE
  value: {{ printf "%s/%s" (trimSuffix "/" .Values.receipts.mountPath) .Values.receipts.signingKeySecret.key | quote }}
{{- with .Values.receipts.archiveBucket }}
- name: BUZZ_RECEIPT_ARCHIVE_BUCKET
  value: {{ . | quote }}
{{- end }}
{{- end -}}
