{{/* The chart's name, and the name of its objects (the release name when it holds the chart's). */}}
{{- define "meshlimit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "meshlimit.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "meshlimit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshlimit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "meshlimit.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "meshlimit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "meshlimit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "meshlimit.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "meshlimit.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "meshlimit.configMapName" -}}
{{- default (printf "%s-config" (include "meshlimit.fullname" .)) .Values.config.files.existingConfigMap -}}
{{- end -}}

{{/*
Refuses values that cannot work, with the reason: several replicas on the embedded store
(each would enforce every limit on its own), a source without what it needs.
*/}}
{{- define "meshlimit.validate" -}}
{{- $store := .Values.store.type -}}
{{- if not (has $store (list "memory" "redis")) -}}
{{- fail (printf "store.type must be memory or redis, not %q" $store) -}}
{{- end -}}
{{- if and (eq $store "memory") (not .Values.store.allowPerReplicaLimits) -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- fail (printf "replicaCount is %d on the embedded store (store.type memory): each replica would keep its own buckets and allow every limit on its own. Use store.type redis to share the limits, or set store.allowPerReplicaLimits: true to accept per-replica limits." (int .Values.replicaCount)) -}}
{{- end -}}
{{- if .Values.autoscaling.enabled -}}
{{- fail "autoscaling.enabled on the embedded store (store.type memory): each replica would keep its own buckets and allow every limit on its own. Use store.type redis to share the limits, or set store.allowPerReplicaLimits: true to accept per-replica limits." -}}
{{- end -}}
{{- end -}}
{{- if eq $store "redis" -}}
{{- if not (or .Values.store.redis.url .Values.store.redis.urlSecret.name) -}}
{{- fail "store.type redis needs store.redis.url or store.redis.urlSecret.name" -}}
{{- end -}}
{{- if and .Values.store.redis.passwordSecret.name (not .Values.store.redis.url) -}}
{{- fail "store.redis.passwordSecret needs store.redis.url (without credentials) to put the password into" -}}
{{- end -}}
{{- if and .Values.store.redis.passwordSecret.name (contains "@" .Values.store.redis.url) -}}
{{- fail "store.redis.url already holds credentials: drop them or store.redis.passwordSecret" -}}
{{- end -}}
{{- if and .Values.store.redis.url (or (regexMatch "^[a-z+]+://[^/@]*:[^/@]+@" .Values.store.redis.url) (regexMatch "[?&](pass|password|sentinel_password)=" .Values.store.redis.url)) -}}
{{- fail "store.redis.url holds a password, which would be readable in the Deployment: put the whole URL in a Secret (store.redis.urlSecret) or the password alone (store.redis.passwordSecret)" -}}
{{- end -}}
{{- end -}}
{{- $source := .Values.config.source -}}
{{- if not (has $source (list "files" "xds" "postgres")) -}}
{{- fail (printf "config.source must be files, xds or postgres, not %q" $source) -}}
{{- end -}}
{{- if and (eq $source "xds") (not .Values.config.xds.server) -}}
{{- fail "config.source xds needs config.xds.server (host:port of the control plane)" -}}
{{- end -}}
{{- if and (eq $source "postgres") (not .Values.config.postgres.urlSecret.name) -}}
{{- fail "config.source postgres needs config.postgres.urlSecret.name (a Secret holding the postgres:// URL)" -}}
{{- end -}}
{{- if and .Values.grpc.tls.clientCA (not .Values.grpc.tls.secretName) -}}
{{- fail "grpc.tls.clientCA needs grpc.tls.secretName" -}}
{{- end -}}
{{- end -}}

{{/* The liveness probe's kind: http (/healthcheck) or tcp (the gRPC port). */}}
{{- define "meshlimit.livenessMode" -}}
{{- $mode := .Values.probes.liveness.mode -}}
{{- if eq $mode "auto" -}}
{{- if eq .Values.store.type "redis" -}}tcp{{- else -}}http{{- end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}
