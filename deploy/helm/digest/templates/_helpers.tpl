{{- define "digest.name" -}}{{ .Release.Name }}{{- end -}}

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

{{- define "digest.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}

{{- define "digest.secretName" -}}{{ .Values.telegram.existingSecret | default (printf "%s-telegram" .Release.Name) }}{{- end -}}

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
  - name: telegram
    mountPath: /etc/digest/secrets
    readOnly: true
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{- define "digest.volumes" -}}
volumes:
  - name: state
    persistentVolumeClaim:
      claimName: {{ include "digest.name" . }}-state
  - name: policy
    configMap:
      name: {{ include "digest.policyName" . }}
  - name: telegram
    secret:
      secretName: {{ include "digest.secretName" . }}
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
{{- end -}}
