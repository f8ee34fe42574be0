{{/* kobe.name is the chart's name, or nameOverride. */}}
{{- define "kobe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* kobe.fullname names the release's objects. */}}
{{- define "kobe.fullname" -}}
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

{{- define "kobe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kobe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kobe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kobe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kobe
{{- end -}}

{{- define "kobe.serviceAccountName" -}}
{{- default (include "kobe.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* kobe.replicas: one when the local backend is on (its members live in the pod). */}}
{{- define "kobe.replicas" -}}
{{- if .Values.backends.local.enabled -}}1{{- else -}}{{ .Values.replicaCount }}{{- end -}}
{{- end -}}

{{- define "kobe.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* kobe.tlsSelfSigned is "true" when the chart makes the API's certificate itself (templates/tls-secret.yaml). */}}
{{- define "kobe.tlsSelfSigned" -}}
{{- and .Values.api.tls.enabled (not .Values.api.tls.secretName) (not .Values.api.tls.certManager.enabled) -}}
{{- end -}}

{{/* kobe.apiDnsNames are the Service's in-cluster names. */}}
{{- define "kobe.apiDnsNames" -}}
{{- $svc := include "kobe.fullname" . -}}
{{- list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson -}}
{{- end -}}

{{/* kobe.operatorSelector is the Deployment's pod selector as k=v,... (--member-network-policy-operator-selector). */}}
{{- define "kobe.operatorSelector" -}}
{{- $pairs := list -}}
{{- range $k, $v := include "kobe.selectorLabels" . | fromYaml -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{- define "kobe.tlsSecretName" -}}
{{- default (printf "%s-api-tls" (include "kobe.fullname" .)) .Values.api.tls.secretName -}}
{{- end -}}

{{/* kobe.validate fails the render on combinations the operator would refuse or that would break it. */}}
{{- define "kobe.validate" -}}
{{- if and (gt (int (include "kobe.replicas" .)) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicaCount > 1 needs leaderElection.enabled: without it every replica reconciles" -}}
{{- end -}}
{{- if and (eq (include "kobe.tlsSelfSigned" .) "true") (not .Values.api.tls.caCert) -}}
{{- fail "api.tls.caCert false leaves Proxy-mode kubeconfigs to callers' system roots, which never trust the chart's self-signed CA: keep it true, or set api.tls.secretName or api.tls.certManager.enabled" -}}
{{- end -}}
{{- if and .Values.api.tls.certManager.enabled (not .Values.api.tls.enabled) -}}
{{- fail "api.tls.certManager.enabled needs api.tls.enabled" -}}
{{- end -}}
{{- if and .Values.api.tls.certManager.enabled (not .Values.api.tls.certManager.issuerRef.name) -}}
{{- fail "api.tls.certManager.enabled needs api.tls.certManager.issuerRef.name" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled" -}}
{{- end -}}
{{- end -}}
