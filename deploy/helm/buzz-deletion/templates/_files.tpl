{{/*
Secrets and CA bundles reach the containers as files only: each source below is a read-only
volume (a Secret at mode 0400, or a ConfigMap at 0444 for a CA bundle) holding just the keys it
needs, and an environment variable naming the file (`…_FILE`, `…_PATH`, `PGSSLROOTCERT`). No
secret is ever the value of a variable, nor a `secretKeyRef`.

"buzz-deletion.workerFiles" / "buzz-deletion.jobFiles" return that list as JSON; the Deployment
and the migration Job render their volumes, mounts and variables from it, so the three cannot
disagree. Bad combinations fail the render here, naming the values to fix.
*/}}

{{/* One file source: dict name, secret|configMap, mountPath, items (list of dict key, env). */}}
{{- define "buzz-deletion.fileSource" -}}
{{- $s := .source -}}
{{- if and $s.secret $s.configMap -}}
{{- fail (printf "%s: set secret or configMap, not both" .path) -}}
{{- end -}}
{{- if not $s.key -}}
{{- fail (printf "%s.key must name the key of the PEM file in %s" .path (ternary "the Secret" "the ConfigMap" (not (empty $s.secret)))) -}}
{{- end -}}
{{- $out := dict "name" .name "mountPath" (printf "%s/%s" .root .name) "items" (list (dict "key" $s.key "env" .env)) -}}
{{- if $s.secret -}}
{{- $_ := set $out "secret" $s.secret -}}
{{- else -}}
{{- $_ := set $out "configMap" $s.configMap -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Whether a CA source (secret or configMap) is set. */}}
{{- define "buzz-deletion.hasSource" -}}
{{- if or .secret .configMap }}true{{ end -}}
{{- end -}}

{{/* Whether the worker must speak TLS to Temporal (explicitly, or implied by a TLS setting). */}}
{{- define "buzz-deletion.temporalTls" -}}
{{- $t := .Values.temporal -}}
{{- if or $t.tls.enabled $t.tls.serverName (include "buzz-deletion.hasSource" $t.tls.serverCA) $t.tls.client.secret $t.apiKey.secret }}true{{ end -}}
{{- end -}}

{{/* Whether the connection URLs come from the legacy envFrom Secret (`secret.*`). */}}
{{- define "buzz-deletion.legacySecret" -}}
{{- if or .Values.secret.existingSecret .Values.secret.create }}true{{ end -}}
{{- end -}}

