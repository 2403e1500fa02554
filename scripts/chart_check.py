#!/usr/bin/env python3
"""Assertions on one `helm template` rendering of charts/sigil.

Called by scripts/chart-check.sh for every charts/sigil/ci/*-values.yaml:

    chart_check.py check RENDERED.yaml VALUES.yaml NAMESPACE [--help-dir DIR]
    chart_check.py self-test RENDERED.yaml VALUES.yaml NAMESPACE [--help-dir DIR]

    chart_check.py release WORKFLOW.yaml RENDERED.yaml DEPLOY.yaml KREW.yaml
    chart_check.py rules RENDERED.yaml

`check` prints every violated expectation and exits 1 if there is one.
`release` checks that the image tag the release workflow pushes for a tag
v<appVersion> is the image the chart renders by default and deploy/sigil.yaml
names, and that the krew manifest has an archive for every platform the
workflow builds (then breaks each input on purpose, to show it can fail).
`self-test` breaks a correct rendering in known ways and exits 1 unless the
checker notices each break: proof that the assertions can fail.
The expected values come from the chart's values.yaml overlaid with the
case's file, so a case that changes a value is checked against that value.
"""

import base64
import copy
import json
import os
import re
import sys

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("chart_check.py needs PyYAML: python3 -m pip install pyyaml")

