// Test glue: indexing into known-length vectors.
#![allow(clippy::indexing_slicing)]

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The chart's opt-in selector.
fn opt_in() -> Selector {
    Selector {
        labels: BTreeMap::new(),
        expressions: vec![
            (
                "policy.sigil.dev/include".into(),
                "In".into(),
                vec!["true".into()],
            ),
            (
                "kubernetes.io/metadata.name".into(),
                "NotIn".into(),
                vec!["kube-system".into(), "sigil-system".into()],
            ),
        ],
    }
}

fn hook(kind: &'static str, name: &str, ca: &[u8]) -> Hook {
    Hook {
        kind,
        config: "sigil-webhook".into(),
        name: name.into(),
        target: Target::Service {
            namespace: "sigil-system".into(),
            name: "sigil-webhook".into(),
            port: 443,
        },
        ca_bundle: ca.to_vec(),
        failure_policy: "Fail".into(),
        timeout_seconds: 10,
        namespace_selector: opt_in(),
    }
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn policy(name: &str, generation: i64, ready: (&str, &str, &str)) -> Conditioned {
    Conditioned {
        name: name.into(),
        generation,
        observed_generation: Some(generation),
        conditions: [(
            "Ready".to_owned(),
            (ready.0.to_owned(), ready.1.to_owned(), ready.2.to_owned()),
        )]
        .into(),
        note: "enforce".into(),
    }
}

fn facts(revision: u64, policies: &[(&str, i64)]) -> SnapshotFacts {
    SnapshotFacts {
        secret: "sigil-system/sigil-policy-snapshot".into(),
        revision,
        generated_at: Some(now() - time::Duration::seconds(90)),
        policies: policies
            .iter()
            .map(|(n, g)| ((*n).to_owned(), *g))
            .collect(),
        trust_roots: 0,
        sigstore: Some(("public-good".into(), "tuf".into())),
        default_trust_root: None,
    }
}

fn lease(holder: &str, renewed_ago: i64) -> LeaseFacts {
    LeaseFacts {
        holder: holder.into(),
        renewed: Some(now() - time::Duration::seconds(renewed_ago)),
        duration: Duration::from_secs(15),
    }
}

#[test]
fn selectors_match_as_the_api_server_does() {
    let s = opt_in();
    assert!(s.matches(&labels(&[
        ("policy.sigil.dev/include", "true"),
        ("kubernetes.io/metadata.name", "shop")
    ])));
    assert!(!s.matches(&labels(&[("kubernetes.io/metadata.name", "shop")])));
    assert!(!s.matches(&labels(&[
        ("policy.sigil.dev/include", "true"),
        ("kubernetes.io/metadata.name", "kube-system")
    ])));
    let exists = Selector {
        labels: labels(&[("team", "a")]),
        expressions: vec![("env".into(), "Exists".into(), vec![])],
    };
    assert!(exists.matches(&labels(&[("team", "a"), ("env", "x")])));
    assert!(!exists.matches(&labels(&[("team", "b"), ("env", "x")])));
    assert!(!exists.matches(&labels(&[("team", "a")])));
    let odd = Selector {
        labels: BTreeMap::new(),
        expressions: vec![("env".into(), "Gt".into(), vec!["1".into()])],
    };
    assert!(
        !odd.matches(&labels(&[("env", "2")])),
        "an unknown operator selects nothing"
    );
}

#[test]
fn a_missing_validating_webhook_fails_and_says_nothing_is_enforced() {
    let f = configurations(None, None);
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("nothing is enforced"), "{f:?}");
}

