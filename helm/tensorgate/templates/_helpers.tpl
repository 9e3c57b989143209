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