CHART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "charts", "sigil")
# The release workflow's steps (its `image` command runs `make image PUSH=`).
RELEASE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "release.sh")
WEBHOOK_RESOURCES = {
    ("", "pods"), ("", "pods/ephemeralcontainers"), ("", "replicationcontrollers"),
    ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
    ("apps", "daemonsets"), ("batch", "jobs"), ("batch", "cronjobs"),
}
CLUSTER_SCOPED = {
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "TrustRoot",
    "Provider", "ConstraintTemplate", "SigilVerifiedImages",
}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"}
# The policy snapshot's shard Secrets (sigil_api::snapshot::stored::all_shards).
SNAPSHOT_SHARDS = [f"sigil-policy-snapshot-{s}{i}" for s in "ab" for i in range(1, 8)]
# What the webhook and the audit may do with Secrets: read and watch the
# snapshot's main Secret, read its shards.
SNAPSHOT_READER_RULES = [
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["sigil-policy-snapshot"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": SNAPSHOT_SHARDS, "verbs": ["get"]},
]


def merge(base, over):
    """Helm's values overlay: maps merge, everything else replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base.get(k), v) if k in base else v
        return out
    return over


def load_values(case_file):
    with open(os.path.join(CHART, "values.yaml"), encoding="utf-8") as f:
        values = yaml.safe_load(f)
    with open(case_file, encoding="utf-8") as f:
        case = yaml.safe_load(f) or {}
    return merge(values, case)


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(docs, kind, name=None):
    return [d for d in docs if d.get("kind") == kind
            and (name is None or d["metadata"]["name"] == name)]


def one(docs, kind, name, errors):
    found = find(docs, kind, name)
    if len(found) != 1:
        errors.append(f"expected exactly one {kind} {name}, found {len(found)}")
        return None
    return found[0]


def pod_spec(workload):
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def containers(workload):
    spec = pod_spec(workload)
    return spec.get("initContainers", []) + spec.get("containers", [])


def args_of(workload):
    """Flags as {name: [values]} of the first container."""
    out = {}
    for arg in containers(workload)[0].get("args", []):
        name, _, value = str(arg).partition("=")
        out.setdefault(name, []).append(value)
    return out


ID_FIELDS = ("runAsUser", "runAsGroup", "fsGroup")


def check_ids(docs, values, errors):
    """securityContext.fixedIds: 65532 on every pod and container (`true`, or
    `auto` where the API serves no security.openshift.io, as in `helm
    template`), or no ID the chart chose (`false`: the platform assigns
    them, as OpenShift's restricted-v2 does); `pod` and `container` are
    merged over either."""
    sc = values["securityContext"]
    fixed = sc["fixedIds"] in (True, "auto")
    for w in (d for d in docs if d["kind"] in WORKLOADS):
        where = f"{w['kind']} {w['metadata']['name']}"
        contexts = [("pod", pod_spec(w).get("securityContext", {}), sc["pod"], ID_FIELDS)]
        contexts += [(f"container {c['name']}", c.get("securityContext", {}), sc["container"],
                      ID_FIELDS[:2]) for c in containers(w)]
        for what, got, extra, fields in contexts:
            for field in fields:
                want = extra.get(field, 65532 if fixed else None)
                if got.get(field) != want:
                    errors.append(f"{where} {what}: {field} is {got.get(field)}, want {want} "
                                  f"(securityContext.fixedIds={sc['fixedIds']})")
            for field, value in extra.items():
                if got.get(field) != value:
                    errors.append(f"{where} {what}: securityContext.{field} {value!r} was not merged")


def check_hardening(docs, errors):
    for w in (d for d in docs if d["kind"] in WORKLOADS):
        where = f"{w['kind']} {w['metadata']['name']}"
        pod = pod_spec(w)
        if not pod.get("securityContext", {}).get("runAsNonRoot"):
            errors.append(f"{where}: pod securityContext.runAsNonRoot is not true")
        for c in containers(w):
            sc = c.get("securityContext", {})
            cw = f"{where} container {c['name']}"
            if sc.get("runAsNonRoot") is not True:
                errors.append(f"{cw}: runAsNonRoot is not true")
            if sc.get("readOnlyRootFilesystem") is not True:
                errors.append(f"{cw}: readOnlyRootFilesystem is not true")
            if sc.get("allowPrivilegeEscalation") is not False:
                errors.append(f"{cw}: allowPrivilegeEscalation is not false")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                errors.append(f"{cw}: capabilities do not drop ALL")
            if sc.get("capabilities", {}).get("add"):
                errors.append(f"{cw}: capabilities are added")
            if sc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
                errors.append(f"{cw}: seccompProfile is not RuntimeDefault")
            res = c.get("resources", {})
            if not res.get("requests") or not res.get("limits"):
                errors.append(f"{cw}: resources need both requests and limits")
            if w["metadata"]["name"] == "sigil-shared-cache":
                # The in-chart Valkey/Redis: no HTTP; probed on its port.
                for probe in ("livenessProbe", "readinessProbe"):
                    if c.get(probe, {}).get("tcpSocket", {}).get("port") != "redis":
                        errors.append(f"{cw}: {probe} is not a TCP probe of the redis port")
                continue
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                got = c.get(probe, {}).get("httpGet", {})
                if got.get("path") != path or got.get("port") != "metrics":
                    errors.append(f"{cw}: {probe} is not GET {path} on the metrics port")


def check_namespaces(docs, ns, errors):
    for d in docs:
        meta = d["metadata"]
        if d["kind"] in CLUSTER_SCOPED:
            if "namespace" in meta:
                errors.append(f"{d['kind']} {meta['name']} is cluster-scoped but has a namespace")
        elif (d["kind"], meta["name"]) in (("RoleBinding", "sigil-webhook-pull-secrets"),
                                           ("RoleBinding", "sigil-audit-pull-secrets"),
                                           ("RoleBinding", "sigil-controller-imagepolicy-references")):
            # One per pullSecretNamespaces (check_pull_secrets, check_audit)
            # or imagePolicies.referenceNamespaces entry
            # (check_image_policy_references).
            continue
        elif meta.get("namespace") != ns:
            errors.append(f"{d['kind']} {meta['name']} is in {meta.get('namespace')!r}, not {ns!r}")


def check_services(docs, errors):
    """Every Service selects some workload's pods, on ports they declare."""
    pods = [(pod_spec(w), w["spec"]["template"]["metadata"]["labels"])
            for w in find(docs, "Deployment")]
    for svc in find(docs, "Service"):
        sel = svc["spec"]["selector"]
        matches = [p for p, labels in pods if all(labels.get(k) == v for k, v in sel.items())]
        if not matches:
            errors.append(f"Service {svc['metadata']['name']} selects no Deployment's pods")
            continue
        declared = {p["name"] for c in matches[0]["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            if port["targetPort"] not in declared:
                errors.append(f"Service {svc['metadata']['name']}: targetPort {port['targetPort']} is not a container port")


def check_webhook_configs(docs, values, ns, errors):
    w = values["webhook"]
    excluded = {"kube-system", ns, *values.get("excludeNamespaces", [])}
    kinds = [("ValidatingWebhookConfiguration", "/validate")]
    mutating = find(docs, "MutatingWebhookConfiguration")
    if w["pin"] == "off":
        if mutating:
            errors.append("pin=off still renders a MutatingWebhookConfiguration")
    else:
        kinds.append(("MutatingWebhookConfiguration", "/mutate"))
    for kind, path in kinds:
        cfg = one(docs, kind, "sigil-webhook", errors)
        if cfg is None:
            continue
        annotations = cfg["metadata"].get("annotations") or {}
        inject = annotations.get("cert-manager.io/inject-ca-from")
        if values["certManager"]["enabled"]:
            if inject != f"{ns}/sigil-webhook":
                errors.append(f"{kind}: cert-manager.io/inject-ca-from is {inject!r}, want {ns}/sigil-webhook")
        elif inject is not None:
            errors.append(f"{kind}: cert-manager annotation without certManager.enabled")
        serve_pc = values["policyController"]["serve"] and values["namespaceSelection"] == "opt-in"
        pc_entries = [h["name"] for h in cfg["webhooks"] if h["name"].startswith(PC_ENTRY)]
        if serve_pc != bool(pc_entries) or len(cfg["webhooks"]) != 1 + len(pc_entries):
            errors.append(f"{kind}: webhooks {[h['name'] for h in cfg['webhooks']]}: want sigil's entry"
                          + (f" and one {PC_ENTRY}* entry" if serve_pc else " only"))
        for hook in cfg["webhooks"]:
            where = f"{kind} webhook {hook['name']}"
            for field, want in (("failurePolicy", w["failurePolicy"]), ("sideEffects", "None"),
                                ("admissionReviewVersions", ["v1"]),
                                ("timeoutSeconds", w["timeoutSeconds"]),
                                ("matchPolicy", "Equivalent")):
                if hook.get(field) != want:
                    errors.append(f"{where}: {field} is {hook.get(field)!r}, want {want!r}")
            # Images another mutating webhook adds or rewrites after sigil's
            # are pinned on reinvocation; without it they reach /validate as
            # tags and are denied.
            if kind == "MutatingWebhookConfiguration" and hook.get("reinvocationPolicy") != "IfNeeded":
                errors.append(f"{where}: reinvocationPolicy is {hook.get('reinvocationPolicy')!r}, want 'IfNeeded'")
            exprs = hook.get("namespaceSelector", {}).get("matchExpressions", [])
            names = [e for e in exprs if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"]
            if not names or not excluded <= set(names[0]["values"]):
                errors.append(f"{where}: namespaceSelector does not exclude {sorted(excluded)}")
            if values["namespaceSelection"] == "opt-out":
                wanted = [{"key": "policy.sigil.dev/exclude", "operator": "NotIn", "values": ["true"]}]
            elif hook["name"].startswith(PC_ENTRY):
                # Namespaces opted in with policy-controller's label only, so
                # none is judged by both entries.
                wanted = [{"key": "policy.sigstore.dev/include", "operator": "In", "values": ["true"]},
                          {"key": "policy.sigil.dev/include", "operator": "NotIn", "values": ["true"]}]
            else:
                wanted = [{"key": "policy.sigil.dev/include", "operator": "In", "values": ["true"]}]
            for want in wanted:
                if want not in exprs:
                    errors.append(f"{where}: namespaceSelector lacks {want}")
            for extra in w["namespaceSelectorExpressions"]:
                if extra not in exprs:
                    errors.append(f"{where}: namespaceSelector lacks webhook.namespaceSelectorExpressions {extra}")
            for field, want in (("objectSelector", w["objectSelector"]), ("matchConditions", w["matchConditions"])):
                if (hook.get(field) or type(want)()) != want:
                    errors.append(f"{where}: {field} is {hook.get(field)!r}, want webhook.{field} {want!r}")
            covered = set()
            for rule in hook.get("rules", []):
                if sorted(rule["operations"]) != ["CREATE", "UPDATE"]:
                    errors.append(f"{where}: rule {rule['resources']} operations {rule['operations']}")
                covered |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
            if covered != WEBHOOK_RESOURCES:
                errors.append(f"{where}: rules cover {sorted(covered)}, want {sorted(WEBHOOK_RESOURCES)}")
            client = hook["clientConfig"]
            if w["url"]:
                want_url = w["url"].rstrip("/") + path
                if client.get("url") != want_url or "service" in client:
                    errors.append(f"{where}: clientConfig {client}, want url {want_url} and no service")
                if w["caBundle"] and not client.get("caBundle"):
                    errors.append(f"{where}: webhook.caBundle is not in clientConfig")
            else:
                svc = client.get("service", {})
                if (svc.get("name"), svc.get("namespace"), svc.get("path"), svc.get("port")) != (
                        "sigil-webhook", ns, path, 443) or "url" in client:
                    errors.append(f"{where}: clientConfig {client}, want service sigil-webhook.{ns}:443{path}")


def check_autoscaling(docs, w, deployment, errors):
    """webhook.replicas, or a HorizontalPodAutoscaler on the webhook's CPU
    that owns the replica count (then no replicas in the Deployment, which
    every upgrade would otherwise reset)."""
    hpa = find(docs, "HorizontalPodAutoscaler")
    a = w["autoscaling"]
    if not a["enabled"]:
        if deployment["spec"].get("replicas") != w["replicas"]:
            errors.append(f"webhook replicas {deployment['spec'].get('replicas')}, want {w['replicas']}")
        if hpa:
            errors.append("webhook.autoscaling.enabled=false still renders a HorizontalPodAutoscaler")
        return
    if "replicas" in deployment["spec"]:
        errors.append("webhook.autoscaling.enabled but the Deployment sets replicas (each upgrade would reset the autoscaler's count)")
    if len(hpa) != 1:
        errors.append(f"webhook.autoscaling.enabled needs one HorizontalPodAutoscaler, found {len(hpa)}")
        return
    h = hpa[0]
    spec = h["spec"]
    target = spec.get("scaleTargetRef", {})
    if h.get("apiVersion") != "autoscaling/v2" or h["metadata"]["name"] != "sigil-webhook" or \
            (target.get("apiVersion"), target.get("kind"), target.get("name")) != ("apps/v1", "Deployment", "sigil-webhook"):
        errors.append(f"the HorizontalPodAutoscaler {h['metadata']['name']} ({h.get('apiVersion')}) does not scale Deployment sigil-webhook: {target}")
    if (spec.get("minReplicas"), spec.get("maxReplicas")) != (a["minReplicas"], a["maxReplicas"]):
        errors.append(f"HorizontalPodAutoscaler replicas {spec.get('minReplicas')}-{spec.get('maxReplicas')}, want {a['minReplicas']}-{a['maxReplicas']}")
    cpu = [m["resource"]["target"] for m in spec.get("metrics", [])
           if m.get("type") == "Resource" and m.get("resource", {}).get("name") == "cpu"]
    if cpu != [{"type": "Utilization", "averageUtilization": a["targetCPUUtilizationPercentage"]}]:
        errors.append(f"HorizontalPodAutoscaler CPU target {cpu}, want {a['targetCPUUtilizationPercentage']}% utilization")


def check_webhook(docs, values, ns, errors):
    w = values["webhook"]
    deploy = find(docs, "Deployment", "sigil-webhook")
    if not w["deploy"]:
        for kind in ("Deployment", "Service", "PodDisruptionBudget"):
            if find(docs, kind, "sigil-webhook"):
                errors.append(f"webhook.deploy=false still renders {kind} sigil-webhook")
        # An out-of-cluster webhook runs as the same ServiceAccount.
        one(docs, "ServiceAccount", "sigil-webhook", errors)
        one(docs, "Role", "sigil-webhook", errors)
        return
    if len(deploy) != 1:
        errors.append("no webhook Deployment")
        return
    d = deploy[0]
    check_autoscaling(docs, w, d, errors)
    pod = pod_spec(d)
    if not w["affinity"]:
        terms = pod.get("affinity", {}).get("podAntiAffinity", {}).get(
            "preferredDuringSchedulingIgnoredDuringExecution", [])
        if not any(t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname" for t in terms):
            errors.append("webhook has no preferred pod anti-affinity by hostname")
    if w["podDisruptionBudget"]["enabled"]:
        pdb = one(docs, "PodDisruptionBudget", "sigil-webhook", errors)
        if pdb and pdb["spec"].get("maxUnavailable") != w["podDisruptionBudget"]["maxUnavailable"]:
            errors.append("webhook PDB maxUnavailable differs from the value")
    svc = one(docs, "Service", "sigil-webhook", errors)
    want_ports = [(443, "https")]
    if values["gatekeeper"]["enabled"]:
        want_ports.append((values["gatekeeper"]["port"], "gatekeeper"))
    if svc and [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] != want_ports:
        errors.append(f"webhook Service ports {svc['spec']['ports']}, want {want_ports}")
    ports = {p["name"]: p["containerPort"] for p in pod["containers"][0]["ports"]}
    if ports.get("https") != 8443:
        errors.append(f"webhook container port https is {ports.get('https')}, want 8443")
    args = args_of(d)
    want = {
        "--timeout-seconds": [str(w["timeoutSeconds"])],
        "--namespace": [ns],
        "--policy-snapshot-secret": [f"{ns}/sigil-policy-snapshot"],
        "--no-match": [values["noMatchPolicy"]],
        "--pin": [w["pin"]],
        "--log-format": [values["logFormat"]],
        "--verdict-ttl-seconds": [str(w["cache"]["verdictTTLSeconds"])],
        "--negative-ttl-seconds": [str(w["cache"]["negativeTTLSeconds"])],
        "--digest-ttl-seconds": [str(w["cache"]["digestTTLSeconds"])],
        "--verdict-cache-size": [str(w["cache"]["verdictCacheSize"])],
        "--tls-cert": ["/etc/sigil/tls/tls.crt"],
        "--tls-key": ["/etc/sigil/tls/tls.key"],
        "--connection-max-requests": [str(w["connections"]["maxRequests"])],
        "--connection-max-age-seconds": [str(w["connections"]["maxAgeSeconds"])],
        "--connection-jitter-percent": [str(w["connections"]["jitterPercent"])],
    }
    for flag, value in want.items():
        if args.get(flag) != value:
            errors.append(f"webhook {flag} is {args.get(flag)}, want {value}")
    excluded = set(args.get("--exclude-namespace", []))
    if not {"kube-system", *values.get("excludeNamespaces", [])} <= excluded:
        errors.append(f"webhook --exclude-namespace {sorted(excluded)} misses kube-system or excludeNamespaces")
    tls = [v for v in pod.get("volumes", []) if v["name"] == "tls"]
    if not tls or tls[0].get("secret", {}).get("secretName") != "sigil-webhook-tls" or \
            sorted(i["key"] for i in tls[0]["secret"].get("items", [])) != ["tls.crt", "tls.key"]:
        errors.append("webhook does not mount exactly tls.crt and tls.key of Secret sigil-webhook-tls")
    check_pull_secrets(docs, w, args, ns, errors)
    # Registry access (SSRF): the flags say exactly what the values say, so
    # the chart's defaults allow no refused address and no extra host.
    access = values["registryAccess"]
    for flag, key in (("--allow-registry", "allowHosts"),
                      ("--allow-registry-address", "allowAddresses"),
                      ("--deny-registry-address", "denyAddresses")):
        if args.get(flag, []) != list(access[key]):
            errors.append(f"webhook {flag} is {args.get(flag, [])}, want registryAccess.{key} {access[key]}")
    if ("--allow-unpinned" in args) != bool(w["allowUnpinned"]):
        errors.append(f"webhook --allow-unpinned passed: {'--allow-unpinned' in args}, webhook.allowUnpinned: {w['allowUnpinned']}")
    snapshot_role = one(docs, "Role", "sigil-webhook", errors)
    if snapshot_role and snapshot_role["rules"] != SNAPSHOT_READER_RULES:
        errors.append(f"webhook Role is wider than the snapshot Secrets: {snapshot_role['rules']}")
    # Registry CA: ConfigMap mounted where --registry-ca-file points.
    ca = values["registryCABundle"]
    if ca["pem"] or ca["existingConfigMap"]:
        mount = [m for m in pod["containers"][0].get("volumeMounts", []) if m["name"] == "registry-ca"]
        want_path = f"{mount[0]['mountPath']}/{ca['key']}" if mount else None
        if not mount or args.get("--registry-ca-file") != [want_path]:
            errors.append(f"--registry-ca-file {args.get('--registry-ca-file')} is not the mounted bundle {want_path}")
        cm_name = ca["existingConfigMap"] or "sigil-registry-ca"
        vols = [v for v in pod["volumes"] if v["name"] == "registry-ca"]
        if not vols or vols[0]["configMap"]["name"] != cm_name:
            errors.append(f"registry-ca volume is not ConfigMap {cm_name}")
        if ca["pem"] and not find(docs, "ConfigMap", cm_name):
            errors.append(f"registryCABundle.pem set but no ConfigMap {cm_name}")
    elif "--registry-ca-file" in args:
        errors.append("--registry-ca-file without registryCABundle")


def check_pull_secrets(docs, w, args, ns, errors):
    """Pull-secret access: `get` only, bound cluster-wide or exactly in the
    listed namespaces plus the release namespace, with matching flags."""
    role = find(docs, "ClusterRole", "sigil-webhook-pull-secrets")
    cluster = find(docs, "ClusterRoleBinding", "sigil-webhook-pull-secrets")
    local = find(docs, "RoleBinding", "sigil-webhook-pull-secrets")
    listed = w["pullSecretNamespaces"]
    if not w["pullSecrets"]:
        if role or cluster or local or "--pull-secrets" in args or "--pull-secret-namespace" in args:
            errors.append("webhook.pullSecrets=false still grants or passes pull-secret access")
        return
    if args.get("--pull-secrets") != ["kube"]:
        errors.append("webhook.pullSecrets=true but no --pull-secrets=kube")
    if not role or role[0]["rules"] != [{"apiGroups": [""], "resources": ["secrets", "serviceaccounts"], "verbs": ["get"]}]:
        errors.append("webhook.pullSecrets=true needs a ClusterRole with only get on secrets and serviceaccounts")
    subject = [{"kind": "ServiceAccount", "name": "sigil-webhook", "namespace": ns}]
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sigil-webhook-pull-secrets"}
    for b in cluster + local:
        if b["roleRef"] != ref or b["subjects"] != subject:
            errors.append(f"{b['kind']} {b['metadata'].get('namespace', '')}/sigil-webhook-pull-secrets binds {b['roleRef']} to {b['subjects']}")
    if listed:
        if cluster:
            errors.append("webhook.pullSecretNamespaces is set but a ClusterRoleBinding lets the webhook read secrets everywhere")
        got = sorted(b["metadata"]["namespace"] for b in local)
        want = sorted(set(listed) | {ns})
        if got != want:
            errors.append(f"pull-secret RoleBindings in {got}, want exactly {want}")
        if sorted(args.get("--pull-secret-namespace", [])) != sorted(listed):
            errors.append(f"webhook --pull-secret-namespace {args.get('--pull-secret-namespace')}, want {listed}")
    else:
        if len(cluster) != 1 or local:
            errors.append("webhook.pullSecrets without pullSecretNamespaces needs exactly one ClusterRoleBinding and no RoleBinding")
        if "--pull-secret-namespace" in args:
            errors.append("--pull-secret-namespace passed without webhook.pullSecretNamespaces")


# Where each cloud's webhook mounts the token registryCredentials mounts:
# value -> (volume, mount path, audience (None: the value's), env names).
CLOUD_TOKENS = {
    "aws.roleArn": ("aws-iam-token", "/var/run/secrets/eks.amazonaws.com/serviceaccount",
                    "sts.amazonaws.com", {"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"}),
    "aws.podIdentity": ("eks-pod-identity-token", "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount",
                        "pods.eks.amazonaws.com",
                        {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"}),
    "azure.clientId": ("azure-identity-token", "/var/run/secrets/azure/tokens", "api://AzureADTokenExchange",
                       {"AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_AUTHORITY_HOST"}),
    "gcp.credentialConfig": ("gcp-token", "/var/run/secrets/sigil/gcp", None, {"GOOGLE_APPLICATION_CREDENTIALS"}),
}


def check_registry_credentials(docs, values, errors):
    """The judging components (webhook, audit) get exactly the providers and
    extra hosts the values name, and each cloud's token where that cloud's
    webhook mounts it, with its audience, the files its variables name."""
    rc = values["registryCredentials"]
    want_providers = list(rc["providers"]) or ["none"]
    want_hosts = [f"{p}={h}" for p in ("ecr", "gcp", "acr") for h in rc["extraHosts"][p]]
    for name in ("sigil-webhook", "sigil-audit"):
        deploy = find(docs, "Deployment", name)
        if not deploy:
            continue
        args = args_of(deploy[0])
        if args.get("--registry-credential-provider") != want_providers:
            errors.append(f"{name} --registry-credential-provider is {args.get('--registry-credential-provider')}, want {want_providers}")
        if args.get("--registry-credential-host", []) != want_hosts:
            errors.append(f"{name} --registry-credential-host is {args.get('--registry-credential-host', [])}, want {want_hosts}")
        pod = pod_spec(deploy[0])
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for key, (volume, path, audience, names) in CLOUD_TOKENS.items():
            section, field = key.split(".")
            on = bool(rc[section][field])
            if not on:
                if volume in volumes or names & set(env):
                    errors.append(f"{name} mounts {volume} or sets {sorted(names & set(env))} without registryCredentials.{key}")
                continue
            if mounts.get(volume) != path:
                errors.append(f"{name} mounts {volume} at {mounts.get(volume)}, want {path} (where the cloud's webhook mounts it)")
            sources = volumes.get(volume, {}).get("projected", {}).get("sources", [])
            token = [x["serviceAccountToken"] for x in sources if "serviceAccountToken" in x]
            want_audience = audience or rc["gcp"]["audience"]
            if not token or token[0].get("audience") != want_audience:
                errors.append(f"{name} volume {volume} is not a projected token for audience {want_audience}")
            if not names <= set(env):
                errors.append(f"{name} misses {sorted(names - set(env))} for registryCredentials.{key}")
            for var, value in env.items():
                if var.endswith("_FILE") and var in names and not (value or "").startswith(path + "/"):
                    errors.append(f"{name} {var}={value} is not in the {volume} mount {path}")
        if rc["gcp"]["credentialConfig"]:
            if mounts.get("gcp-credentials") != "/etc/sigil/gcp" or \
                    env.get("GOOGLE_APPLICATION_CREDENTIALS") != "/etc/sigil/gcp/credentials.json":
                errors.append(f"{name} does not mount the GCP credential configuration where GOOGLE_APPLICATION_CREDENTIALS points")
        if rc["aws"]["roleArn"] and env.get("AWS_ROLE_ARN") != rc["aws"]["roleArn"]:
            errors.append(f"{name} AWS_ROLE_ARN is {env.get('AWS_ROLE_ARN')}, want {rc['aws']['roleArn']}")
        for extra in rc["env"]:
            if env.get(extra["name"]) != extra.get("value"):
                errors.append(f"{name} does not set {extra['name']} from registryCredentials.env")
    check_registry_mirrors(docs, values, errors)
    limits = values["registryRateLimits"]
    want_rpm = [str(limits["requestsPerMinute"])] if limits["requestsPerMinute"] else []
    want_budgets = sorted(f"{h}={n}" for h, n in limits["perHost"].items())
    for name in ("sigil-webhook", "sigil-audit"):
        for d in find(docs, "Deployment", name):
            args = args_of(d)
            if args.get("--registry-requests-per-minute", []) != want_rpm or \
                    sorted(args.get("--registry-request-budget", [])) != want_budgets:
                errors.append(f"{name}'s request budget flags do not follow registryRateLimits")
    config = find(docs, "ConfigMap", "sigil-gcp-credentials")
    if bool(config) != bool(rc["gcp"]["credentialConfig"]):
        errors.append("ConfigMap sigil-gcp-credentials does not follow registryCredentials.gcp.credentialConfig")


def check_shared_cache(docs, values, ns, errors):
    """The webhook and the audit share the cache sharedCache names (the
    in-chart server's Service with deploy), with the MAC key (and password)
    from the Secret given or the one the chart makes; the in-chart server
    keeps nothing on disk and asks for the password."""
    sc = values["sharedCache"]
    url = sc["url"] or (f"redis://sigil-shared-cache.{ns}.svc:6379" if sc["deploy"] else "")
    secret = sc["existingSecret"] or "sigil-shared-cache"
    password_key = sc["passwordKey"] if sc["existingSecret"] else ("password" if sc["deploy"] else "")
    for name in ("sigil-webhook", "sigil-audit"):
        deploy = find(docs, "Deployment", name)
        if not deploy:
            continue
        args = args_of(deploy[0])
        want = {
            "--shared-cache-url": [url] if url else [],
            "--shared-cache-key-file": [f"/etc/sigil/shared-cache/{sc['macKeyKey']}"] if url else [],
            "--shared-cache-password-file": [f"/etc/sigil/shared-cache/{password_key}"] if url and password_key else [],
            "--shared-cache-wait-ms": [str(sc["waitMilliseconds"])] if url else [],
        }
        for flag, values_ in want.items():
            if args.get(flag, []) != values_:
                errors.append(f"{name} {flag} is {args.get(flag, [])}, want {values_}")
        pod = pod_spec(deploy[0])
        mounts = {x["name"]: x["mountPath"] for x in pod["containers"][0].get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        if bool(url) != (mounts.get("shared-cache") == "/etc/sigil/shared-cache"):
            errors.append(f"{name} mounts the shared cache Secret at {mounts.get('shared-cache')} with url={url!r}")
        if url and volumes.get("shared-cache", {}).get("secret", {}).get("secretName") != secret:
            errors.append(f"{name} does not mount Secret {secret} for the shared cache")
    made = find(docs, "Secret", "sigil-shared-cache")
    if bool(made) != bool(url and not sc["existingSecret"]):
        errors.append("Secret sigil-shared-cache does not follow sharedCache (made exactly when no existingSecret is given)")
    elif made:
        data = made[0].get("data", {})
        if len(data.get(sc["macKeyKey"], "")) < 44:
            errors.append("Secret sigil-shared-cache holds no MAC key of at least 32 bytes")
        if sc["deploy"] and not data.get("password"):
            errors.append("Secret sigil-shared-cache holds no password for the in-chart server")
    server = find(docs, "Deployment", "sigil-shared-cache")
    if bool(server) != bool(sc["deploy"]):
        errors.append("Deployment sigil-shared-cache does not follow sharedCache.deploy")
    elif server:
        c = pod_spec(server[0])["containers"][0]
        a = [str(x) for x in c.get("args", [])]
        for pair in (["--save", ""], ["--appendonly", "no"], ["--requirepass", "$(SHARED_CACHE_PASSWORD)"]):
            if not any(a[i:i + 2] == pair for i in range(len(a))):
                errors.append(f"Deployment sigil-shared-cache server args lack {pair}")
        ref = c.get("env", [{}])[0].get("valueFrom", {}).get("secretKeyRef", {})
        if ref != {"name": secret, "key": password_key}:
            errors.append(f"Deployment sigil-shared-cache reads its password from {ref}, want {secret}/{password_key}")


def check_registry_mirrors(docs, values, errors):
    """The judging components read the mirrors the values set, in each form,
    from the ConfigMap the chart makes of them."""
    m = values["registryMirrors"]
    files = bool(m["containerd"] or m["crio"])
    want = (["/etc/sigil/mirrors/containerd"] if m["containerd"] else []) + \
        (["/etc/sigil/mirrors/registries.conf"] if m["crio"] else [])
    for name in ("sigil-webhook", "sigil-audit"):
        deploy = find(docs, "Deployment", name)
        if not deploy:
            continue
        args = args_of(deploy[0])
        if args.get("--registry-mirror-config", []) != want:
            errors.append(f"{name} --registry-mirror-config is {args.get('--registry-mirror-config', [])}, want {want}")
        if args.get("--registry-mirror", []) != list(m["rules"]):
            errors.append(f"{name} --registry-mirror is {args.get('--registry-mirror', [])}, want registryMirrors.rules")
        pod = pod_spec(deploy[0])
        mounts = {x["name"]: x["mountPath"] for x in pod["containers"][0].get("volumeMounts", [])}
        if files != (mounts.get("registry-mirrors") == "/etc/sigil/mirrors"):
            errors.append(f"{name} mounts the mirrors at {mounts.get('registry-mirrors')} with files={files}")
        volume = [v for v in pod.get("volumes", []) if v["name"] == "registry-mirrors"]
        paths = sorted(i["path"] for v in volume for i in v["configMap"].get("items", []))
        want_paths = sorted((["registries.conf"] if m["crio"] else []) +
                            [f"containerd/{ns}/hosts.toml" for ns in m["containerd"]])
        if files and paths != want_paths:
            errors.append(f"{name} mounts mirror files {paths}, want {want_paths}")
    config = find(docs, "ConfigMap", "sigil-registry-mirrors")
    if bool(config) != files:
        errors.append("ConfigMap sigil-registry-mirrors does not follow registryMirrors")
    elif config:
        data = config[0].get("data", {})
        for i, ns in enumerate(sorted(m["containerd"])):
            if data.get(f"containerd-{i}", "").strip() != m["containerd"][ns].strip():
                errors.append(f"ConfigMap sigil-registry-mirrors does not hold {ns}'s hosts.toml as given")


def check_controller(docs, values, ns, errors):
    external = values["certManager"]["enabled"] or bool(values["webhook"]["url"])
    check_default_trust_root(docs, values["trustRoot"], errors)
    check_github_trust_root(docs, values["trustRoot"], errors)
    if values["controller"]["deploy"]:
        check_controller_deployment(docs, external, errors)
        check_trust_root_flags(docs, values["trustRoot"], errors)
        check_tenant_bounds(docs, values, errors)
    else:
        for kind, name in (("Deployment", "sigil-controller"), ("Service", "sigil-controller-metrics")):
            if find(docs, kind, name):
                errors.append(f"controller.deploy=false still renders {kind} {name}")
    role = one(docs, "ClusterRole", "sigil-controller", errors)
    if role:
        hooks = [r for r in role["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]
                 and r.get("resourceNames") != [PC_WEBHOOK]]
        # WorkloadKinds' rules are kept in both configurations whatever
        # manages TLS; the caBundle is written through the same grant.
        if len(hooks) != 1 or hooks[0].get("resourceNames") != ["sigil-webhook"] \
                or set(hooks[0]["verbs"]) != {"get", "list", "watch", "update"}:
            errors.append("controller's webhook-configuration access is missing, not limited by name, or not get/list/watch/update")
        sigil_rules = {}
        for r in role["rules"]:
            if "policy.sigil.dev" in r["apiGroups"]:
                for res in r["resources"]:
                    sigil_rules.setdefault(res, set()).update(r["verbs"])
        if not {"get", "list", "watch"} <= sigil_rules.get("workloadkinds", set()) \
                or "patch" not in sigil_rules.get("workloadkinds/status", set()):
            errors.append("controller may not read WorkloadKinds and patch their status")
        for r in role["rules"]:
            if "*" in r["verbs"] or "*" in r["resources"] or "secrets" in r["resources"]:
                errors.append(f"controller ClusterRole rule too wide: {r}")
    nsrole = one(docs, "Role", "sigil-controller", errors)
    if nsrole:
        leases = [r for r in nsrole["rules"] if "leases" in r["resources"]]
        verbs = {v for r in leases for v in r["verbs"]}
        if not {"get", "create", "update"} <= verbs:
            errors.append(f"controller Role lease verbs {sorted(verbs)} lack get/create/update")
        patched = {n for r in nsrole["rules"] if "secrets" in r["resources"] and "patch" in r["verbs"]
                   for n in r.get("resourceNames", ["*"])}
        if "sigil-tuf-state" not in patched or "*" in patched:
            errors.append(f"controller may not patch Secret sigil-tuf-state by name (patch on {sorted(patched)})")
        if not {"sigil-policy-snapshot", *SNAPSHOT_SHARDS} <= patched:
            errors.append(f"controller may not patch every snapshot Secret by name (patch on {sorted(patched)})")
        deleted = {n for r in nsrole["rules"] if "secrets" in r["resources"] and "delete" in r["verbs"]
                    for n in r.get("resourceNames", ["*"])}
        if deleted != set(SNAPSHOT_SHARDS):
            errors.append(f"controller may delete Secrets {sorted(deleted)}, want the snapshot shards only")
    check_image_policy_references(docs, values, ns, errors)


def check_image_policy_references(docs, values, ns, errors):
    """ImagePolicies' Secrets and ConfigMaps: read and watched, only where bound."""
    name = "sigil-controller-imagepolicy-references"
    role = one(docs, "ClusterRole", name, errors)
    want_rules = [{"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get", "list", "watch"]}]
    if role and role["rules"] != want_rules:
        errors.append(f"ClusterRole {name} grants {role['rules']}, want get, list and watch on secrets and configmaps only")
    if find(docs, "ClusterRoleBinding", name):
        errors.append(f"ClusterRole {name} is bound cluster-wide")
    bindings = find(docs, "RoleBinding", name)
    got = sorted(b["metadata"].get("namespace", "") for b in bindings)
    want = sorted(values.get("imagePolicies", {}).get("referenceNamespaces", []))
    if got != want:
        errors.append(f"ImagePolicy reference bindings in {got}, want {want}")
    subject = [{"kind": "ServiceAccount", "name": "sigil-controller", "namespace": ns}]
    for b in bindings:
        if b["roleRef"]["name"] != name or b["subjects"] != subject:
            errors.append(f"RoleBinding {name} binds {b['roleRef']} to {b['subjects']}")


PC_ENTRY = "policy-controller-namespaces."
PC_WEBHOOK = "policy.sigstore.dev"
PC_CRDS = ("clusterimagepolicies.policy.sigstore.dev", "trustroots.policy.sigstore.dev")


def check_policy_controller(docs, values, errors):
    """policyController.serve: the controller flag, the audit flag, RBAC to
    read policy-controller's objects and (by name) its webhook
    configurations, and its CRDs kept on uninstall, with every field kept;
    none of it without the value."""
    pc = values["policyController"]
    serve = pc["serve"]
    controller = find(docs, "Deployment", "sigil-controller")
    if controller and ("--serve-policy-controller-objects" in args_of(controller[0])) != serve:
        errors.append(f"controller --serve-policy-controller-objects does not follow policyController.serve={serve}")
    audit = find(docs, "Deployment", "sigil-audit")
    if audit and ("--policy-controller-namespaces" in args_of(audit[0])) != (serve and values["namespaceSelection"] == "opt-in"):
        errors.append("audit --policy-controller-namespaces does not follow policyController.serve")
    role = find(docs, "ClusterRole", "sigil-controller")
    rules = role[0]["rules"] if role else []
    reads = [r for r in rules if "policy.sigstore.dev" in r["apiGroups"]]
    if serve != bool(reads):
        errors.append(f"controller RBAC on policy.sigstore.dev {reads} does not follow policyController.serve={serve}")
    for r in reads:
        if set(r["verbs"]) - {"get", "list", "watch", "patch"} or \
                ("patch" in r["verbs"] and not all(x.endswith("/status") for x in r["resources"])):
            errors.append(f"controller may do more than read policy-controller's objects and write their status: {r}")
    pc_hooks = [r for r in rules if r.get("resourceNames") == [PC_WEBHOOK]]
    if serve != bool(pc_hooks) or any(r["verbs"] != ["get", "list", "watch"] for r in pc_hooks):
        errors.append(f"controller access to policy-controller's webhook configurations: {pc_hooks}; want get/list/watch by name with serve")
    crds = {c["metadata"]["name"]: c for c in find(docs, "CustomResourceDefinition") if c["metadata"]["name"] in PC_CRDS}
    want_crds = serve and pc["installCRDs"]
    if set(crds) != (set(PC_CRDS) if want_crds else set()):
        errors.append(f"policy-controller CRDs rendered: {sorted(crds)}; want {sorted(PC_CRDS) if want_crds else []}")
    for name, crd in crds.items():
        if (crd["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") != "keep":
            errors.append(f"CRD {name} is not kept on uninstall (helm.sh/resource-policy: keep)")
        for v in crd["spec"]["versions"]:
            spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
            if spec.get("x-kubernetes-preserve-unknown-fields") is not True:
                errors.append(f"CRD {name} {v['name']}: spec fields would be pruned")


def check_trust_root_flags(docs, trust, errors):
    d = find(docs, "Deployment", "sigil-controller")
    if not d:
        return
    args = args_of(d[0])
    if args.get("--sigstore-instance") != [trust["sigstoreInstance"]]:
        errors.append(f"controller --sigstore-instance is {args.get('--sigstore-instance')}, want {trust['sigstoreInstance']}")
    if ("--tuf-offline" in args) != bool(trust["offline"]):
        errors.append(f"controller --tuf-offline given: {'--tuf-offline' in args}, trustRoot.offline: {trust['offline']}")
    mirror = [trust["tufMirror"]] if trust["tufMirror"] and not trust["offline"] else None
    if args.get("--tuf-mirror") != mirror:
        errors.append(f"controller --tuf-mirror is {args.get('--tuf-mirror')}, want {mirror}")
    if args.get("--tuf-state-secret") != ["sigil-tuf-state"]:
        errors.append(f"controller --tuf-state-secret is {args.get('--tuf-state-secret')}")


def check_tenant_bounds(docs, values, errors):
    """What ImagePolicies and KMS references may name, and where the
    controller's own fetches may go: exactly what the values say, so the
    defaults widen nothing."""
    d = find(docs, "Deployment", "sigil-controller")
    if not d:
        return
    args = args_of(d[0])
    access = values["registryAccess"]
    for flag, want, key in (
            ("--image-policy-registry", values["imagePolicies"]["allowedRegistries"],
             "imagePolicies.allowedRegistries"),
            ("--kms-allow-host", values["kms"]["allowHosts"], "kms.allowHosts"),
            ("--allow-address", access["allowAddresses"], "registryAccess.allowAddresses"),
            ("--deny-address", access["denyAddresses"], "registryAccess.denyAddresses")):
        if args.get(flag, []) != list(want):
            errors.append(f"controller {flag} is {args.get(flag, [])}, want {key} {want}")


def check_default_trust_root(docs, trust, errors):
    roots = [r for r in find(docs, "TrustRoot")
             if not (trust["github"]["enabled"] and r["metadata"]["name"] == "github")]
    name = trust["default"]["name"]
    if not name:
        if roots:
            errors.append(f"TrustRoots rendered without trustRoot.default.name: {[r['metadata']['name'] for r in roots]}")
        return
    if len(roots) != 1 or roots[0]["metadata"]["name"] != name:
        errors.append(f"trustRoot.default.name {name} but TrustRoots rendered: {[r['metadata']['name'] for r in roots]}")
        return
    if roots[0]["metadata"].get("annotations", {}).get("policy.sigil.dev/default-trust-root") != "true":
        errors.append(f"TrustRoot {name} is not annotated policy.sigil.dev/default-trust-root: \"true\"")
    if roots[0].get("spec") != trust["default"]["spec"]:
        errors.append(f"TrustRoot {name} spec differs from trustRoot.default.spec")


CHART_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "charts", "sigil")
GITHUB_ROOT = os.path.join(CHART_DIR, "files", "github-tuf-root.json")


def github_chart_root():
    """GitHub's TUF root as GitHub's own trust-policies chart embeds it
    (test data beside the checkout, read at run time), or None without it."""
    shared = os.environ.get("SIGIL_SHARED_DIR") or os.path.join(CHART_DIR, "..", "..", "..", "shared")
    path = os.path.join(shared, "github-trust-policies", "charts", "trust-policies",
                        "templates", "trustroot-github.yaml")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return None
    m = re.search(r"root: \|-\n\s+(\S+)", text)
    return base64.b64decode(m.group(1)) if m else b""


def check_github_trust_root(docs, trust, errors):
    gh = trust["github"]
    roots = [r for r in find(docs, "TrustRoot") if r["metadata"]["name"] == "github"]
    if not gh["enabled"]:
        if roots:
            errors.append("TrustRoot github rendered with trustRoot.github.enabled false")
        return
    if len(roots) != 1:
        errors.append(f"trustRoot.github.enabled but {len(roots)} TrustRoot github rendered")
        return
    root = roots[0]
    if root["metadata"].get("annotations", {}).get("policy.sigil.dev/default-trust-root"):
        errors.append("TrustRoot github must not be the cluster's default trust root")
    remote = root.get("spec", {}).get("remote", {})
    if remote.get("mirror") != gh["mirror"]:
        errors.append(f"TrustRoot github mirror is {remote.get('mirror')}, want {gh['mirror']}")
    try:
        embedded = base64.b64decode(remote.get("root", ""), validate=True)
    except ValueError:
        embedded = b""
    with open(GITHUB_ROOT, "rb") as f:
        built_in = f.read()
    if embedded != built_in:
        errors.append("TrustRoot github's root is not charts/sigil/files/github-tuf-root.json")
    upstream = github_chart_root()
    if upstream is not None and upstream != built_in:
        errors.append("charts/sigil/files/github-tuf-root.json differs from the root GitHub's "
                      "trust-policies chart embeds (../shared/github-trust-policies)")
    try:
        signed = json.loads(embedded)["signed"]
        if signed.get("_type") != "root":
            errors.append("TrustRoot github's root is not a TUF root.json")
    except (ValueError, KeyError, TypeError):
        errors.append("TrustRoot github's root is not a TUF root.json")
    want = f"{gh['trustDomain']}.trusted_root.json" if gh["trustDomain"] else None
    if remote.get("trustedRootTarget") != want:
        errors.append(f"TrustRoot github trustedRootTarget is {remote.get('trustedRootTarget')}, want {want}")


def check_controller_deployment(docs, external, errors):
    d = one(docs, "Deployment", "sigil-controller", errors)
    if d is None:
        return
    env = {e["name"]: e for e in containers(d)[0].get("env", [])}
    for name, path in (("POD_NAMESPACE", "metadata.namespace"), ("POD_NAME", "metadata.name")):
        if env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != path:
            errors.append(f"controller env {name} is not the downward API's {path}")
    args = args_of(d)
    want = "external" if external else "managed"
    if args.get("--webhook-tls") != [want]:
        errors.append(f"controller --webhook-tls is {args.get('--webhook-tls')}, want {want}")
    for flag in ("--mutating-webhook", "--validating-webhook"):
        if args.get(flag) != ["sigil-webhook"]:
            errors.append(f"controller {flag} is {args.get(flag)}, want sigil-webhook (WorkloadKinds' rules go there)")


REPORT_APIS = {
    "openreports": ("openreports.io", "reports", "clusterreports"),
    "wgpolicyk8s": ("wgpolicyk8s.io", "policyreports", "clusterpolicyreports"),
}


def check_audit(docs, values, ns, errors):
    """The audit: one replica that never overlaps, admission's namespace
    selection and judge flags, least-privilege RBAC, its report CRDs."""
    a = values["audit"]
    deploy = find(docs, "Deployment", "sigil-audit")
    if not a["enabled"]:
        for kind in ("Deployment", "ServiceAccount", "ClusterRole", "PrometheusRule"):
            if find(docs, kind, "sigil-audit"):
                errors.append(f"audit.enabled=false still renders {kind} sigil-audit")
        return
    if len(deploy) != 1:
        errors.append("audit.enabled but no sigil-audit Deployment")
        return
    d = deploy[0]
    if d["spec"]["replicas"] != 1 or d["spec"].get("strategy", {}).get("type") != "Recreate":
        errors.append("the audit must run exactly one replica with the Recreate strategy (one report writer)")
    if pod_spec(d).get("serviceAccountName") != "sigil-audit":
        errors.append("the audit does not run as ServiceAccount sigil-audit")
    args = args_of(d)
    want = {
        "--policy-snapshot-secret": [f"{ns}/sigil-policy-snapshot"],
        "--namespace-selection": [values["namespaceSelection"]],
        "--report-format": [a["reportFormat"]],
        "--interval-seconds": [str(a["intervalSeconds"])],
        "--timeout-seconds": [str(values["webhook"]["timeoutSeconds"])],
        "--no-match": [values["noMatchPolicy"]],
    }
    for flag, value in want.items():
        if args.get(flag) != value:
            errors.append(f"audit {flag} is {args.get(flag)}, want {value}")
    if ("--unenforced-namespaces" in args) != a["unenforcedNamespaces"]:
        errors.append("audit --unenforced-namespaces does not follow audit.unenforcedNamespaces")
    command = pod_spec(d)["containers"][0].get("command")
    if command != ["/usr/local/bin/sigil-audit"]:
        errors.append(f"the audit runs {command}, want the sigil-audit program")
    webhook = find(docs, "Deployment", "sigil-webhook")
    if webhook and sorted(args.get("--exclude-namespace", [])) != sorted(args_of(webhook[0]).get("--exclude-namespace", [])):
        errors.append("the audit excludes other namespaces than admission")
    group, plural, cluster_plural = REPORT_APIS[a["reportFormat"]]
    role = one(docs, "ClusterRole", "sigil-audit", errors)
    if role:
        allowed = {
            ("", "pods"): {"list", "watch"}, ("", "namespaces"): {"list", "watch"},
            ("apps", "replicasets"): {"list", "watch"}, ("batch", "jobs"): {"list", "watch"},
            (group, plural): {"list", "create", "patch", "delete"},
            (group, cluster_plural): {"list", "create", "patch", "delete"},
            ("policy.sigil.dev", "clusterimagepolicies/status"): {"patch"},
            ("policy.sigil.dev", "imagepolicies/status"): {"patch"},
        }
        granted = {}
        for r in role["rules"]:
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    granted.setdefault((g, res), set()).update(r.get("verbs", []))
        if granted != allowed:
            errors.append(f"ClusterRole sigil-audit grants {sorted((k, sorted(v)) for k, v in granted.items())}, want exactly {sorted((k, sorted(v)) for k, v in allowed.items())}")
    subject = [{"kind": "ServiceAccount", "name": "sigil-audit", "namespace": ns}]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        b = one(docs, kind, "sigil-audit", errors)
        if b and b["subjects"] != subject:
            errors.append(f"{kind} sigil-audit binds {b['subjects']}")
    secrets = one(docs, "Role", "sigil-audit", errors)
    if secrets and secrets["rules"] != SNAPSHOT_READER_RULES:
        errors.append("Role sigil-audit must name the snapshot Secrets only")
    pulls = find(docs, "ClusterRoleBinding", "sigil-audit-pull-secrets") + \
        find(docs, "RoleBinding", "sigil-audit-pull-secrets")
    if values["webhook"]["pullSecrets"]:
        if args.get("--pull-secrets") != ["kube"]:
            errors.append("the audit does not read pull secrets as the webhook does")
        for b in pulls:
            if b["roleRef"]["name"] != "sigil-webhook-pull-secrets" or b["subjects"] != subject:
                errors.append(f"{b['kind']} sigil-audit-pull-secrets binds {b['roleRef']} to {b['subjects']}")
        listed = values["webhook"]["pullSecretNamespaces"]
        got = sorted(b["metadata"].get("namespace", "*") for b in pulls)
        if got != (sorted(set(listed) | {ns}) if listed else ["*"]):
            errors.append(f"audit pull-secret bindings in {got} do not match the webhook's")
    elif pulls or "--pull-secrets" in args:
        errors.append("webhook.pullSecrets=false still lets the audit read pull secrets")
    rule = find(docs, "PrometheusRule", "sigil-audit")
    if bool(rule) != a["prometheusRule"]["enabled"]:
        errors.append("PrometheusRule sigil-audit does not follow audit.prometheusRule.enabled")


def report_crds(values):
    a = values.get("audit", {})
    if not (a.get("enabled") and a.get("installReportCRDs")):
        return set()
    group, plural, cluster_plural = REPORT_APIS[a["reportFormat"]]
    return {f"{plural}.{group}", f"{cluster_plural}.{group}"}


def check_extras(docs, values, ns, errors):
    crds = {d["metadata"]["name"] for d in find(docs, "CustomResourceDefinition")}
    pc = values["policyController"]
    pc_crds = set(PC_CRDS) if pc["serve"] and pc["installCRDs"] else set()
    ours = {
        "clusterimagepolicies.policy.sigil.dev",
        "imagepolicies.policy.sigil.dev",
        "trustroots.policy.sigil.dev",
        "workloadkinds.policy.sigil.dev",
        "imagepolicyexceptions.policy.sigil.dev",
    }
    if crds != ours | report_crds(values) | pc_crds:
        errors.append(f"CRDs rendered: {sorted(crds)}")
    for crd in find(docs, "CustomResourceDefinition"):
        if crd["metadata"]["name"] in report_crds(values):
            columns = {c["name"] for c in crd["spec"]["versions"][0].get("additionalPrinterColumns", [])}
            if not {"Pass", "Fail"} <= columns:
                errors.append(f"CRD {crd['metadata']['name']} lacks Pass/Fail printer columns")
            if crd["metadata"].get("annotations", {}).get("helm.sh/resource-policy") != "keep":
                errors.append(f"CRD {crd['metadata']['name']} would be deleted with the release")
    sm = find(docs, "ServiceMonitor")
    if values["serviceMonitor"]["enabled"]:
        if len(sm) != 1:
            errors.append("serviceMonitor.enabled but no ServiceMonitor")
        else:
            sel = sm[0]["spec"]["selector"]["matchLabels"]
            hit = [s["metadata"]["name"] for s in find(docs, "Service")
                   if all(s["metadata"]["labels"].get(k) == v for k, v in sel.items())
                   and any(p["name"] == "metrics" for p in s["spec"]["ports"])]
            want = ({"sigil-controller-metrics"} if values["controller"]["deploy"] else set()) | (
                {"sigil-webhook-metrics"} if values["webhook"]["deploy"] else set()) | (
                {"sigil-audit-metrics"} if values["audit"]["enabled"] else set())
            if set(hit) != want:
                errors.append(f"ServiceMonitor selects {sorted(hit)}, want {sorted(want)}")
            # sigil's `namespace` (audit results, exceptions) and `endpoint`
            # (admission requests) labels must survive the scrape.
            if any(e.get("honorLabels") is not True for e in sm[0]["spec"]["endpoints"]):
                errors.append("ServiceMonitor endpoints do not honor sigil's labels (honorLabels: true)")
    elif sm:
        errors.append("ServiceMonitor without serviceMonitor.enabled")
    rule = find(docs, "PrometheusRule", "sigil")
    if values["prometheusRule"]["enabled"]:
        alerts = {r.get("alert") for r in (rule[0]["spec"]["groups"] if rule else []) for r in r["rules"]}
        want = {"SigilDenialRateHigh", "SigilVerificationSlow", "SigilAdmissionErrors", "SigilRegistryErrors",
                "SigilNoPolicySnapshot", "SigilPolicySnapshotSkew", "SigilPolicyNotReady",
                "SigilWebhookCertificateExpiring", "SigilTufMetadataExpired", "SigilTufRollback"}
        if not want <= alerts:
            errors.append(f"PrometheusRule sigil lacks alerts {sorted(want - alerts)}")
    elif rule:
        errors.append("PrometheusRule sigil without prometheusRule.enabled")
    dash = find(docs, "ConfigMap", "sigil-dashboard")
    if values["grafanaDashboard"]["enabled"]:
        try:
            board = json.loads(dash[0]["data"]["sigil.json"]) if dash else None
        except ValueError as e:
            board = None
            errors.append(f"ConfigMap sigil-dashboard: sigil.json is not JSON ({e})")
        if not board or not board.get("panels"):
            errors.append("grafanaDashboard.enabled but no dashboard with panels")
        elif any(dash[0]["metadata"]["labels"].get(k) != v for k, v in values["grafanaDashboard"]["labels"].items()):
            errors.append("ConfigMap sigil-dashboard lacks the sidecar's label")
    elif dash:
        errors.append("ConfigMap sigil-dashboard without grafanaDashboard.enabled")
    cert = find(docs, "Certificate", "sigil-webhook")
    if values["certManager"]["enabled"]:
        if not cert or cert[0]["spec"]["secretName"] != "sigil-webhook-tls" or \
                f"sigil-webhook.{ns}.svc" not in cert[0]["spec"]["dnsNames"]:
            errors.append("cert-manager mode needs Certificate sigil-webhook -> Secret sigil-webhook-tls for the Service's names")
    elif cert:
        errors.append("Certificate rendered without certManager.enabled")


def check_gatekeeper(docs, values, ns, errors):
    """gatekeeper.enabled: the webhook serves the provider on its port with
    the client CA mounted from the named Secret, the Service exposes that
    port, the Provider names it over https with the timeout, and the
    ConstraintTemplate asks that Provider about every container list;
    disabled: none of it."""
    gk = values["gatekeeper"]
    provider = find(docs, "Provider")
    template = find(docs, "ConstraintTemplate")
    constraint = find(docs, "SigilVerifiedImages")
    hooks = find(docs, "Deployment", "sigil-webhook")
    args = [str(a) for a in containers(hooks[0])[0].get("args", [])] if hooks else []
    flags = [a for a in args if a.startswith("--gatekeeper-")]
    if not gk["enabled"]:
        ctl = find(docs, "Deployment", "sigil-controller")
        if ctl:
            flags += [str(a) for a in containers(ctl[0])[0].get("args", [])
                      if str(a).startswith("--gatekeeper-")]
        if provider or template or constraint or flags:
            errors.append("Gatekeeper objects or --gatekeeper-* flags without gatekeeper.enabled")
        return
    port = gk["port"]
    if f"--gatekeeper-listen=0.0.0.0:{port}" not in args:
        errors.append(f"sigil-webhook lacks --gatekeeper-listen=0.0.0.0:{port}")
    ca_path = f"/etc/sigil/gatekeeper-ca/{gk['clientCA']['key']}"
    if f"--gatekeeper-client-ca={ca_path}" not in args:
        errors.append(f"sigil-webhook lacks --gatekeeper-client-ca={ca_path}")
    if f"--gatekeeper-timeout-seconds={gk['timeoutSeconds']}" not in args:
        errors.append("sigil-webhook's --gatekeeper-timeout-seconds differs from the Provider's timeout")
    if hooks:
        spec = pod_spec(hooks[0])
        volume = [v for v in spec.get("volumes", []) if v["name"] == "gatekeeper-ca"]
        if not volume or volume[0]["secret"]["secretName"] != gk["clientCA"]["secretName"]:
            errors.append(f"sigil-webhook does not mount Secret {gk['clientCA']['secretName']} as gatekeeper-ca")
        mounts = [m for c in spec["containers"] for m in c.get("volumeMounts", [])
                  if m["name"] == "gatekeeper-ca"]
        if not mounts or mounts[0]["mountPath"] != "/etc/sigil/gatekeeper-ca":
            errors.append("sigil-webhook does not mount gatekeeper-ca at /etc/sigil/gatekeeper-ca")
    svc = find(docs, "Service", "sigil-webhook")
    if not svc or not any(p["port"] == port and p["targetPort"] == "gatekeeper" for p in svc[0]["spec"]["ports"]):
        errors.append(f"Service sigil-webhook lacks port {port} -> gatekeeper")
    if len(provider) != 1:
        errors.append(f"{len(provider)} Gatekeeper Providers rendered, want 1")
    else:
        p = provider[0]
        url = f"https://sigil-webhook.{ns}:{port}/verify"
        if p["apiVersion"] != "externaldata.gatekeeper.sh/v1beta1" or p["spec"]["url"] != url \
                or p["spec"]["timeout"] != gk["timeoutSeconds"] or p["metadata"]["name"] != gk["providerName"]:
            errors.append(f"Provider {p['metadata']['name']}: want v1beta1, url {url}, timeout {gk['timeoutSeconds']}")
    if gk["constraintTemplate"]:
        rego = template[0]["spec"]["targets"][0]["rego"] if template else ""
        wanted = [f'"provider": "{gk["providerName"]}"', ".containers[_].image",
                  ".initContainers[_].image", ".ephemeralContainers[_].image",
                  "system_error", ".errors[_]"]
        missing = [w for w in wanted if w not in rego]
        if missing:
            errors.append(f"ConstraintTemplate sigilverifiedimages lacks {missing}")
    elif template:
        errors.append("ConstraintTemplate without gatekeeper.constraintTemplate")
    # The controller keeps the Provider's caBundle while it manages the
    # webhook's TLS, with get and patch on that Provider only.
    managed = not (values["certManager"]["enabled"] or values["webhook"]["url"])
    ctl = find(docs, "Deployment", "sigil-controller")
    ctl_args = [str(a) for a in containers(ctl[0])[0].get("args", [])] if ctl else []
    want_flag = f"--gatekeeper-provider={gk['providerName']}"
    if managed and ctl and want_flag not in ctl_args:
        errors.append(f"sigil-controller lacks {want_flag}")
    if not managed and any(a.startswith("--gatekeeper-provider") for a in ctl_args):
        errors.append("sigil-controller keeps the Provider's caBundle although it does not manage the webhook's TLS")
    role = find(docs, "ClusterRole", "sigil-controller")
    rules = [r for r in (role[0]["rules"] if role else []) if "externaldata.gatekeeper.sh" in r.get("apiGroups", [])]
    want_rule = [{"apiGroups": ["externaldata.gatekeeper.sh"], "resources": ["providers"],
                  "resourceNames": [gk["providerName"]], "verbs": ["get", "patch"]}]
    if rules != (want_rule if managed and ctl else []):
        errors.append(f"ClusterRole sigil-controller's Provider rules are {rules}, want {want_rule if managed else []}")
    if bool(constraint) != bool(gk["constraint"]["enabled"]):
        errors.append("the example SigilVerifiedImages Constraint does not follow gatekeeper.constraint.enabled")


EXCEPTIONS = "imagepolicyexceptions"
EXCEPTION_READER = "sigil-exception-reader"
EXCEPTION_EDITOR = "sigil-exception-editor"
UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def duration_seconds(text):
    """A duration as the chart writes it (168h, 7d, 1h30m), in seconds."""
    return sum(int(n) * UNITS[u] for n, u in re.findall(r"(\d+)([dhms])", str(text)))


def check_exceptions(docs, values, ns, errors):
    """exceptions.namespaces: the webhook and the audit get the namespaces
    and the maximum duration as flags, and may read exceptions everywhere
    (a ClusterRole of get/list/watch, bound to them alone); the editor role
    exists for the admin to bind, aggregated into `admin` only when asked;
    the alerts follow. Off: none of it, and no one in the chart may touch
    exceptions."""
    e = values["exceptions"]
    on = bool(e["namespaces"])
    for name in ("sigil-webhook", "sigil-audit"):
        for d in find(docs, "Deployment", name):
            args = args_of(d)
            want_ns = list(e["namespaces"]) if on else []
            want_max = [e["maxDuration"]] if on else []
            if args.get("--exception-namespace", []) != want_ns:
                errors.append(f"{name} --exception-namespace is {args.get('--exception-namespace', [])}, want {want_ns}")
            if args.get("--exception-max-duration", []) != want_max:
                errors.append(f"{name} --exception-max-duration is {args.get('--exception-max-duration', [])}, want {want_max}")
    read = [{"apiGroups": ["policy.sigil.dev"], "resources": [EXCEPTIONS], "verbs": ["get", "list", "watch"]}]
    edit = [{"apiGroups": ["policy.sigil.dev"], "resources": [EXCEPTIONS],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]
    # Only these two roles name exceptions; the controller reads none.
    for role in find(docs, "ClusterRole") + find(docs, "Role"):
        if role["metadata"]["name"] in (EXCEPTION_READER, EXCEPTION_EDITOR):
            continue
        for r in role.get("rules", []):
            if EXCEPTIONS in r.get("resources", []) or ("policy.sigil.dev" in r.get("apiGroups", [])
                                                       and "*" in r.get("resources", [])):
                errors.append(f"{role['kind']} {role['metadata']['name']} grants {r['verbs']} on exceptions")
    reader = find(docs, "ClusterRole", EXCEPTION_READER)
    editor = find(docs, "ClusterRole", EXCEPTION_EDITOR)
    binding = find(docs, "ClusterRoleBinding", EXCEPTION_READER)
    if not on:
        if reader or editor or binding:
            errors.append("exceptions.namespaces is empty but exception roles are rendered")
    else:
        if len(reader) != 1 or reader[0]["rules"] != read:
            errors.append(f"ClusterRole {EXCEPTION_READER} must grant get, list and watch on {EXCEPTIONS} only")
        subjects = [{"kind": "ServiceAccount", "name": "sigil-webhook", "namespace": ns}]
        if values["audit"]["enabled"]:
            subjects.append({"kind": "ServiceAccount", "name": "sigil-audit", "namespace": ns})
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": EXCEPTION_READER}
        if len(binding) != 1 or binding[0]["roleRef"] != ref or binding[0]["subjects"] != subjects:
            errors.append(f"ClusterRoleBinding {EXCEPTION_READER} must bind {EXCEPTION_READER} to {subjects} alone")
        if len(editor) != 1 or editor[0]["rules"] != edit:
            errors.append(f"ClusterRole {EXCEPTION_EDITOR} must grant {edit[0]['verbs']} on {EXCEPTIONS} only")
        else:
            labels = editor[0]["metadata"].get("labels") or {}
            aggregated = {k for k, v in labels.items()
                          if k.startswith("rbac.authorization.k8s.io/aggregate-to-") and v == "true"}
            want = {"rbac.authorization.k8s.io/aggregate-to-admin"} if e["aggregateToAdmin"] else set()
            if aggregated != want:
                errors.append(f"ClusterRole {EXCEPTION_EDITOR} is aggregated to {sorted(aggregated)}, want {sorted(want)} (exceptions.aggregateToAdmin)")
    for b in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding"):
        if b["roleRef"]["name"] == EXCEPTION_EDITOR:
            errors.append(f"{b['kind']} {b['metadata']['name']} binds {EXCEPTION_EDITOR}: the admin binds it, not the chart")
    rule = find(docs, "PrometheusRule", "sigil")
    rules = {r.get("alert"): r for g in (rule[0]["spec"]["groups"] if rule else []) for r in g["rules"]}
    alerts = {"SigilExceptionExpiring", "SigilExceptionRefused"}
    if not rule:
        return
    if not on:
        if alerts & set(rules):
            errors.append("PrometheusRule sigil has exception alerts while exceptions are off")
        return
    if not alerts <= set(rules):
        errors.append(f"PrometheusRule sigil lacks {sorted(alerts - set(rules))}")
        return
    lead = duration_seconds(e["expiryWarning"])
    expiring = " ".join(rules["SigilExceptionExpiring"]["expr"].split())
    if expiring != f"max by (namespace, exception) (sigil_exception_expiry_timestamp_seconds) - time() < {lead}":
        errors.append(f"SigilExceptionExpiring is {expiring!r}, want the expiry within exceptions.expiryWarning ({lead} s)")
    refused = " ".join(rules["SigilExceptionRefused"]["expr"].split())
    if refused != 'max(sigil_exceptions{state="refused"}) > 0' or rules["SigilExceptionRefused"].get("for") != "10m":
        errors.append(f"SigilExceptionRefused is {refused!r} for {rules['SigilExceptionRefused'].get('for')}")


def check_flags(docs, help_dir, errors, warnings):
    pending = set(os.environ.get("SIGIL_PENDING_FLAGS", "").split())
    for name, binary in (("sigil-webhook", "sigil-webhook"), ("sigil-controller", "sigil-controller"),
                         ("sigil-audit", "sigil-audit")):
        path = os.path.join(help_dir, f"{binary}.help")
        with open(path, encoding="utf-8") as f:
            known = set(re.findall(r"(?m)^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", f.read()))
        d = find(docs, "Deployment", name)
        if not d:
            continue
        for flag in args_of(d[0]):
            if flag in known:
                continue
            if flag in pending:
                warnings.append(f"{name}: {flag} is not in this build's --help (listed in SIGIL_PENDING_FLAGS)")
            else:
                errors.append(f"{name}: the chart passes {flag}, which `{binary} --help` does not list")


def check_component_extras(docs, values, errors):
    """ServiceAccount annotations, env, extra volumes and mounts, pod labels
    and topology spread of each deployed component, as its values ask."""
    for comp in ("webhook", "controller"):
        v = values[comp]
        name = f"sigil-{comp}"
        sa = find(docs, "ServiceAccount", name)
        if sa:
            got = sa[0]["metadata"].get("annotations") or {}
            if got != v["serviceAccount"]["annotations"]:
                errors.append(f"ServiceAccount {name}: annotations {got}, want {v['serviceAccount']['annotations']}")
        d = find(docs, "Deployment", name)
        if not d:
            continue
        spec = pod_spec(d[0])
        c = spec["containers"][0]
        env = c.get("env") or []
        for e in v["env"]:
            if e not in env:
                errors.append(f"{name}: env lacks {e}")
        if not any(e.get("name") == "RUST_LOG" for e in env):
            errors.append(f"{name}: env lost RUST_LOG")
        volumes = spec.get("volumes") or []
        mounts = c.get("volumeMounts") or []
        for vol in v["extraVolumes"]:
            if vol not in volumes:
                errors.append(f"{name}: volumes lack {vol['name']}")
        for m in v["extraVolumeMounts"]:
            if m not in mounts:
                errors.append(f"{name}: volumeMounts lack {m['name']}")
        declared = {vol["name"] for vol in volumes}
        for m in mounts:
            if m["name"] not in declared:
                errors.append(f"{name}: mount {m['name']} has no volume")
        labels = d[0]["spec"]["template"]["metadata"].get("labels") or {}
        for k, val in (v.get("podLabels") or {}).items():
            if labels.get(k) != val:
                errors.append(f"{name}: pod label {k}={labels.get(k)!r}, want {val!r}")
        spread = spec.get("topologySpreadConstraints") or []
        if len(spread) != len(v["topologySpreadConstraints"]):
            errors.append(f"{name}: {len(spread)} topologySpreadConstraints, want {len(v['topologySpreadConstraints'])}")
        for t in spread:
            for val in (t.get("labelSelector", {}).get("matchLabels") or {}).values():
                if "{{" in str(val):
                    errors.append(f"{name}: topologySpreadConstraints label value {val!r} was not templated")


def webhook_bound_mib(args):
    """What sigil-webhook's flags let it hold, in MiB: the sum
    crates/sigil-webhook/src/memory_budget.rs computes at start (the process
    32, registry responses, signature material 32, verdicts at 1 KiB, each
    CUE worker's instance limit plus 20 for the module, each Rego worker
    process's limit plus 8, one review body 7)."""
    def flag(name, default):
        return int((args.get(name) or [default])[-1])
    return (32 + flag("--registry-memory-mib", 96) + 32
            + flag("--verdict-cache-size", 200000) / 1024
            + flag("--cue-workers", 2) * (flag("--cue-memory-limit-mib", 256) + 20)
            + flag("--rego-workers", 2) * (flag("--rego-memory-limit-mib", 128) + 8) + 7)


# The controller: the process 32, a TUF archive 64, one CUE instance 256 + 20,
# one Rego worker process 128 + 8.
CONTROLLER_BOUND_MIB = 508


def check_memory_limits(docs, errors):
    """Each component's memory limit covers what its flags let it hold
    (docs/installation.md, "Memory"); below it, the pod would be OOM-killed
    before sigil's own bounds apply (and the webhook refuses to start)."""
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for name in ("sigil-webhook", "sigil-audit", "sigil-controller"):
        d = find(docs, "Deployment", name)
        if not d:
            continue
        bound = CONTROLLER_BOUND_MIB if name == "sigil-controller" else webhook_bound_mib(args_of(d[0]))
        limit = str(((containers(d[0])[0].get("resources") or {}).get("limits") or {}).get("memory", ""))
        m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", limit)
        if not m:
            errors.append(f"{name}: memory limit {limit!r} is not a whole number of Ki, Mi or Gi")
        elif int(m.group(1)) * units[m.group(2)] < bound:
            errors.append(f"{name}: memory limit {limit} is below what its flags let it hold ({bound:.0f} MiB)")


def check(docs, values, ns, help_dir=None):
    errors, warnings = [], []
    check_component_extras(docs, values, errors)
    check_memory_limits(docs, errors)
    check_hardening(docs, errors)
    check_ids(docs, values, errors)
    check_namespaces(docs, ns, errors)
    check_services(docs, errors)
    check_webhook_configs(docs, values, ns, errors)
    check_webhook(docs, values, ns, errors)
    check_controller(docs, values, ns, errors)
    check_audit(docs, values, ns, errors)
    check_registry_credentials(docs, values, errors)
    check_shared_cache(docs, values, ns, errors)
    check_policy_controller(docs, values, errors)
    check_extras(docs, values, ns, errors)
    check_gatekeeper(docs, values, ns, errors)
    check_exceptions(docs, values, ns, errors)
    if help_dir:
        check_flags(docs, help_dir, errors, warnings)
    return errors, warnings


def breakages():
    """Ways to break a default rendering, each of which check() must notice."""
    def container(docs, name):
        return pod_spec(find(docs, "Deployment", name)[0])["containers"][0]

    def webhooks(docs):
        return find(docs, "ValidatingWebhookConfiguration")[0]["webhooks"][0]

    def drop_ro_root(docs):
        del container(docs, "sigil-controller")["securityContext"]["readOnlyRootFilesystem"]

    def allow_escalation(docs):
        container(docs, "sigil-webhook")["securityContext"]["allowPrivilegeEscalation"] = True

    def unfixed_pod_user(docs):
        del pod_spec(find(docs, "Deployment", "sigil-webhook")[0])["securityContext"]["runAsUser"]

    def include_kube_system(docs):
        for e in webhooks(docs)["namespaceSelector"]["matchExpressions"]:
            if e["key"] == "kubernetes.io/metadata.name":
                e["values"].remove("kube-system")

    def timeout_mismatch(docs):
        c = container(docs, "sigil-webhook")
        c["args"] = [a if not a.startswith("--timeout-seconds") else "--timeout-seconds=29" for a in c["args"]]

    def ignore_failures(docs):
        webhooks(docs)["failurePolicy"] = "Ignore"

    def forget_cronjobs(docs):
        webhooks(docs)["rules"][-1]["resources"] = ["jobs"]

    def wider_webhook_role(docs):
        del find(docs, "Role", "sigil-webhook")[0]["rules"][0]["resourceNames"]

    def no_probe(docs):
        del container(docs, "sigil-webhook")["readinessProbe"]

    def wrong_namespace(docs):
        find(docs, "Service", "sigil-webhook")[0]["metadata"]["namespace"] = "default"

    def connections_unbounded(docs):
        c = container(docs, "sigil-webhook")
        c["args"] = [a for a in c["args"] if not a.startswith("--connection-max-requests")]

    def unknown_flag(docs):
        container(docs, "sigil-controller")["args"].append("--no-such-flag=1")

    def stray_gatekeeper_listener(docs):
        container(docs, "sigil-webhook")["args"].append("--gatekeeper-listen=0.0.0.0:8444")

    def path_swap(docs):
        webhooks(docs)["clientConfig"]["service"]["path"] = "/mutate"

    def allow_loopback_registries(docs):
        container(docs, "sigil-webhook")["args"].append("--allow-registry-address=127.0.0.0/8")

    def tenants_name_any_registry(docs):
        container(docs, "sigil-controller")["args"].append("--image-policy-registry=*")

    def allow_unpinned_by_default(docs):
        container(docs, "sigil-webhook")["args"].append("--allow-unpinned")

    def list_pull_secrets(docs):
        find(docs, "ClusterRole", "sigil-webhook-pull-secrets")[0]["rules"][0]["verbs"].append("list")

    def forget_ephemeral_containers(docs):
        webhooks(docs)["rules"][0]["resources"].remove("pods/ephemeralcontainers")

    def no_reinvocation(docs):
        del find(docs, "MutatingWebhookConfiguration")[0]["webhooks"][0]["reinvocationPolicy"]

    def forget_tuf_state(docs):
        for r in find(docs, "Role", "sigil-controller")[0]["rules"]:
            if "sigil-tuf-state" in r.get("resourceNames", []):
                r["resourceNames"].remove("sigil-tuf-state")

    def go_offline(docs):
        container(docs, "sigil-controller")["args"].append("--tuf-offline")

    def audit_two_replicas(docs):
        find(docs, "Deployment", "sigil-audit")[0]["spec"]["replicas"] = 2

    def audit_rolling_update(docs):
        find(docs, "Deployment", "sigil-audit")[0]["spec"]["strategy"] = {"type": "RollingUpdate"}

    def audit_reads_secrets(docs):
        find(docs, "ClusterRole", "sigil-audit")[0]["rules"].append(
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]})

    def audit_other_selection(docs):
        c = container(docs, "sigil-audit")
        c["args"] = [a for a in c["args"] if not a.startswith("--namespace-selection")]

    def audit_without_value(docs):
        d = copy.deepcopy(find(docs, "Deployment", "sigil-webhook")[0])
        d["metadata"]["name"] = "sigil-audit"
        docs.append(d)

    def webhook_limit_too_low(docs):
        container(docs, "sigil-webhook")["resources"]["limits"]["memory"] = "256Mi"

    def drop_webhook_env(docs):
        c = container(docs, "sigil-webhook")
        c["env"] = [e for e in c["env"] if e["name"] != "RUST_LOG"]

    def audit_without_cloud_providers(docs):
        c = container(docs, "sigil-audit")
        c["args"] = [a for a in c["args"] if not a.startswith("--registry-credential-provider")]

    def drop_cloud_providers(docs):
        c = container(docs, "sigil-webhook")
        c["args"] = [a for a in c["args"] if not a.startswith("--registry-credential-provider")]

    def stray_cloud_token(docs):
        pod = pod_spec(find(docs, "Deployment", "sigil-webhook")[0])
        pod["volumes"].append({"name": "aws-iam-token", "projected": {"sources": [
            {"serviceAccountToken": {"audience": "sts.amazonaws.com", "path": "token"}}]}})

    def stray_github_trust_root(docs):
        docs.append({"apiVersion": "policy.sigil.dev/v1alpha1", "kind": "TrustRoot",
                     "metadata": {"name": "github"},
                     "spec": {"remote": {"mirror": "https://tuf-repo.github.com/", "root": ""}}})

    def github_root_tampered(docs):
        root = [r for r in find(docs, "TrustRoot") if r["metadata"]["name"] == "github"][0]
        doc = json.loads(base64.b64decode(root["spec"]["remote"]["root"]))
        doc["signed"]["version"] += 1
        root["spec"]["remote"]["root"] = base64.b64encode(json.dumps(doc).encode()).decode()

    def pc_entry_judges_twice(docs):
        for hook in find(docs, "ValidatingWebhookConfiguration")[0]["webhooks"]:
            if hook["name"].startswith(PC_ENTRY):
                hook["namespaceSelector"]["matchExpressions"] = [
                    e for e in hook["namespaceSelector"]["matchExpressions"]
                    if e["key"] != "policy.sigil.dev/include"]

    def pc_crd_pruned(docs):
        for crd in find(docs, "CustomResourceDefinition"):
            if crd["metadata"]["name"] in PC_CRDS:
                del crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
                    "x-kubernetes-preserve-unknown-fields"]

    def pc_controller_writes_sources(docs):
        for r in find(docs, "ClusterRole", "sigil-controller")[0]["rules"]:
            if "policy.sigstore.dev" in r["apiGroups"] and "watch" in r["verbs"]:
                r["verbs"].append("patch")

    def stray_autoscaler(docs):
        docs.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                     "metadata": {"name": "sigil-webhook", "namespace": "sigil-check"},
                     "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": "sigil-webhook"},
                              "minReplicas": 2, "maxReplicas": 5}})

    def image_policy_references_cluster_wide(docs):
        docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": "sigil-controller-imagepolicy-references"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": "sigil-controller-imagepolicy-references"},
                     "subjects": [{"kind": "ServiceAccount", "name": "sigil-controller",
                                   "namespace": "sigil-system"}]})

    def stray_shared_cache(docs):
        container(docs, "sigil-webhook")["args"].append("--shared-cache-url=redis://cache.example:6379")

    def stray_exception_flag(docs):
        container(docs, "sigil-webhook")["args"].append("--exception-namespace=*")

    def controller_reads_exceptions(docs):
        find(docs, "ClusterRole", "sigil-controller")[0]["rules"].append(
            {"apiGroups": ["policy.sigil.dev"], "resources": [EXCEPTIONS], "verbs": ["list", "watch"]})

    def exc_webhook_ignores_exceptions(docs):
        c = container(docs, "sigil-webhook")
        c["args"] = [a for a in c["args"] if not a.startswith("--exception-")]

    def exc_reader_may_write(docs):
        find(docs, "ClusterRole", EXCEPTION_READER)[0]["rules"][0]["verbs"].append("create")

    def exc_editor_bound_by_the_chart(docs):
        docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": "everyone-edits-exceptions"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": EXCEPTION_EDITOR},
                     "subjects": [{"kind": "Group", "name": "system:authenticated",
                                   "apiGroup": "rbac.authorization.k8s.io"}]})

    def exc_editor_aggregated_to_edit(docs):
        find(docs, "ClusterRole", EXCEPTION_EDITOR)[0]["metadata"]["labels"][
            "rbac.authorization.k8s.io/aggregate-to-edit"] = "true"

    def exc_expiry_warning_ignored(docs):
        for g in find(docs, "PrometheusRule", "sigil")[0]["spec"]["groups"]:
            for r in g["rules"]:
                if r.get("alert") == "SigilExceptionExpiring":
                    r["expr"] = r["expr"].rsplit("<", 1)[0] + "< 86400"

    return [stray_exception_flag, controller_reads_exceptions, exc_webhook_ignores_exceptions,
            exc_reader_may_write, exc_editor_bound_by_the_chart, exc_editor_aggregated_to_edit,
            exc_expiry_warning_ignored, stray_shared_cache, stray_gatekeeper_listener, audit_without_cloud_providers, drop_cloud_providers, stray_cloud_token, image_policy_references_cluster_wide, pc_entry_judges_twice, pc_crd_pruned, pc_controller_writes_sources, connections_unbounded, stray_autoscaler, github_root_tampered, stray_github_trust_root, webhook_limit_too_low, drop_webhook_env, drop_ro_root, allow_escalation, unfixed_pod_user, include_kube_system, timeout_mismatch,
            ignore_failures, forget_cronjobs, wider_webhook_role, no_probe,
            wrong_namespace, unknown_flag, path_swap, allow_loopback_registries,
            tenants_name_any_registry, allow_unpinned_by_default, list_pull_secrets, forget_ephemeral_containers,
            no_reinvocation, forget_tuf_state, go_offline, audit_two_replicas,
            audit_rolling_update, audit_reads_secrets, audit_other_selection,
            audit_without_value]


