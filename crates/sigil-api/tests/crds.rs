//! The CRDs checked into the chart must be what `crdgen` generates now.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

#[test]
fn checked_in_crds_match_the_rust_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (name, generated) in sigil_api::crds::crd_files().unwrap() {
        let path = root.join(sigil_api::crds::CRD_DIR).join(name);
        let checked_in = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        assert!(
            checked_in == generated,
            "{} is stale; run `cargo run -p sigil-api --bin crdgen` and commit the result",
            path.display()
        );
    }
}

#[test]
fn generated_crds_parse_back_with_their_cel_rules_and_printer_columns() {
    for (name, yaml) in sigil_api::crds::crd_files().unwrap() {
        let crd: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha1", "{name}");
        let scope = if matches!(name, "imagepolicies.yaml" | "imagepolicyexceptions.yaml") {
            "Namespaced"
        } else {
            "Cluster"
        };
        assert_eq!(crd["spec"]["scope"], scope, "{name}");
        assert!(yaml.contains("x-kubernetes-validations"), "{name}");
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        // An exception has no status: whoever enforces it decides, by its
        // own clock, whether it counts; its expiry is the column.
        let state = if name == "imagepolicyexceptions.yaml" {
            "Expires"
        } else {
            "Ready"
        };
        assert!(
            columns.contains(&state) && columns.contains(&"Age"),
            "{name}"
        );
    }
}

#[test]
fn cluster_image_policies_have_the_cip_short_name_and_a_mode_column() {
    let files = sigil_api::crds::crd_files().unwrap();
    let (_, yaml) = files
        .iter()
        .find(|(n, _)| *n == "clusterimagepolicies.yaml")
        .unwrap();
    let crd: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
    assert_eq!(crd["spec"]["names"]["shortNames"][0], "cip");
    assert!(yaml.contains("exactly one of key, keyless, notation or static must be set"));
    assert!(yaml.contains("jsonPath: .spec.mode"));
}
