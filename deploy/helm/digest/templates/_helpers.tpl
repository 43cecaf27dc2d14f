{{- /* Every object's name: the release's, or fullnameOverride (trimmed to 52 so "-replay" and a Job's suffix fit). */ -}}
{{- define "digest.name" -}}{{ .Values.fullnameOverride | default .Release.Name | trunc 52 | trimSuffix "-" }}{{- end -}}

{{- define "digest.labels" -}}
app.kubernetes.io/name: digest
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "digest.selector" -}}
app.kubernetes.io/name: digest
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* A pod template's metadata: the selector labels, podLabels, and podAnnotations (with the config's checksum). */ -}}
{{- define "digest.podMetadata" -}}
labels:
  {{- include "digest.selector" .root | nindent 2 }}
  app.kubernetes.io/component: {{ .component }}
  {{- with .root.Values.podLabels }}{{ toYaml . | nindent 2 }}{{ end }}
annotations:
  checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
  {{- with .root.Values.podAnnotations }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end -}}

{{- /* Scheduling and pulling, shared by every pod. */ -}}
{{- define "digest.podPlacement" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- /* The container's environment: the chart's ConfigMap, then extraEnvFrom. */ -}}
{{- define "digest.envFrom" -}}
envFrom:
  - configMapRef:
      name: {{ include "digest.name" . }}-config
  {{- with .Values.extraEnvFrom }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end -}}

{{- /* The backends' credentials: a Secret per store, mounted read-only under /etc/digest/backends/<store>. */ -}}
{{- define "digest.credentialVolume" -}}
{{- $auth := .auth -}}
- name: {{ .name }}
  secret:
    secretName: {{ $auth.existingSecret }}
    defaultMode: 0440
    items:
      {{- with $auth.bearerTokenKey }}
      - key: {{ . }}
        path: bearer-token
      {{- end }}
      {{- with $auth.passwordKey }}
      - key: {{ . }}
        path: password
      {{- end }}
{{- end -}}

{{- /* The settings that point at the mounted credentials (the files' contents never reach a ConfigMap). */ -}}
{{- define "digest.credentialEnv" -}}
{{- if .auth.existingSecret -}}
{{- if .auth.bearerTokenKey }}
{{ .prefix }}_BEARER_TOKEN_FILE: "/etc/digest/backends/{{ .store }}/bearer-token"
{{- end }}
{{- if .auth.passwordKey }}
{{ .prefix }}_USERNAME: {{ .auth.username | quote }}
{{ .prefix }}_PASSWORD_FILE: "/etc/digest/backends/{{ .store }}/password"
{{- end }}
{{- end }}
{{- end -}}

{{- define "digest.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}

{{- define "digest.secretName" -}}{{ .Values.telegram.existingSecret | default (printf "%s-telegram" .Release.Name) }}{{- end -}}

{{- define "digest.webhookSecretName" -}}{{ .Values.webhook.existingSecret | default (printf "%s-webhook" .Release.Name) }}{{- end -}}

{{- define "digest.slackSecretName" -}}{{ .Values.slack.existingSecret | default (printf "%s-slack" .Release.Name) }}{{- end -}}

{{- define "digest.mattermostSecretName" -}}{{ .Values.mattermost.existingSecret | default (printf "%s-mattermost" .Release.Name) }}{{- end -}}

{{- define "digest.policyName" -}}{{ .Values.policy.existingConfigMap | default (printf "%s-policy" .Release.Name) }}{{- end -}}

{{- /* The pod spec parts every workload shares: security, volumes, the container's environment. */ -}}
{{- define "digest.podSecurity" -}}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  fsGroupChangePolicy: OnRootMismatch
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "digest.containerSecurity" -}}
securityContext:
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  privileged: false
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{- define "digest.mounts" -}}
volumeMounts:
  - name: state
    mountPath: /var/lib/digest
  - name: policy
    mountPath: /etc/digest/policy
    readOnly: true
  {{- if has "telegram" .Values.channels }}
  - name: telegram
    mountPath: /etc/digest/secrets
    readOnly: true
  {{- end }}
  {{- if has "slack" .Values.channels }}
  - name: slack
    mountPath: /etc/digest/slack
    readOnly: true
  {{- end }}
  {{- if has "mattermost" .Values.channels }}
  - name: mattermost
    mountPath: /etc/digest/mattermost
    readOnly: true
  {{- end }}
  {{- if has "webhook" .Values.channels }}
  - name: webhook
    mountPath: /etc/digest/webhook
    readOnly: true
  {{- end }}
  - name: tmp
    mountPath: /tmp
  {{- if .Values.backends.metrics.auth.existingSecret }}
  - name: metrics-credentials
    mountPath: /etc/digest/backends/metrics
    readOnly: true
  {{- end }}
  {{- if .Values.backends.logs.auth.existingSecret }}
  - name: logs-credentials
    mountPath: /etc/digest/backends/logs
    readOnly: true
  {{- end }}
  {{- with .Values.extraVolumeMounts }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end -}}