def workflow_pushes(workflow, tag, release_script=""):
    """The image reference the release workflow pushes for git tag `tag`:
    its `make image PUSH=...` line (in a run step, or in scripts/release.sh,
    text `release_script`, when a step runs its `image` command), with $IMAGE
    and $TAG (or ${TAG#v}) of the job's env expanded as bash would for that
    tag."""
    pushed = []
    for job in (workflow.get("jobs") or {}).values():
        env = job.get("env") or {}
        for step in job.get("steps") or []:
            run = step.get("run") or ""
            if "scripts/release.sh image" in run:
                run += "\n" + release_script
            for m in re.finditer(r'make image PUSH="([^"]+)"', run):
                ref = m.group(1)
                ref = ref.replace("${TAG#v}", tag[1:] if tag.startswith("v") else tag)
                ref = ref.replace("${TAG}", tag).replace("$TAG", tag)
                ref = ref.replace("${IMAGE}", env.get("IMAGE", "")).replace("$IMAGE", env.get("IMAGE", ""))
                pushed.append(ref)
    return pushed


def workflow_platforms(workflow):
    cli = (workflow.get("jobs") or {}).get("cli") or {}
    include = ((cli.get("strategy") or {}).get("matrix") or {}).get("include") or []
    return {f"{e.get('os')}-{e.get('arch')}" for e in include}