{{- define "buzz-deletion.workerFiles" -}}
{{- $v := .Values -}}
{{- $root := trimSuffix "/" $v.files.mountRoot -}}
{{- $files := list -}}
{{- $legacy := include "buzz-deletion.legacySecret" . -}}
{{- $fileMode := or $v.database.url.secret $v.redis.url.secret $v.s3.credentials.secret -}}
{{- if and $legacy $fileMode -}}
{{- fail "secret.existingSecret / secret.create (connection URLs as variables, legacy) cannot be combined with database.url.secret, redis.url.secret or s3.credentials.secret (the same settings as files): the worker refuses X and X_FILE together. Move every connection setting to the file-mounted values (recommended) or keep the legacy Secret alone" -}}
{{- end -}}
{{- if not $legacy -}}
{{- if not $v.database.url.secret -}}
{{- fail "set database.url.secret to the Secret holding the worker role's DATABASE_URL (mounted as a file, DATABASE_URL_FILE); or, legacy, secret.existingSecret to a Secret loaded as variables" -}}
{{- end -}}
{{- if not $v.redis.url.secret -}}
{{- fail "set redis.url.secret to the Secret holding REDIS_URL (rediss://user:password@host:port; mounted as a file, REDIS_URL_FILE)" -}}
{{- end -}}
{{- if not $v.s3.endpoint -}}
{{- fail "set s3.endpoint (BUZZ_S3_ENDPOINT, e.g. https://s3.eu-west-1.amazonaws.com)" -}}
{{- end -}}
{{- if not $v.s3.bucket -}}
{{- fail "set s3.bucket (BUZZ_S3_BUCKET, the versioned media bucket)" -}}
{{- end -}}
{{- end -}}
{{- with $v.database.url.secret -}}
{{- if not $v.database.url.key -}}{{- fail "database.url.key must name the key of DATABASE_URL in database.url.secret" -}}{{- end -}}
{{- $files = append $files (dict "name" "database-url" "secret" . "mountPath" (printf "%s/database-url" $root) "items" (list (dict "key" $v.database.url.key "env" "DATABASE_URL_FILE"))) -}}
{{- end -}}
{{- if include "buzz-deletion.hasSource" $v.database.ca -}}
{{- $files = append $files (include "buzz-deletion.fileSource" (dict "name" "postgres-ca" "root" $root "source" $v.database.ca "env" "PGSSLROOTCERT" "path" "database.ca") | fromJson) -}}
{{- end -}}
{{- with $v.redis.url.secret -}}
{{- if not $v.redis.url.key -}}{{- fail "redis.url.key must name the key of REDIS_URL in redis.url.secret" -}}{{- end -}}
{{- $files = append $files (dict "name" "redis-url" "secret" . "mountPath" (printf "%s/redis-url" $root) "items" (list (dict "key" $v.redis.url.key "env" "REDIS_URL_FILE"))) -}}
{{- end -}}
{{- if include "buzz-deletion.hasSource" $v.redis.ca -}}
{{- $files = append $files (include "buzz-deletion.fileSource" (dict "name" "redis-ca" "root" $root "source" $v.redis.ca "env" "BUZZ_REDIS_CA_FILE" "path" "redis.ca") | fromJson) -}}
{{- end -}}
{{- with $v.s3.credentials.secret -}}
{{- if not (and $v.s3.credentials.accessKeyKey $v.s3.credentials.secretKeyKey) -}}
{{- fail "s3.credentials.secret needs both s3.credentials.accessKeyKey and s3.credentials.secretKeyKey (an access key without its secret cannot sign); leave s3.credentials.secret empty to use the AWS default chain (IRSA, instance profile)" -}}
{{- end -}}
{{- $files = append $files (dict "name" "s3-credentials" "secret" . "mountPath" (printf "%s/s3-credentials" $root) "items" (list (dict "key" $v.s3.credentials.accessKeyKey "env" "BUZZ_S3_ACCESS_KEY_FILE") (dict "key" $v.s3.credentials.secretKeyKey "env" "BUZZ_S3_SECRET_KEY_FILE"))) -}}
{{- end -}}
{{- if include "buzz-deletion.hasSource" $v.s3.ca -}}
{{- $files = append $files (include "buzz-deletion.fileSource" (dict "name" "s3-ca" "root" $root "source" $v.s3.ca "env" "BUZZ_S3_CA_FILE" "path" "s3.ca") | fromJson) -}}
{{- end -}}
{{- $tls := $v.temporal.tls -}}
{{- if include "buzz-deletion.hasSource" $tls.serverCA -}}
{{- $files = append $files (include "buzz-deletion.fileSource" (dict "name" "temporal-ca" "root" $root "source" $tls.serverCA "env" "TEMPORAL_TLS_SERVER_CA_CERT_PATH" "path" "temporal.tls.serverCA") | fromJson) -}}
{{- end -}}
{{- with $tls.client.secret -}}
{{- if not $tls.client.certKey -}}
{{- fail "temporal.tls.client.secret is set but temporal.tls.client.certKey is empty: mutual TLS needs the client certificate (PEM) and its key" -}}
{{- end -}}
{{- if not $tls.client.keyKey -}}
{{- fail "temporal.tls.client.secret is set but temporal.tls.client.keyKey is empty: a client certificate without its private key cannot authenticate (mutual TLS needs both)" -}}
{{- end -}}
{{- $files = append $files (dict "name" "temporal-client" "secret" . "mountPath" (printf "%s/temporal-client" $root) "items" (list (dict "key" $tls.client.certKey "env" "TEMPORAL_TLS_CLIENT_CERT_PATH") (dict "key" $tls.client.keyKey "env" "TEMPORAL_TLS_CLIENT_KEY_PATH"))) -}}
{{- end -}}
{{- with $v.temporal.apiKey.secret -}}
{{- if not $v.temporal.apiKey.key -}}{{- fail "temporal.apiKey.key must name the key of the API key in temporal.apiKey.secret" -}}{{- end -}}
{{- $files = append $files (dict "name" "temporal-api-key" "secret" . "mountPath" (printf "%s/temporal-api-key" $root) "items" (list (dict "key" $v.temporal.apiKey.key "env" "TEMPORAL_API_KEY_FILE"))) -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}

{{/* The migration Job's files: the schema owner's URL and the Postgres CA, nothing else. */}}
{{- define "buzz-deletion.jobFiles" -}}
{{- $v := .Values -}}
{{- $root := trimSuffix "/" $v.files.mountRoot -}}
{{- $files := list (dict "name" "owner-database-url" "secret" (include "buzz-deletion.ownerSecretName" .) "mountPath" (printf "%s/owner-database-url" $root) "items" (list (dict "key" (include "buzz-deletion.ownerSecretKey" .) "env" "BUZZ_OWNER_DATABASE_URL_FILE"))) -}}
{{- if include "buzz-deletion.hasSource" $v.database.ca -}}
{{- $files = append $files (include "buzz-deletion.fileSource" (dict "name" "postgres-ca" "root" $root "source" $v.database.ca "env" "PGSSLROOTCERT" "path" "database.ca") | fromJson) -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}

{{/* Variables naming the mounted files. Input: the list from workerFiles/jobFiles. */}}
{{- define "buzz-deletion.fileEnv" -}}
{{- range $f := . }}
{{- range $f.items }}
- name: {{ .env }}
  value: {{ printf "%s/%s" $f.mountPath .key | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "buzz-deletion.fileMounts" -}}
{{- range . }}
- name: {{ .name }}
  mountPath: {{ .mountPath | quote }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "buzz-deletion.fileVolumes" -}}
{{- range . }}
- name: {{ .name }}
  {{- if .secret }}
  secret:
    secretName: {{ .secret | quote }}
    defaultMode: 0400
  {{- else }}
  configMap:
    name: {{ .configMap | quote }}
    defaultMode: 0444
  {{- end }}
    items:
      {{- range .items }}
      - key: {{ .key | quote }}
        path: {{ .key | quote }}
      {{- end }}
{{- end }}
{{- end -}}

{{/*
Plain (non-secret) settings of Temporal TLS, Postgres TLS, the Redis mode and S3, as values:
they are not secrets, so they are variables.
*/}}
{{- define "buzz-deletion.plainConnectionEnv" -}}
{{- $v := .Values -}}
{{- if include "buzz-deletion.temporalTls" . }}
- name: TEMPORAL_TLS
  value: "true"
{{- end }}
{{- with $v.temporal.tls.serverName }}
- name: TEMPORAL_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- include "buzz-deletion.postgresTlsEnv" . }}
{{- with $v.s3.endpoint }}
- name: BUZZ_S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with $v.s3.bucket }}
- name: BUZZ_S3_BUCKET
  value: {{ . | quote }}
{{- end }}
{{- with $v.s3.region }}
- name: BUZZ_S3_REGION
  value: {{ . | quote }}
{{- end }}
{{- with $v.redis.mode }}
{{- if not (has . (list "single" "cluster")) }}
{{- fail (printf "redis.mode must be \"single\" or \"cluster\" (not %v)" .) }}
{{- end }}
- name: BUZZ_REDIS_MODE
  value: {{ . | quote }}
{{- end }}
{{- with $v.s3.addressing }}
{{- if not (has . (list "path" "virtual")) }}
{{- fail (printf "s3.addressing must be \"path\" or \"virtual\" (not %v)" .) }}
{{- end }}
- name: BUZZ_S3_ADDRESSING
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* PGSSLMODE: the default sslmode of both Postgres URLs (a `sslmode=` in the URL wins). */}}
{{- define "buzz-deletion.postgresTlsEnv" -}}
{{- with .Values.database.sslMode }}
{{- if not (has . (list "disable" "allow" "prefer" "require" "verify-ca" "verify-full")) }}
{{- fail (printf "database.sslMode must be one of disable, allow, prefer, require, verify-ca, verify-full (not %v)" .) }}
{{- end }}
- name: PGSSLMODE
  value: {{ . | quote }}
{{- end }}
{{- end -}}
