//! Policy YAML: ClusterImagePolicy and TrustRoot documents through `sigil
//! policy lint` (parse, unknown fields, compile, trust-root validation) and
//! `sigil policy convert`, whose YAML must parse back to exactly the
//! converted objects; and the policy snapshot the webhook reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sigil_api::snapshot::PolicySnapshot;
use sigil_compile::convert::{SOURCE_VERSIONS, convert_document, convert_yaml};
use sigil_compile::lint::lint_yaml;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = PolicySnapshot::from_slice(data) {
        let json = s.to_json();
        let again =
            PolicySnapshot::from_slice(json.as_bytes()).expect("a snapshot's own JSON parses");
        assert_eq!(again.to_json(), json, "snapshot JSON is not stable");
        let _ = sigil_compile::snapshot::validate(&s);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = lint_yaml(text);
    let Ok(conversion) = convert_yaml(text) else {
        return;
    };
    let expected: Vec<Value> = serde_saphyr::from_multiple::<Value>(text)
        .expect("convert parsed it")
        .iter()
        .filter(|d| {
            SOURCE_VERSIONS.contains(&d.get("apiVersion").and_then(Value::as_str).unwrap_or(""))
                && matches!(
                    d.get("kind").and_then(Value::as_str),
                    Some("ClusterImagePolicy" | "TrustRoot")
                )
        })
        .map(|d| convert_document(d).0)
        .collect();
    let back: Vec<Value> = serde_saphyr::from_multiple(&conversion.yaml).unwrap_or_else(|e| {
        panic!(
            "convert wrote YAML that does not parse ({e}):\n{}",
            conversion.yaml
        )
    });
    assert_eq!(
        back, expected,
        "convert's YAML does not parse back to the converted objects:\n{}",
        conversion.yaml
    );
});