def check_release(workflow, rendered, deployed, chart, krew_text, release_script=""):
    errors = []
    tag = "v" + str(chart["appVersion"])
    pushed = workflow_pushes(workflow, tag, release_script)
    if len(pushed) != 1:
        errors.append(f"release workflow: {len(pushed)} `make image PUSH=` lines, want exactly 1")
    for name, docs in (("the chart's default rendering", rendered), ("deploy/sigil.yaml", deployed)):
        images = {c["image"] for d in docs if d.get("kind") in WORKLOADS for c in containers(d)}
        if not images:
            errors.append(f"{name}: no workload images")
        for image in sorted(images):
            if image not in pushed:
                errors.append(f"{name} runs {image}, but the release workflow pushes {pushed} "
                              f"for tag {tag}: that install would end in ImagePullBackOff")
    platforms = workflow_platforms(workflow)
    if not platforms:
        errors.append("release workflow: job `cli` builds no platforms")
    # The archives and the krew manifest come from the script that
    # scripts/test-release-cli.sh tests (`release.sh cli` runs its
    # `manifest`), not from steps of their own.
    jobs = workflow.get("jobs", {})
    for job, call in (("cli", "scripts/release-cli.sh pack"), ("cli-publish", "scripts/release.sh cli")):
        runs = "\n".join(str(step.get("run", "")) for step in jobs.get(job, {}).get("steps", []))
        if call not in runs:
            errors.append(f"release workflow: job `{job}` does not run `{call}`")
    try:
        krew = yaml.safe_load(krew_text)
        entries = krew["spec"]["platforms"]
    except (yaml.YAMLError, KeyError, TypeError) as e:
        return errors + [f"krew manifest: not a Plugin with spec.platforms ({e})"]
    covered = set()
    for e in entries:
        labels = e.get("selector", {}).get("matchLabels", {})
        platform = f"{labels.get('os')}-{labels.get('arch')}"
        covered.add(platform)
        archive = f"sigil-@VERSION@-{platform}.tar.gz"
        if not str(e.get("uri", "")).endswith("/@TAG@/" + archive):
            errors.append(f"krew manifest {platform}: uri {e.get('uri')!r} is not the release's {archive}")
        if e.get("sha256") != f"@SHA256_{platform}@":
            errors.append(f"krew manifest {platform}: sha256 {e.get('sha256')!r} is not filled from SHA256SUMS")
        if e.get("bin") != "bin/sigil":
            errors.append(f"krew manifest {platform}: bin {e.get('bin')!r}, the archives hold bin/sigil")
    if covered != platforms:
        errors.append(f"krew manifest covers {sorted(covered)}, the workflow builds {sorted(platforms)}")
    return errors