#[test]
fn webhooks_with_different_ca_bundles_or_none_fail() {
    let v = hook(
        "ValidatingWebhookConfiguration",
        "validate.policy.sigil.dev",
        b"A",
    );
    let m = hook(
        "MutatingWebhookConfiguration",
        "mutate.policy.sigil.dev",
        b"B",
    );
    let f = configurations(Some(&v), Some(&m));
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("different caBundles"), "{f:?}");
    let empty = hook(
        "ValidatingWebhookConfiguration",
        "validate.policy.sigil.dev",
        b"",
    );
    let f = configurations(Some(&empty), None);
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("has no caBundle"), "{f:?}");
    let m = hook(
        "MutatingWebhookConfiguration",
        "mutate.policy.sigil.dev",
        b"A",
    );
    let f = configurations(Some(&v), Some(&m));
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(
        f.summary
            .contains("Service sigil-system/sigil-webhook port 443"),
        "{f:?}"
    );
    // By URL: one server, two paths; another port is another server.
    let mut v_url = v.clone();
    v_url.target = Target::Url("https://127.0.0.1:8443/validate".into());
    let mut m_url = v.clone();
    m_url.kind = "MutatingWebhookConfiguration";
    m_url.target = Target::Url("https://127.0.0.1:8443/mutate".into());
    assert_eq!(
        configurations(Some(&v_url), Some(&m_url)).status,
        Status::Ok
    );
    m_url.target = Target::Url("https://127.0.0.1:9443/mutate".into());
    let f = configurations(Some(&v_url), Some(&m_url));
    assert!(f.summary.contains("call different servers"), "{f:?}");
}

fn cert(verified: Result<(), String>, expires_in_days: i64) -> ServingCert {
    ServingCert {
        source: "in Secret sigil-system/sigil-webhook-tls".into(),
        server_name: "sigil-webhook.sigil-system.svc".into(),
        verified,
        leaf: Some((
            "CN=sigil-webhook".into(),
            now() + time::Duration::days(expires_in_days),
        )),
    }
}

#[test]
fn a_serving_certificate_that_does_not_chain_to_the_ca_bundle_fails_with_the_cause() {
    let f = ca_bundle(Ok(cert(Err("unknown issuer".into()), 300)), now());
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("unknown issuer"), "{f:?}");
    assert!(
        f.summary.contains("sigil-webhook.sigil-system.svc"),
        "{f:?}"
    );
    assert!(f.fix.as_deref().is_some_and(|x| x.contains("caBundle")));
}

#[test]
fn a_certificate_expiring_within_a_week_warns_and_a_healthy_one_passes() {
    let f = ca_bundle(Ok(cert(Ok(()), 3)), now());
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(f.summary.contains("expires"), "{f:?}");
    let f = ca_bundle(Ok(cert(Ok(()), 300)), now());
    assert_eq!(f.status, Status::Ok, "{f:?}");
    let f = ca_bundle(Err("connection refused".into()), now());
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("connection refused"), "{f:?}");
}

#[test]
fn a_service_without_ready_endpoints_fails_and_one_replica_warns() {
    let none = Endpoints {
        service: "sigil-system/sigil-webhook".into(),
        ready: vec![],
        not_ready: vec!["sigil-webhook-a".into()],
    };
    let f = endpoints(Ok(none));
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.summary.contains("no ready endpoint (1 not ready)"),
        "{f:?}"
    );
    let one = Endpoints {
        service: "sigil-system/sigil-webhook".into(),
        ready: vec!["sigil-webhook-a".into()],
        not_ready: vec![],
    };
    assert_eq!(endpoints(Ok(one)).status, Status::Warn);
    let two = Endpoints {
        service: "sigil-system/sigil-webhook".into(),
        ready: vec!["a".into(), "b".into()],
        not_ready: vec![],
    };
    assert_eq!(endpoints(Ok(two)).status, Status::Ok);
    assert_eq!(endpoints(Err("no Service".into())).status, Status::Fail);
}

#[test]
fn a_url_webhook_that_does_not_answer_fails() {
    let f = url_reachable("https://127.0.0.1:1", &Err("connection refused".into()));
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.summary.contains("nothing answers at https://127.0.0.1:1"),
        "{f:?}"
    );
    assert_eq!(
        url_reachable("https://127.0.0.1:1", &Ok(())).status,
        Status::Ok
    );
}

fn refused(message: &str) -> Finding {
    refused_with(message, false)
}

fn refused_with(message: &str, endpoints_down: bool) -> Finding {
    dry_run(
        &DryRun::Refused {
            namespace: "shop".into(),
            message: message.into(),
        },
        endpoints_down,
    )
}