{{- /* The pod's volumes. The state claim is the bot's and the CronJob post's (one of them runs); the replay Job
keeps its state on an emptyDir, as the claim is ReadWriteOnce and attached to the bot's node. */ -}}
{{- define "digest.volumes" -}}
{{- $root := .root | default . -}}
volumes:
  - name: state
    {{- if .ephemeralState }}
    emptyDir:
      sizeLimit: 64Mi
    {{- else }}
    persistentVolumeClaim:
      claimName: {{ include "digest.name" $root }}-state
    {{- end }}
  - name: policy
    configMap:
      name: {{ include "digest.policyName" $root }}
  {{- if has "telegram" $root.Values.channels }}
  - name: telegram
    secret:
      secretName: {{ include "digest.secretName" $root }}
  {{- end }}
  {{- if has "slack" $root.Values.channels }}
  - name: slack
    secret:
      secretName: {{ include "digest.slackSecretName" $root }}
  {{- end }}
  {{- if has "mattermost" $root.Values.channels }}
  - name: mattermost
    secret:
      secretName: {{ include "digest.mattermostSecretName" $root }}
  {{- end }}
  {{- if has "webhook" $root.Values.channels }}
  - name: webhook
    secret:
      secretName: {{ include "digest.webhookSecretName" $root }}
  {{- end }}
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- with $root.Values.backends.metrics.auth }}{{ if .existingSecret }}
  {{- include "digest.credentialVolume" (dict "name" "metrics-credentials" "auth" .) | nindent 2 }}
  {{- end }}{{ end }}
  {{- with $root.Values.backends.logs.auth }}{{ if .existingSecret }}
  {{- include "digest.credentialVolume" (dict "name" "logs-credentials" "auth" .) | nindent 2 }}
  {{- end }}{{ end }}
  {{- with $root.Values.extraVolumes }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end -}}

{{- /* Combinations that cannot work, refused at render with one line each. */ -}}
{{- define "digest.refuse" -}}
{{- if not (has .Values.timezone (splitList "\n" (.Files.Get "files/timezones.txt"))) -}}
{{- fail (printf "timezone: %q is not a time zone of the IANA database (Europe/Paris, America/New_York, UTC, …)" .Values.timezone) -}}
{{- end -}}
{{- if and .Values.bot.enabled .Values.cronjob.enabled -}}
{{- fail "bot.enabled and cronjob.enabled both post the day to the chats and share a ReadWriteOnce state claim: enable one of them" -}}
{{- end -}}
{{- if not (or .Values.bot.enabled .Values.cronjob.enabled .Values.replay.enabled) -}}
{{- fail "bot.enabled, cronjob.enabled and replay.enabled are all false: nothing would run" -}}
{{- end -}}
{{- range $store := list "metrics" "logs" -}}
{{- $auth := (index $.Values.backends $store).auth -}}
{{- if $auth.existingSecret -}}
{{- if and $auth.bearerTokenKey $auth.passwordKey -}}
{{- fail (printf "backends.%s.auth: set bearerTokenKey or passwordKey, not both" $store) -}}
{{- end -}}
{{- if not (or $auth.bearerTokenKey $auth.passwordKey) -}}
{{- fail (printf "backends.%s.auth.existingSecret needs bearerTokenKey or passwordKey (the key holding the credential)" $store) -}}
{{- end -}}
{{- if and $auth.passwordKey (not $auth.username) -}}
{{- fail (printf "backends.%s.auth.passwordKey needs backends.%s.auth.username" $store $store) -}}
{{- end -}}
{{- else if or $auth.bearerTokenKey $auth.passwordKey $auth.username -}}
{{- fail (printf "backends.%s.auth: the keys name a Secret's keys; set backends.%s.auth.existingSecret" $store $store) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.recordingRules.vmalert.createVMAlert (not .Values.recordingRules.vmalert.enabled) -}}
{{- fail "recordingRules.vmalert.createVMAlert needs recordingRules.vmalert.enabled (the VMRule it runs)" -}}
{{- end -}}
{{- if and .Values.recordingRules.vmalert.createVMAlert (ne .Values.backends.logs.kind "victorialogs") -}}
{{- fail "recordingRules.vmalert.createVMAlert reads VictoriaLogs: backends.logs.kind is loki (use recordingRules.loki)" -}}
{{- end -}}
{{- if and .Values.recordingRules.vmalert.createVMAlert .Values.backends.metrics.tenant (not .Values.recordingRules.vmalert.remoteWriteUrl) -}}
{{- fail "recordingRules.vmalert.remoteWriteUrl: set vminsert's URL (backends.metrics.url is vmselect's on a VictoriaMetrics cluster)" -}}
{{- end -}}
{{- if and .Values.recordingRules.vmalert.enabled (not .Values.recordingRules.vmalert.labels) -}}
{{- fail "recordingRules.vmalert.labels: set the labels only the VictoriaLogs VMAlert's ruleSelector matches (a VMAlert reading VictoriaMetrics cannot run LogsQL rules)" -}}
{{- end -}}
{{- end -}}


{{- /* deploy/alerts.yaml for this release: the bot's rules when the bot runs, DigestCronJobNotSucceeded when the
CronJob posts; the CronJob's name, the namespace and the Deployment's name as rendered. */ -}}
{{- define "digest.alertRules" -}}
{{- $name := include "digest.name" . -}}
{{- $source := .Files.Get "files/alerts.yaml"
  | replace "cronjob=\"digest-post\"" "__DIGEST_CRONJOB_SELECTOR__"
  | replace "digest-post" (printf "%s-post" $name)
  | replace "__DIGEST_CRONJOB_SELECTOR__" (printf "namespace=%q, cronjob=%q" .Release.Namespace (printf "%s-post" $name))
  | replace "kubectl -n digest " (printf "kubectl -n %s " .Release.Namespace)
  | replace "deploy/digest" (printf "deploy/%s" $name)
  | fromYaml -}}
{{- $groups := list -}}
{{- range $group := $source.groups -}}
{{- $rules := list -}}
{{- range $rule := $group.rules -}}
{{- $cronjob := eq $rule.alert "DigestCronJobNotSucceeded" -}}
{{- if or (and $cronjob $.Values.cronjob.enabled) (and (not $cronjob) $.Values.bot.enabled) -}}
{{- $rules = append $rules $rule -}}
{{- end -}}
{{- end -}}
{{- if $rules -}}
{{- $groups = append $groups (merge (dict "rules" $rules) (omit $group "rules")) -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}
