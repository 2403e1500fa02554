//! docs/threat-model.md cannot go stale: every threat in its tables names at
//! least one test, and every test it names exists in the repository (a Rust
//! `fn` under crates/ or e2e/, or a Python `def` under scripts/).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `fn name` of the Rust sources and `def name` of the Python scripts.
fn defined_names() -> BTreeSet<String> {
    let fn_re = regex::Regex::new(r"\b(?:fn|def)\s+([a-z0-9_]+)").unwrap();
    let mut names = BTreeSet::new();
    let mut stack = vec![
        repo().join("crates"),
        repo().join("e2e"),
        repo().join("scripts"),
    ];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") || name.ends_with(".py") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                names.extend(fn_re.captures_iter(&text).map(|c| c[1].to_string()));
            }
        }
    }
    names
}

/// (threat id, row text, test names) of every threat row.
fn threat_rows(doc: &str) -> Vec<(String, String, Vec<String>)> {
    let id_re = regex::Regex::new(r"^\|\s*([A-Z][0-9]+)\s*\|").unwrap();
    let name_re = regex::Regex::new(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`").unwrap();
    doc.lines()
        .filter_map(|line| {
            let id = id_re.captures(line)?[1].to_string();
            let shown_by = line.trim_end().trim_end_matches('|').rsplit('|').next()?;
            let names = name_re
                .captures_iter(shown_by)
                .map(|c| c[1].to_string())
                .collect();
            Some((id, line.to_string(), names))
        })
        .collect()
}

#[test]
fn every_test_named_in_the_threat_model_exists() {
    let doc = std::fs::read_to_string(repo().join("docs/threat-model.md")).unwrap();
    let rows = threat_rows(&doc);
    assert!(
        rows.len() >= 30,
        "the tables were read: {} threats",
        rows.len()
    );
    let defined = defined_names();
    let mut missing = Vec::new();
    let mut seen = BTreeSet::new();
    for (id, line, names) in &rows {
        assert!(seen.insert(id.clone()), "threat {id} appears twice");
        assert!(!names.is_empty(), "threat {id} names no test: {line}");
        missing.extend(
            names
                .iter()
                .filter(|name| !defined.contains(*name))
                .map(|name| format!("{id}: {name}")),
        );
    }
    assert!(
        missing.is_empty(),
        "docs/threat-model.md names tests that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readme_links_the_threat_model() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(readme.contains("docs/threat-model.md"));
}

#[test]
fn a_renamed_test_would_be_noticed() {
    // The checker itself: a row naming a test that does not exist is caught.
    let rows = threat_rows("| Z1 | t | d | `no_such_test_exists_anywhere_in_sigil` |\n");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].2, vec!["no_such_test_exists_anywhere_in_sigil"]);
    assert!(!defined_names().contains("no_such_test_exists_anywhere_in_sigil"));
}
