{{/* Names and labels shared by every object of the chart. */}}

{{- define "tensorgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tensorgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tensorgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tensorgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tensorgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tensorgate.labels" -}}
helm.sh/chart: {{ include "tensorgate.chart" . }}
{{ include "tensorgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: model-server
app.kubernetes.io/part-of: tensorgate
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tensorgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tensorgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tensorgate.image" -}}
{{- printf "%s:%s%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) .Values.image.tagSuffix }}
{{- end }}

{{/* The Secret holding a token: an existing one, or the chart's own when a value is given. */}}
{{- define "tensorgate.tokenSecretName" -}}
{{- $token := index .root.Values .token }}
{{- if $token.existingSecret }}{{ $token.existingSecret }}{{ else }}{{ include "tensorgate.fullname" .root }}-tokens{{ end }}
{{- end }}

{{- define "tensorgate.claimName" -}}
{{- default (printf "%s-models" (include "tensorgate.fullname" .)) .Values.models.pvc.existingClaim }}
{{- end }}

{{/* Environment of the S3 sync containers (credentials come from models.s3.existingSecret or IRSA). */}}
{{- define "tensorgate.s3Env" -}}
- name: S3_URL
  value: {{ .Values.models.s3.url | quote }}
- name: S3_ENDPOINT
  value: {{ .Values.models.s3.endpoint | quote }}
{{- with .Values.models.s3.region }}
- name: AWS_DEFAULT_REGION
  value: {{ . | quote }}
{{- end }}
- name: HOME
  value: /tmp
{{- end }}

{{/*
TLS of one listener: `(dict "listener" "grpc"|"http" "tls" <its tls values>)`, from an existing Secret
mounted read-only at /etc/tensorgate/tls/<listener>. "tensorgate.listenerTLS" gives the tls values of
each listener that serves TLS (gRPC's only while gRPC is on).
*/}}
{{- define "tensorgate.listenerTLS" -}}
{{- $listeners := dict }}
{{- if and .Values.grpc.enabled .Values.grpc.tls.existingSecret }}
{{- $_ := set $listeners "grpc" .Values.grpc.tls }}
{{- end }}
{{- if .Values.http.tls.existingSecret }}
{{- $_ := set $listeners "http" .Values.http.tls }}
{{- end }}
{{- toYaml $listeners }}
{{- end }}

{{- define "tensorgate.tlsDir" -}}
/etc/tensorgate/tls/{{ . }}
{{- end }}

{{/* The server's TLS variables for one listener: the files of its mounted Secret (ca.crt only for mutual TLS). */}}
{{- define "tensorgate.tlsSettings" -}}
{{- $prefix := ternary "TENSORGATE_GRPC_TLS" "TENSORGATE_TLS" (eq .listener "grpc") }}
{{- $dir := include "tensorgate.tlsDir" .listener }}
{{ $prefix }}_CERT: {{ $dir }}/tls.crt
{{ $prefix }}_KEY: {{ $dir }}/tls.key
{{- if .tls.verifyClients }}
{{ $prefix }}_CA: {{ $dir }}/ca.crt
{{- end }}
{{- end }}

{{/* The Secret volume of one listener: only the keys the server reads, so that a missing key fails the mount, not the server. */}}
{{- define "tensorgate.tlsVolume" -}}
- name: tls-{{ .listener }}
  secret:
    secretName: {{ .tls.existingSecret }}
    defaultMode: 0440
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
      {{- if .tls.verifyClients }}
      - {key: ca.crt, path: ca.crt}
      {{- end }}
{{- end }}

{{- define "tensorgate.tlsVolumeMount" -}}
- {name: tls-{{ .listener }}, mountPath: {{ include "tensorgate.tlsDir" .listener }}, readOnly: true}
{{- end }}

{{/* Listener settings that cannot work together, refused with the reason a user reads from `helm install`. */}}
{{- define "tensorgate.validateListeners" -}}
{{- if eq .Values.probes.type "grpc" }}
{{- if not .Values.grpc.enabled }}
{{- fail "probes.type=grpc needs grpc.enabled=true: the probes ask the gRPC port's health service" }}
{{- end }}
{{- if .Values.grpc.tls.existingSecret }}
{{- fail "probes.type=grpc cannot be combined with grpc.tls: Kubernetes' gRPC probe does not support TLS; use probes.type=http or serve gRPC without TLS" }}
{{- end }}
{{- end }}
{{- if and (eq .Values.probes.type "http") .Values.http.tls.existingSecret .Values.http.tls.verifyClients }}
{{- fail "probes.type=http cannot be combined with http.tls.verifyClients: the kubelet's HTTPS probe presents no client certificate; use probes.type=grpc or turn verifyClients off" }}
{{- end }}
{{- if and .Values.grpc.enabled (eq (int .Values.grpc.port) (int .Values.service.port)) }}
{{- fail "grpc.port and service.port are one Service port: give gRPC a port of its own" }}
{{- end }}
{{- range $listener := list "grpc" "http" }}
{{- $tls := (index $.Values $listener).tls }}
{{- if and $tls.verifyClients (not $tls.existingSecret) }}
{{- fail (printf "%s.tls.verifyClients needs %s.tls.existingSecret (a Secret holding tls.crt, tls.key and ca.crt)" $listener $listener) }}
{{- end }}
{{- end }}
{{- end }}