#[test]
fn a_dry_run_denied_by_sigil_proves_the_webhook_answers() {
    let f = refused(
        "admission webhook \"validate.policy.sigil.dev\" denied the request: sigil denied pod \
         shop/sigil-doctor-x: 1 of 1 image(s) failed verification",
    );
    assert_eq!(f.status, Status::Ok, "{f:?}");
    let f = dry_run(
        &DryRun::Allowed {
            namespace: "shop".into(),
        },
        false,
    );
    assert_eq!(f.status, Status::Ok);
}

#[test]
fn a_dry_run_the_api_server_could_not_deliver_fails_naming_the_cause() {
    let f = refused(
        "Internal error occurred: failed calling webhook \"mutate.policy.sigil.dev\": failed to \
         call webhook: Post \"https://127.0.0.1:4444/mutate?timeout=5s\": tls: failed to verify \
         certificate: x509: certificate signed by unknown authority",
    );
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("TLS verification failed"), "{f:?}");
    let f = refused(
        "Internal error occurred: failed calling webhook \"mutate.policy.sigil.dev\": failed to \
         call webhook: Post \"https://127.0.0.1:4444/mutate?timeout=5s\": dial tcp \
         127.0.0.1:4444: connect: connection refused",
    );
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("nothing answers"), "{f:?}");
    assert!(
        f.fix
            .as_deref()
            .is_some_and(|x| x.contains("failurePolicy"))
    );
    let timed_out = "Internal error occurred: failed calling webhook \"validate.policy.sigil.dev\": \
         failed to call webhook: Post \"https://x/validate\": context deadline exceeded";
    let f = refused(timed_out);
    assert!(
        f.summary.contains("did not answer within timeoutSeconds"),
        "{f:?}"
    );
    // A Service without a ready endpoint can make the call time out rather
    // than be refused: the cause is then the missing endpoint, not latency.
    let f = refused_with(timed_out, true);
    assert!(f.summary.contains("nothing answers"), "{f:?}");
    assert!(
        f.fix
            .as_deref()
            .is_some_and(|x| x.contains("see the endpoints check"))
    );
}

#[test]
fn a_dry_run_refused_for_other_reasons_warns_and_no_namespace_skips() {
    let f = refused("pods is forbidden: User \"bob\" cannot create resource \"pods\"");
    assert_eq!(f.status, Status::Warn);
    assert!(f.summary.contains("forbidden"), "{f:?}");
    assert_eq!(dry_run(&DryRun::NoNamespace, false).status, Status::Skip);
}

#[test]
fn a_snapshot_holding_every_ready_policy_passes() {
    let cips = [
        policy("a", 2, ("True", "Compiled", "")),
        policy("b", 1, ("False", "Invalid", "bad glob")),
    ];
    let f = snapshot(
        Ok(facts(7, &[("a", 2)])),
        &cips,
        Some(&lease("ctrl-1", 2)),
        now(),
    );
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.summary.contains("revision 7 (90s old)"), "{f:?}");
    assert!(
        f.details
            .iter()
            .any(|d| d.contains("ctrl-1 renewed its Lease 2s ago")),
        "{f:?}"
    );
}

#[test]
fn a_snapshot_missing_a_ready_policy_or_behind_its_generation_is_stale() {
    let cips = [
        policy("a", 3, ("True", "Compiled", "")),
        policy("new", 1, ("True", "Compiled", "")),
    ];
    let f = snapshot(
        Ok(facts(7, &[("a", 2), ("gone", 1)])),
        &cips,
        Some(&lease("ctrl-1", 2)),
        now(),
    );
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("is stale: 3 of"), "{f:?}");
    let all = f.details.join("\n");
    assert!(
        all.contains("new (generation 1) is Ready and is not in the snapshot"),
        "{all}"
    );
    assert!(
        all.contains("a is Ready at generation 3 but the snapshot holds generation 2"),
        "{all}"
    );
    assert!(
        all.contains("still enforces ClusterImagePolicy gone"),
        "{all}"
    );
    assert!(
        f.fix
            .as_deref()
            .is_some_and(|x| x.contains("has not published")),
        "{f:?}"
    );
}

