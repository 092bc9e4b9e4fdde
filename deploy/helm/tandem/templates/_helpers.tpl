{{- define "tandem.labels" -}}
app.kubernetes.io/name: tandem
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "tandem.selector" -}}
app.kubernetes.io/name: tandem
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tandem.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{- /* tandemd.toml: .Values.config rendered as a template, checked against
the values the pod spec uses for the same things. */ -}}
{{- define "tandem.config" -}}
{{- $cfg := tpl .Values.config . -}}
{{- $port := toString .Values.metrics.port -}}
{{- if not (regexMatch (printf "(?m)^tcp_listen\\s*=\\s*\"[^\"]*:%s\"" (regexQuoteMeta $port)) $cfg) -}}
{{- fail (printf "config: [stats] tcp_listen must listen on metrics.port (%s), which the container port and the probes use" $port) -}}
{{- end -}}
{{- if not (regexMatch (printf "(?m)^pod_info_dir\\s*=\\s*\"%s/?\"" (regexQuoteMeta .Values.hostPaths.podInfoDir)) $cfg) -}}
{{- fail (printf "config: [kubernetes] pod_info_dir must be hostPaths.podInfoDir (%s), where tandem-nri writes the pod records" .Values.hostPaths.podInfoDir) -}}
{{- end -}}
{{- $cfg -}}
{{- end }}
