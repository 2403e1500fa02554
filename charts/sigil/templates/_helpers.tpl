{{/*
Names are fixed rather than derived from the release name: the webhook
configurations and CRDs are cluster-scoped, so one sigil per cluster, and the
binaries' defaults, the controller README and kubectl users all say "sigil-…".
*/}}
{{- define "sigil.webhookName" -}}sigil-webhook{{- end -}}
{{- define "sigil.controllerName" -}}sigil-controller{{- end -}}
{{- define "sigil.tlsSecret" -}}sigil-webhook-tls{{- end -}}
{{- define "sigil.snapshotSecret" -}}sigil-policy-snapshot{{- end -}}
{{- /*
The policy snapshot's shard Secrets, as a YAML list: two sets of seven
(sigil_api::snapshot::stored::SHARDS_PER_SET), used by odd and even
revisions in turn, so RBAC names every Secret the snapshot may use.
*/ -}}
{{- define "sigil.snapshotShards" -}}
{{- $main := include "sigil.snapshotSecret" . -}}
{{- $names := list -}}
{{- range $set := list "a" "b" -}}
{{- range $i := until 7 -}}
{{- $names = append $names (printf "%s-%s%d" $main $set (add1 $i)) -}}
{{- end -}}
{{- end -}}
{{- toYaml $names -}}
{{- end -}}
{{- define "sigil.tufStateSecret" -}}sigil-tuf-state{{- end -}}
{{- define "sigil.registryCAConfigMap" -}}
{{- .Values.registryCABundle.existingConfigMap | default "sigil-registry-ca" -}}
{{- end -}}

{{- define "sigil.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: sigil
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sigil
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "webhook"). */}}
{{- define "sigil.selectorLabels" -}}
app.kubernetes.io/name: sigil
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sigil.componentLabels" -}}
{{ include "sigil.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sigil.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Whether the in-cluster webhook runs; fails on contradictory values. */}}
{{- define "sigil.webhookDeployed" -}}
{{- if and .Values.webhook.url .Values.webhook.deploy -}}
{{- fail "webhook.url sends admission requests to a server outside the cluster: set webhook.deploy=false as well" -}}
{{- end -}}
{{- if and (not .Values.webhook.url) (not .Values.webhook.deploy) -}}
{{- fail "webhook.deploy=false needs webhook.url: the API server must have a webhook to call" -}}
{{- end -}}
{{- if .Values.webhook.deploy -}}true{{- end -}}
{{- end -}}

{{/* Whether the controller issues the webhook certificate and writes caBundle. */}}
{{- define "sigil.tlsManaged" -}}
{{- if not (or .Values.certManager.enabled .Values.webhook.url) -}}true{{- end -}}
{{- end -}}

{{- define "sigil.registryCA" -}}
{{- if and .Values.registryCABundle.pem .Values.registryCABundle.existingConfigMap -}}
{{- fail "registryCABundle: give either pem or existingConfigMap, not both" -}}
{{- end -}}
{{- if or .Values.registryCABundle.pem .Values.registryCABundle.existingConfigMap -}}true{{- end -}}
{{- end -}}

{{/* Namespaces never intercepted: kube-system, the release's, and extras. */}}
{{- define "sigil.excludedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace -}}
{{- range .Values.excludeNamespaces -}}
{{- $ns = append $ns . -}}
{{- end -}}
{{- toJson (uniq $ns) -}}
{{- end -}}

{{/* The hardening every sigil container runs with. */}}
{{- define "sigil.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "sigil.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The default anti-affinity: spread one component's replicas over nodes. */}}
{{- define "sigil.antiAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "sigil.selectorLabels" . | nindent 12 }}
{{- end -}}

{{- define "sigil.auditName" -}}sigil-audit{{- end -}}

{{/* The report API group and kinds of audit.reportFormat. */}}
{{- define "sigil.reportAPI" -}}
{{- if eq .Values.audit.reportFormat "wgpolicyk8s" -}}
{{- toJson (dict "group" "wgpolicyk8s.io" "version" "v1alpha2" "kind" "PolicyReport" "plural" "policyreports" "short" "polr" "clusterKind" "ClusterPolicyReport" "clusterPlural" "clusterpolicyreports" "clusterShort" "cpolr") -}}
{{- else -}}
{{- toJson (dict "group" "openreports.io" "version" "v1alpha1" "kind" "Report" "plural" "reports" "short" "reps" "clusterKind" "ClusterReport" "clusterPlural" "clusterreports" "clusterShort" "creps") -}}
{{- end -}}
{{- end -}}

{{/*
Whether the chart installs the CRD named .name: not when the cluster has it
from another owner (Kyverno, Policy Reporter, a manual apply), since taking
it over would fight them; yes when it is absent or this release owns it.
`lookup` sees nothing under `helm template` and dry runs: they render it.
*/}}
{{- define "sigil.ownsCRD" -}}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" .name -}}
{{- if not $crd -}}true
{{- else -}}
{{- $ann := $crd.metadata.annotations | default dict -}}
{{- if and (eq (index $ann "meta.helm.sh/release-name" | default "") .ctx.Release.Name) (eq (index $ann "meta.helm.sh/release-namespace" | default "") .ctx.Release.Namespace) -}}true{{- end -}}
{{- end -}}
{{- end -}}