#[test]
fn a_stale_snapshot_with_a_released_lease_says_to_start_the_controller() {
    let cips = [policy("new", 1, ("True", "Compiled", ""))];
    let f = snapshot(Ok(facts(7, &[])), &cips, Some(&lease("", 0)), now());
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.fix
            .as_deref()
            .is_some_and(|x| x.contains("start sigil-controller")),
        "{f:?}"
    );
    let f = snapshot(Ok(facts(7, &[])), &cips, Some(&lease("ctrl-1", 600)), now());
    assert!(
        f.details.iter().any(|d| d.contains("it is not running")),
        "{f:?}"
    );
    assert!(
        f.fix
            .as_deref()
            .is_some_and(|x| x.contains("start sigil-controller")),
        "{f:?}"
    );
    // Current, but nobody will publish the next change.
    let f = snapshot(Ok(facts(7, &[])), &[], Some(&lease("", 0)), now());
    assert_eq!(f.status, Status::Warn, "{f:?}");
    let f = snapshot(Err("Secret x does not exist".into()), &[], None, now());
    assert_eq!(f.status, Status::Fail);
}

#[test]
fn a_policy_rejected_at_its_current_generation_is_not_called_stale() {
    let mut p = policy("a", 3, ("False", "Invalid", "bad key"));
    p.observed_generation = Some(3);
    let f = snapshot(Ok(facts(7, &[("a", 2)])), &[p], None, now());
    assert_eq!(
        f.status,
        Status::Ok,
        "the last accepted generation stays: {f:?}"
    );
}

#[test]
fn a_policy_the_controller_has_not_compiled_is_stale() {
    let mut p = policy("a", 1, ("True", "x", ""));
    p.conditions.clear();
    p.observed_generation = None;
    let f = snapshot(Ok(facts(7, &[])), &[p], None, now());
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(
        f.details
            .iter()
            .any(|d| d.contains("a (generation 1) was not compiled yet and is not in the snapshot")),
        "{f:?}"
    );
}

#[test]
fn the_revision_metric_is_read_from_openmetrics_text() {
    let text = "# HELP sigil_policy_snapshot_revision Revision\n# TYPE sigil_policy_snapshot_revision gauge\nsigil_policy_snapshot_revision 42\nsigil_policy_snapshot_revision_other 1\n";
    assert_eq!(revision_metric(text), Some(42));
    assert_eq!(
        revision_metric("sigil_policy_snapshot_revision -1\n"),
        Some(-1)
    );
    assert_eq!(
        revision_metric("sigil_policy_snapshot_age_seconds 3.0\n"),
        None
    );
}

#[test]
fn replicas_behind_the_secret_fail_and_unreadable_ones_warn() {
    let ok = Loaded {
        replica: "pod a".into(),
        revision: Ok(Some(7)),
    };
    let behind = Loaded {
        replica: "pod b".into(),
        revision: Ok(Some(6)),
    };
    let none = Loaded {
        replica: "pod c".into(),
        revision: Ok(Some(-1)),
    };
    let f = loaded(Some(7), &[ok.clone(), behind], None);
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.starts_with("1 of 2 webhook replica(s)"), "{f:?}");
    assert!(
        f.details
            .contains(&"pod b: revision 6, the Secret holds 7".to_owned()),
        "{f:?}"
    );
    let f = loaded(Some(7), &[none], None);
    assert_eq!(f.status, Status::Fail);
    assert!(f.details[0].contains("no snapshot loaded"), "{f:?}");
    let old = Loaded {
        replica: "pod d".into(),
        revision: Ok(None),
    };
    assert_eq!(
        loaded(Some(7), &[ok.clone(), old], None).status,
        Status::Warn
    );
    assert_eq!(loaded(Some(7), &[ok], None).status, Status::Ok);
    assert_eq!(loaded(Some(7), &[], None).status, Status::Fail);
    assert_eq!(loaded(Some(7), &[], Some("by URL")).status, Status::Skip);
}

