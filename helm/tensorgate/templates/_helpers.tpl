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

{{/*
The server's ports: the container's, fixed by server.interface (tensorgate serve: HTTP 8000, gRPC 8001;
TensorFlow Serving's command line: REST 8501, gRPC 8500), and the Service's, the same unless
service.port / grpc.port say otherwise. `include "tensorgate.ports" . | fromYaml`.
*/}}
{{- define "tensorgate.ports" -}}
{{- $tfserving := eq .Values.server.interface "tfserving" }}
{{- $http := ternary 8501 8000 $tfserving }}
{{- $grpc := ternary 8500 8001 $tfserving }}
http: {{ $http }}
grpc: {{ $grpc }}
serviceHttp: {{ .Values.service.port | default $http }}
serviceGrpc: {{ .Values.grpc.port | default $grpc }}
{{- end }}

{{/*
The settings that tensorflow_model_server sets itself (server.interface=tfserving): each takes its flag's
value, TensorFlow Serving's default when the flag is left out, so a TENSORGATE_* variable would be
overridden. The chart passes them as that flag: a number multiplied by `scale` (seconds to milliseconds,
...) and whole, a list joined with commas. One without a flag (`refused`) cannot be set in that mode.
*/}}
{{- define "tensorgate.tfservingSettingFlags" -}}
allow_version_labels_for_unavailable_models: {flag: allow_version_labels_for_unavailable_models}
batching: {flag: enable_batching}
check_input_shapes: {refused: "tensorflow_model_server feeds a tensor of any shape and lets the graph decide, as TensorFlow Serving does"}
cors: {flag: rest_api_enable_cors_support}
grpc_alts: {flag: use_alts_credentials}
grpc_channel_arguments: {flag: grpc_channel_arguments}
load_retries: {flag: max_num_load_retries}
load_retry_interval_s: {flag: load_retry_interval_micros, scale: 1000000}
load_threads: {flag: num_load_threads}
model_config_file: {flag: model_config_file}
model_config_file_poll_wait_seconds: {flag: model_config_file_poll_wait_seconds}
poll_interval_s: {flag: file_system_poll_wait_seconds}
per_version_batching_parameters: {flag: enable_per_model_batching_parameters}
predict_tensor_content: {flag: enable_serialization_as_tensor_content}
request_timeout_s: {flag: rest_api_timeout_in_ms, scale: 1000}
saved_model_tags: {flag: saved_model_tags}
signature_method_name_check: {flag: enable_signature_method_name_check}
warmup: {flag: enable_model_warmup}
{{- end }}

{{/*
tensorflow_model_server's arguments (server.interface=tfserving): what the tensorflow/serving image's
entrypoint passes (ports, model name and base path, or the model config file instead), then the settings
that have a flag, then server.tfserving.args, which win over those (the last of a repeated flag wins).
*/}}
{{- define "tensorgate.tfservingArgs" -}}
{{- $tfserving := .Values.server.tfserving }}
{{- $settings := .Values.settings }}
{{- $args := list "--port=8500" "--rest_api_port=8501" }}
{{- if $settings.model_config_file }}
{{- $args = append $args (printf "--model_config_file=%s" $settings.model_config_file) }}
{{- else }}
{{- $args = append $args (printf "--model_name=%s" $tfserving.modelName) }}
{{- $args = append $args (printf "--model_base_path=%s" (default (printf "/models/%s" $tfserving.modelName) $tfserving.modelBasePath)) }}
{{- end }}
{{- range $name, $spec := include "tensorgate.tfservingSettingFlags" . | fromYaml }}
{{- if and (hasKey $settings $name) $spec.flag (ne $name "model_config_file") }}
{{- $value := index $settings $name }}
{{- if kindIs "slice" $value }}
{{- $value = join "," $value }}
{{- else if not (or (kindIs "string" $value) (kindIs "bool" $value)) }}
{{- $scaled := mulf $value ($spec.scale | default 1) }}
{{- if and (not $spec.scale) (ne $scaled (floor $scaled)) }}
{{- fail (printf "settings.%s=%v cannot be passed to TensorFlow Serving's command line (server.interface=tfserving): its --%s takes a whole number" $name $value $spec.flag) }}
{{- end }}
{{- $value = round $scaled 0 | int64 }}
{{- end }}
{{- $args = append $args (printf "--%s=%v" $spec.flag $value) }}
{{- end }}
{{- end }}
{{- toYaml (concat $args $tfserving.args) }}
{{- end }}

{{/* server.interface=tfserving: what TensorFlow Serving's command line cannot take from the chart. */}}
{{- define "tensorgate.validateInterface" -}}
{{- if eq .Values.server.interface "tfserving" }}
{{- if not .Values.grpc.enabled }}
{{- fail "server.interface=tfserving needs grpc.enabled=true: TensorFlow Serving's command line always serves gRPC (--port)" }}
{{- end }}
{{- range $name, $spec := include "tensorgate.tfservingSettingFlags" . | fromYaml }}
{{- if and $spec.refused (hasKey $.Values.settings $name) }}
{{- fail (printf "settings.%s cannot be set with server.interface=tfserving: %s" $name $spec.refused) }}
{{- end }}
{{- end }}
{{- if and .Values.settings.model_config_file .Values.server.tfserving.modelBasePath }}
{{- fail "server.tfserving.modelBasePath and settings.model_config_file both name what to serve: set one (TensorFlow Serving would ignore the base path)" }}
{{- end }}
{{- range .Values.server.tfserving.args }}
{{- $flag := regexReplaceAll "^--([^=]*).*$" . "${1}" }}
{{- if has $flag (list "port" "rest_api_port") }}
{{- fail (printf "server.tfserving.args cannot set --%s: the container's ports are 8500 (gRPC) and 8501 (REST), which the probes and the Service use; service.port and grpc.port set the Service's" $flag) }}
{{- end }}
{{- if has $flag (list "model_name" "model_base_path" "model_config_file") }}
{{- fail (printf "server.tfserving.args cannot set --%s: use server.tfserving.modelName, server.tfserving.modelBasePath or settings.model_config_file" $flag) }}
{{- end }}
{{- end }}
{{- end }}
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
{{- $ports := include "tensorgate.ports" . | fromYaml }}
{{- if and .Values.grpc.enabled (eq (int $ports.serviceGrpc) (int $ports.serviceHttp)) }}
{{- fail "grpc.port and service.port are one Service port: give gRPC a port of its own" }}
{{- end }}
{{- range $listener := list "grpc" "http" }}
{{- $tls := (index $.Values $listener).tls }}
{{- if and $tls.verifyClients (not $tls.existingSecret) }}
{{- fail (printf "%s.tls.verifyClients needs %s.tls.existingSecret (a Secret holding tls.crt, tls.key and ca.crt)" $listener $listener) }}
{{- end }}
{{- end }}
{{- end }}