def release_main(argv):
    workflow_path, rendered_path, deploy_path, krew_path = argv[2:6]
    with open(workflow_path, encoding="utf-8") as f:
        workflow_text = f.read()
    with open(os.path.join(CHART, "Chart.yaml"), encoding="utf-8") as f:
        chart = yaml.safe_load(f)
    with open(krew_path, encoding="utf-8") as f:
        krew_text = f.read()
    with open(RELEASE_SCRIPT, encoding="utf-8") as f:
        script = f.read()
    rendered, deployed = load_docs(rendered_path), load_docs(deploy_path)
    errors = check_release(yaml.safe_load(workflow_text), rendered, deployed, chart, krew_text, script)
    for e in errors:
        print(f"  FAIL: {e}")
    if errors:
        return 1
    # Each of these breakages must be noticed.
    def retag(docs):
        out = copy.deepcopy(docs)
        for d in out:
            if d.get("kind") in WORKLOADS:
                for c in containers(d):
                    c["image"] = c["image"].rsplit(":", 1)[0] + ":v" + str(chart["appVersion"])
        return out
    broken = {
        "the workflow pushing the git tag itself": (
            workflow_text.replace("${TAG#v}", "$TAG"), rendered, deployed, chart, krew_text,
            script.replace("${TAG#v}", "$TAG")),
        "a chart rendering the tag with a v": (workflow_text, retag(rendered), deployed, chart, krew_text, script),
        "a stale deploy/sigil.yaml": (workflow_text, rendered, retag(deployed), chart, krew_text, script),
        "archives packed by the workflow's own steps": (
            workflow_text.replace("scripts/release-cli.sh pack", "tar -czf"), rendered, deployed, chart, krew_text,
            script),
        "a krew platform the workflow does not build": (
            workflow_text, rendered, deployed, chart, krew_text.replace("arch: arm64", "arch: s390x", 1), script),
    }
    missed = [name for name, (w, r, d, c, k, x) in broken.items()
              if not check_release(yaml.safe_load(w), r, d, c, k, x)]
    for name in missed:
        print(f"  FAIL: self-test: the release check did not notice {name}")
    return 1 if missed else 0