#[test]
fn a_policy_that_is_not_ready_fails_with_its_reason() {
    let f = policies(&[
        policy("good", 1, ("True", "Compiled", "")),
        policy("bad", 2, ("False", "Invalid", "spec.images[0].glob: empty")),
    ]);
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.summary
            .starts_with("1 of 2 ClusterImagePolicies are not Ready"),
        "{f:?}"
    );
    assert!(
        f.details
            .iter()
            .any(|d| d == "bad (mode enforce, generation 2): Ready=False (Invalid): spec.images[0].glob: empty"),
        "{f:?}"
    );
    let mut unknown = policy("new", 1, ("True", "x", ""));
    unknown.conditions.clear();
    assert_eq!(
        policies(&[unknown]).status,
        Status::Fail,
        "no status yet is not Ready"
    );
    assert_eq!(policies(&[]).status, Status::Warn);
}

#[test]
fn trust_roots_not_ready_fail_and_not_fresh_warn() {
    let mut stale = policy("corp", 1, ("True", "Loaded", ""));
    stale.conditions.insert(
        "Fresh".into(),
        (
            "False".into(),
            "MirrorUnreachable".into(),
            "GET failed".into(),
        ),
    );
    stale.note = "remote".into();
    let f = trust_roots(&[stale.clone()]);
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(
        f.details[0].contains("Fresh=False (MirrorUnreachable): GET failed"),
        "{f:?}"
    );
    let broken = policy("bad", 1, ("False", "Invalid", "no tlogs"));
    assert_eq!(trust_roots(&[stale.clone(), broken]).status, Status::Fail);
    let f = tuf(Some(&facts(1, &[])), &[stale]);
    assert_eq!(f.status, Status::Warn);
    assert!(f.summary.contains("corp"), "{f:?}");
}

#[test]
fn an_embedded_sigstore_root_warns_unless_a_default_trust_root_replaces_it() {
    let mut s = facts(1, &[]);
    assert_eq!(tuf(Some(&s), &[]).status, Status::Ok);
    s.sigstore = Some(("public-good".into(), "embedded".into()));
    let f = tuf(Some(&s), &[]);
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.details.iter().any(|d| d.contains("--tuf-offline")),
        "{f:?}"
    );
    s.default_trust_root = Some("corp".into());
    assert_eq!(tuf(Some(&s), &[]).status, Status::Ok);
    assert_eq!(tuf(None, &[]).status, Status::Skip);
}

#[test]
fn namespaces_are_split_into_enforced_and_not() {
    let all = vec![
        (
            "shop".to_owned(),
            labels(&[
                ("policy.sigil.dev/include", "true"),
                ("kubernetes.io/metadata.name", "shop"),
            ]),
        ),
        (
            "dev".to_owned(),
            labels(&[("kubernetes.io/metadata.name", "dev")]),
        ),
        (
            "sigil-system".to_owned(),
            labels(&[
                ("policy.sigil.dev/include", "true"),
                ("kubernetes.io/metadata.name", "sigil-system"),
            ]),
        ),
    ];
    let excluded = vec!["kube-system".to_owned(), "sigil-system".to_owned()];
    let (f, enforced) = namespaces(Some(&opt_in()), &all, &excluded);
    assert_eq!(f.status, Status::Ok);
    assert_eq!(enforced, vec!["shop".to_owned()]);
    assert_eq!(f.details[0], "enforced: shop");
    assert_eq!(f.details[1], "not enforced: dev, sigil-system");
    let (f, enforced) = namespaces(Some(&opt_in()), &all[1..], &excluded);
    assert_eq!(f.status, Status::Warn);
    assert!(enforced.is_empty());
}

