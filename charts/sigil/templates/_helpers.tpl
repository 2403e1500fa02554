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

{{/*
Whether the pods fix their user and group IDs to 65532 (securityContext.fixedIds):
"true" or "". `auto` leaves them to OpenShift, whose restricted-v2 SCC assigns
them from the namespace's range and refuses any other.
*/}}
{{- define "sigil.fixedIds" -}}
{{- $f := .Values.securityContext.fixedIds -}}
{{- if eq (toString $f) "auto" -}}
{{- if not (.Capabilities.APIVersions.Has "security.openshift.io/v1") -}}true{{- end -}}
{{- else if $f -}}true
{{- end -}}
{{- end -}}

{{/* The hardening every sigil container runs with. */}}
{{- define "sigil.containerSecurityContext" -}}
{{- $base := dict "runAsNonRoot" true "readOnlyRootFilesystem" true "allowPrivilegeEscalation" false "privileged" false "capabilities" (dict "drop" (list "ALL")) "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- if include "sigil.fixedIds" . -}}
{{- $_ := set $base "runAsUser" 65532 -}}
{{- $_ := set $base "runAsGroup" 65532 -}}
{{- end -}}
{{- toYaml (mergeOverwrite $base (deepCopy .Values.securityContext.container)) -}}
{{- end -}}

{{- define "sigil.podSecurityContext" -}}
{{- $base := dict "runAsNonRoot" true "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- if include "sigil.fixedIds" . -}}
{{- $_ := set $base "runAsUser" 65532 -}}
{{- $_ := set $base "runAsGroup" 65532 -}}
{{- $_ := set $base "fsGroup" 65532 -}}
{{- end -}}
{{- toYaml (mergeOverwrite $base (deepCopy .Values.securityContext.pod)) -}}
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

{{/* The registry credential providers' and mirrors' flags, for the webhook and the audit. */}}
{{- define "sigil.registryAccessArgs" -}}
{{- $rc := .Values.registryCredentials -}}
{{- if $rc.providers }}
{{- range $rc.providers }}
- --registry-credential-provider={{ . }}
{{- end }}
{{- else }}
- --registry-credential-provider=none
{{- end }}
{{- range $provider := list "ecr" "gcp" "acr" }}
{{- range (index $rc.extraHosts $provider) }}
- --registry-credential-host={{ $provider }}={{ . }}
{{- end }}
{{- end }}
{{- with .Values.registryRateLimits }}
{{- if .requestsPerMinute }}
- --registry-requests-per-minute={{ int64 .requestsPerMinute }}
{{- end }}
{{- range $host, $n := .perHost }}
- --registry-request-budget={{ $host }}={{ int64 $n }}
{{- end }}
{{- end }}
{{- $m := .Values.registryMirrors }}
{{- if $m.containerd }}
- --registry-mirror-config=/etc/sigil/mirrors/containerd
{{- end }}
{{- if $m.crio }}
- --registry-mirror-config=/etc/sigil/mirrors/registries.conf
{{- end }}
{{- range $m.rules }}
- --registry-mirror={{ . }}
{{- end }}
{{- end -}}

{{/* The mirrors' ConfigMap: CRI-O's registries.conf and containerd's hosts.toml files. */}}
{{- define "sigil.registryMirrorsConfigMap" -}}sigil-registry-mirrors{{- end -}}

{{/* Whether the mirrors' ConfigMap is made and mounted. */}}
{{- define "sigil.registryMirrorFiles" -}}
{{- if or .Values.registryMirrors.containerd .Values.registryMirrors.crio }}true{{ end }}
{{- end -}}

{{/* The GCP credential configuration's ConfigMap. */}}
{{- define "sigil.gcpCredentialsConfigMap" -}}sigil-gcp-credentials{{- end -}}

{{/*
The cloud identity's environment, as each cloud's webhook injects it
(registryCredentials.aws/azure/gcp), then registryCredentials.env.
*/}}
{{- define "sigil.registryCredentialEnv" -}}
{{- $rc := .Values.registryCredentials -}}
{{- if $rc.aws.roleArn }}
- name: AWS_ROLE_ARN
  value: {{ $rc.aws.roleArn | quote }}
- name: AWS_WEB_IDENTITY_TOKEN_FILE
  value: /var/run/secrets/eks.amazonaws.com/serviceaccount/token
- name: AWS_STS_REGIONAL_ENDPOINTS
  value: regional
{{- end }}
{{- if $rc.aws.podIdentity }}
- name: AWS_CONTAINER_CREDENTIALS_FULL_URI
  value: {{ $rc.aws.podIdentityEndpoint | quote }}
- name: AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
  value: /var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token
{{- end }}
{{- if $rc.aws.region }}
- name: AWS_REGION
  value: {{ $rc.aws.region | quote }}
- name: AWS_DEFAULT_REGION
  value: {{ $rc.aws.region | quote }}
{{- end }}
{{- if $rc.azure.clientId }}
- name: AZURE_CLIENT_ID
  value: {{ $rc.azure.clientId | quote }}
- name: AZURE_TENANT_ID
  value: {{ $rc.azure.tenantId | quote }}
- name: AZURE_FEDERATED_TOKEN_FILE
  value: /var/run/secrets/azure/tokens/azure-identity-token
- name: AZURE_AUTHORITY_HOST
  value: {{ $rc.azure.authorityHost | quote }}
{{- end }}
{{- if $rc.gcp.credentialConfig }}
- name: GOOGLE_APPLICATION_CREDENTIALS
  value: /etc/sigil/gcp/credentials.json
{{- end }}
{{- with $rc.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Mounts of the cloud identity's tokens and files, and of the mirrors' files. */}}
{{- define "sigil.registryAccessMounts" -}}
{{- $rc := .Values.registryCredentials -}}
{{- if include "sigil.registryMirrorFiles" . }}
- name: registry-mirrors
  mountPath: /etc/sigil/mirrors
  readOnly: true
{{- end }}
{{- if $rc.aws.roleArn }}
- name: aws-iam-token
  mountPath: /var/run/secrets/eks.amazonaws.com/serviceaccount
  readOnly: true
{{- end }}
{{- if $rc.aws.podIdentity }}
- name: eks-pod-identity-token
  mountPath: /var/run/secrets/pods.eks.amazonaws.com/serviceaccount
  readOnly: true
{{- end }}
{{- if $rc.azure.clientId }}
- name: azure-identity-token
  mountPath: /var/run/secrets/azure/tokens
  readOnly: true
{{- end }}
{{- if $rc.gcp.credentialConfig }}
- name: gcp-credentials
  mountPath: /etc/sigil/gcp
  readOnly: true
- name: gcp-token
  mountPath: /var/run/secrets/sigil/gcp
  readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes of the cloud identity's tokens (projected ServiceAccount tokens) and files, and of the mirrors' files. */}}
{{- define "sigil.registryAccessVolumes" -}}
{{- $rc := .Values.registryCredentials -}}
{{- if include "sigil.registryMirrorFiles" . }}
- name: registry-mirrors
  configMap:
    name: {{ include "sigil.registryMirrorsConfigMap" . }}
    items:
      {{- if .Values.registryMirrors.crio }}
      - key: registries.conf
        path: registries.conf
      {{- end }}
      {{- range $i, $ns := keys .Values.registryMirrors.containerd | sortAlpha }}
      - key: containerd-{{ $i }}
        path: containerd/{{ $ns }}/hosts.toml
      {{- end }}
{{- end }}
{{- if $rc.aws.roleArn }}
- name: aws-iam-token
  projected:
    sources:
      - serviceAccountToken:
          audience: sts.amazonaws.com
          expirationSeconds: {{ int64 $rc.tokenExpirationSeconds }}
          path: token
{{- end }}
{{- if $rc.aws.podIdentity }}
- name: eks-pod-identity-token
  projected:
    sources:
      - serviceAccountToken:
          audience: pods.eks.amazonaws.com
          expirationSeconds: {{ int64 $rc.tokenExpirationSeconds }}
          path: eks-pod-identity-token
{{- end }}
{{- if $rc.azure.clientId }}
- name: azure-identity-token
  projected:
    sources:
      - serviceAccountToken:
          audience: api://AzureADTokenExchange
          expirationSeconds: {{ int64 $rc.tokenExpirationSeconds }}
          path: azure-identity-token
{{- end }}
{{- if $rc.gcp.credentialConfig }}
- name: gcp-credentials
  configMap:
    name: {{ include "sigil.gcpCredentialsConfigMap" . }}
- name: gcp-token
  projected:
    sources:
      - serviceAccountToken:
          audience: {{ $rc.gcp.audience | quote }}
          expirationSeconds: {{ int64 $rc.tokenExpirationSeconds }}
          path: token
{{- end }}
{{- end -}}

{{/* The mirrors' ConfigMap, made by whichever judging component the chart deploys first. */}}
{{- define "sigil.registryMirrorsConfigMapObject" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "sigil.registryMirrorsConfigMap" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "sigil.labels" . | nindent 4 }}
data:
  {{- if .Values.registryMirrors.crio }}
  registries.conf: |
    {{- .Values.registryMirrors.crio | trim | nindent 4 }}
  {{- end }}
  {{- range $i, $ns := keys .Values.registryMirrors.containerd | sortAlpha }}
  containerd-{{ $i }}: |
    {{- index $.Values.registryMirrors.containerd $ns | trim | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* The shared cache's in-chart server and the Secret the chart makes for it. */}}
{{- define "sigil.sharedCacheName" -}}sigil-shared-cache{{- end -}}

{{/*
The shared cache's URL: sharedCache.url, else the in-chart server's Service
when sharedCache.deploy is true, else "" (no shared cache).
*/}}
{{- define "sigil.sharedCacheURL" -}}
{{- if and .Values.sharedCache.url .Values.sharedCache.deploy -}}
{{- fail "sharedCache.url and sharedCache.deploy both set: give url for a server you run, or deploy: true for the in-chart one" -}}
{{- else if .Values.sharedCache.url -}}
{{- .Values.sharedCache.url -}}
{{- else if .Values.sharedCache.deploy -}}
redis://{{ include "sigil.sharedCacheName" . }}.{{ .Release.Namespace }}.svc:6379
{{- end -}}
{{- end -}}

{{/* The Secret holding the MAC key (and password): existingSecret or the chart's. */}}
{{- define "sigil.sharedCacheSecret" -}}
{{- .Values.sharedCache.existingSecret | default (include "sigil.sharedCacheName" .) -}}
{{- end -}}

{{/* The password's key in that Secret, or "" when the server takes none. */}}
{{- define "sigil.sharedCachePasswordKey" -}}
{{- if .Values.sharedCache.existingSecret -}}
{{- if and .Values.sharedCache.deploy (not .Values.sharedCache.passwordKey) -}}
{{- fail "sharedCache.deploy with sharedCache.existingSecret needs sharedCache.passwordKey: the key of the in-chart server's password in that Secret" -}}
{{- end -}}
{{- .Values.sharedCache.passwordKey -}}
{{- else if .Values.sharedCache.deploy -}}
password
{{- end -}}
{{- end -}}

{{/* The judging components' shared cache flags. */}}
{{- define "sigil.sharedCacheArgs" -}}
{{- with include "sigil.sharedCacheURL" . }}
- --shared-cache-url={{ . }}
- --shared-cache-key-file=/etc/sigil/shared-cache/{{ $.Values.sharedCache.macKeyKey }}
{{- with include "sigil.sharedCachePasswordKey" $ }}
- --shared-cache-password-file=/etc/sigil/shared-cache/{{ . }}
{{- end }}
- --shared-cache-wait-ms={{ int64 $.Values.sharedCache.waitMilliseconds }}
{{- end }}
{{- end -}}

{{- define "sigil.sharedCacheMounts" -}}
{{- if include "sigil.sharedCacheURL" . }}
- name: shared-cache
  mountPath: /etc/sigil/shared-cache
  readOnly: true
{{- end }}
{{- end -}}

{{- define "sigil.sharedCacheVolumes" -}}
{{- if include "sigil.sharedCacheURL" . }}
- name: shared-cache
  secret:
    secretName: {{ include "sigil.sharedCacheSecret" . }}
{{- end }}
{{- end -}}

{{/*
ImagePolicyExceptions (docs/exceptions.md): "true" when exceptions count in
some namespace (exceptions.namespaces), else "". Off, the webhook and the
audit get no exception flags and no right to read exceptions.
*/}}
{{- define "sigil.exceptionsEnabled" -}}
{{- if .Values.exceptions.namespaces -}}true{{- end -}}
{{- end -}}

{{/* The seconds of a duration written as a sum of d, h, m and s (168h, 7d, 1h30m). */}}
{{- define "sigil.durationSeconds" -}}
{{- $units := dict "d" 86400 "h" 3600 "m" 60 "s" 1 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+[dhms]" . -1 -}}
{{- $unit := regexFind "[dhms]$" . -}}
{{- $total = add $total (mul (trimSuffix $unit . | atoi) (index $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
The exception flags of the webhook and the audit, which both judge: the
namespaces where exceptions count and their longest duration (more than 0,
at most 366 days, as sigil_compile::exception::MAX_ALLOWED_DURATION).
*/}}
{{- define "sigil.exceptionArgs" -}}
{{- if include "sigil.exceptionsEnabled" . }}
{{- $max := include "sigil.durationSeconds" .Values.exceptions.maxDuration | int64 -}}
{{- if or (le $max 0) (gt $max 31622400) -}}
{{- fail (printf "exceptions.maxDuration %s: an exception may run more than 0 and at most 366d after its creation" .Values.exceptions.maxDuration) -}}
{{- end -}}
{{- range .Values.exceptions.namespaces }}
- --exception-namespace={{ . }}
{{- end }}
- --exception-max-duration={{ .Values.exceptions.maxDuration }}
{{- end }}
{{- end -}}

{{- define "sigil.exceptionEditorName" -}}sigil-exception-editor{{- end -}}
{{- define "sigil.exceptionReaderName" -}}sigil-exception-reader{{- end -}}