def dashboard_queries(docs):
    """Every query of the rendered Grafana dashboard, its variables given
    values, as a recording-rule group: promtool then parses each one as the
    Prometheus that Grafana asks would."""
    rules = []
    for cm in find(docs, "ConfigMap", "sigil-dashboard"):
        for name, text in cm["data"].items():
            board = json.loads(text)
            for panel in board.get("panels", []):
                for i, target in enumerate(panel.get("targets", [])):
                    if "expr" not in target:
                        continue
                    expr = target["expr"].replace("${namespace}", "sigil-system").replace("$namespace", "sigil-system")
                    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
                    if "$" in expr:
                        raise SystemExit(f"{name}: panel {panel.get('title')!r}: a variable this check cannot fill: {expr}")
                    rules.append({"record": f"dashboard:panel_{panel.get('id', 0)}:query_{i}", "expr": expr})
    return [{"name": "sigil-dashboard-queries", "rules": rules}] if rules else []


def rules_main(argv):
    """The groups of every PrometheusRule in a rendering, and the Grafana
    dashboard's queries as recording rules, as one Prometheus rule file on
    stdout (what promtool checks); exit 1 when there is nothing to check."""
    docs = load_docs(argv[2])
    groups = [g for d in docs if d.get("kind") == "PrometheusRule" for g in d["spec"]["groups"]]
    groups += dashboard_queries(docs)
    if not groups:
        return 1
    print(yaml.safe_dump({"groups": groups}, sort_keys=False), end="")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "rules":
        return rules_main(argv)
    if len(argv) >= 6 and argv[1] == "release":
        return release_main(argv)
    if len(argv) < 5 or argv[1] not in ("check", "self-test"):
        sys.exit(__doc__)
    mode, rendered, case, ns = argv[1:5]
    help_dir = argv[6] if len(argv) > 6 and argv[5] == "--help-dir" else None
    docs, values = load_docs(rendered), load_values(case)
    if mode == "check":
        errors, warnings = check(docs, values, ns, help_dir)
        for w in warnings:
            print(f"  warning: {w}")
        for e in errors:
            print(f"  FAIL: {e}")
        return 1 if errors else 0
    # self-test: the clean rendering passes, and every breakage is caught.
    errors, _ = check(docs, values, ns, help_dir)
    if errors:
        print("  FAIL: self-test needs a clean rendering; it has:", *errors, sep="\n    ")
        return 1
    missed = []
    for breakage in breakages():
        if breakage.__name__ == "unknown_flag" and not help_dir:
            continue  # only the binaries' --help can catch it
        audited = bool(find(docs, "Deployment", "sigil-audit"))
        if breakage.__name__.startswith("audit_") and \
                audited == (breakage.__name__ == "audit_without_value"):
            continue  # each applies to a rendering with the audit, or without
        github = any(r["metadata"]["name"] == "github" for r in find(docs, "TrustRoot"))
        if breakage.__name__.startswith("github_") != github or \
                (github and breakage.__name__ == "stray_github_trust_root"):
            continue  # each applies to a rendering with the GitHub TrustRoot, or without
        serving = bool(values["policyController"]["serve"])
        if breakage.__name__.startswith("pc_") != serving:
            continue  # each applies to a rendering serving policy-controller's objects, or not
        if breakage.__name__.startswith("exc_") != bool(values["exceptions"]["namespaces"]):
            continue  # each applies to a rendering with exceptions on, or off
        broken = copy.deepcopy(docs)
        breakage(broken)
        errors, _ = check(broken, values, ns, help_dir)
        if not errors:
            missed.append(breakage.__name__)
    for name in missed:
        print(f"  FAIL: self-test: the checker did not notice {name}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