#[test]
fn long_namespace_lists_are_cut() {
    let names: Vec<String> = (0..25).map(|i| format!("ns{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let line = listed(&refs);
    assert!(line.ends_with("ns19 … and 5 more"), "{line}");
    assert_eq!(listed(&[]), "(none)");
}

#[test]
fn durations_read_as_people_say_them() {
    assert_eq!(human(Duration::from_secs(59)), "59s");
    assert_eq!(human(Duration::from_secs(600)), "10m");
    assert_eq!(human(Duration::from_secs(3 * 3600)), "3h");
    assert_eq!(human(Duration::from_secs(3 * 86_400)), "3d");
}

#[test]
fn policy_controllers_objects_are_ok_when_sigil_or_policy_controller_enforces_them() {
    assert_eq!(policy_controller(None, false).status, Status::Ok);
    let enforced = [policy(
        "github-policy",
        1,
        ("True", "Enforced", "enforced by sigil"),
    )];
    let f = policy_controller(Some(&enforced), false);
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.summary.contains("served by sigil"), "{}", f.summary);
    // Not served by sigil, but policy-controller's webhook is there.
    let theirs = [policy("p", 1, ("True", "Ready", ""))];
    assert_eq!(policy_controller(Some(&theirs), true).status, Status::Ok);
}

#[test]
fn policy_controllers_objects_nobody_enforces_are_a_warning_naming_the_value_to_set() {
    let orphans = [policy("p", 1, ("True", "Ready", ""))];
    let f = policy_controller(Some(&orphans), false);
    assert_eq!(f.status, Status::Warn);
    assert!(f.summary.contains("enforced by nobody"), "{}", f.summary);
    assert!(f.fix.unwrap().contains("policyController.serve=true"));
}

#[test]
fn a_served_object_sigil_does_not_enforce_fails_naming_it() {
    let items = [
        policy("ok", 1, ("True", "Enforced", "")),
        policy(
            "bad",
            1,
            ("False", "NotEnforced", "TrustRoot github not found"),
        ),
    ];
    let f = policy_controller(Some(&items), false);
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.summary.contains("1 of 2") && f.summary.contains("bad"),
        "{}",
        f.summary
    );
    // policy-controller installed next to sigil: a warning, not a failure.
    let yielded = [policy(
        "p",
        1,
        (
            "False",
            "PolicyControllerPresent",
            "policy-controller enforces it",
        ),
    )];
    let f = policy_controller(Some(&yielded), true);
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(f.fix.unwrap().contains("uninstall policy-controller"));
}

fn credential_answer(provider: Option<&str>, ok: bool, error: Option<&str>) -> CredentialAnswer {
    CredentialAnswer {
        provider: provider.map(str::to_owned),
        source: "IRSA: role arn:aws:iam::123456789012:role/sigil".into(),
        ok,
        seconds_left: ok.then_some(43_000),
        error: error.map(str::to_owned),
    }
}

#[test]
fn registry_credentials_fail_when_a_provider_serving_a_host_cannot_get_a_token() {
    let ok = CredentialFacts {
        host: "123456789012.dkr.ecr.us-east-1.amazonaws.com".into(),
        answer: Ok(credential_answer(Some("ecr"), true, None)),
    };
    let anonymous = CredentialFacts {
        host: "ghcr.io".into(),
        answer: Ok(credential_answer(
            None,
            false,
            Some("no credential provider serves this host"),
        )),
    };
    let f = registry_credentials(
        Some("pod sigil-webhook-0"),
        &[ok.clone(), anonymous.clone()],
    );
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(
        f.details[0].contains("a token can be had (11h left)"),
        "{:?}",
        f.details
    );
    assert!(
        f.details[1].contains("pull secrets, or anonymous"),
        "{:?}",
        f.details
    );
    let failing = CredentialFacts {
        host: "reg.azurecr.io".into(),
        answer: Ok(credential_answer(
            Some("acr"),
            false,
            Some("acr credentials: Entra ID token failed: no source is configured; annotate it"),
        )),
    };
    let f = registry_credentials(Some("pod sigil-webhook-0"), &[ok, failing]);
    assert_eq!(f.status, Status::Fail);
    assert!(f.summary.contains("reg.azurecr.io"), "{}", f.summary);
    assert!(
        f.details[1].contains("no source is configured; annotate it"),
        "{:?}",
        f.details
    );
    // Nothing in the report is a token: the answer has none to show.
    assert_eq!(registry_credentials(None, &[]).status, Status::Skip);
    assert_eq!(registry_credentials(Some("pod x"), &[]).status, Status::Ok);
}
