//! sigil-testdata: where the public test data that sigil's tests read at run
//! time lives. The data is never copied into the repository; it is found in
//! this order:
//!
//! 1. `$SIGIL_SHARED_DIR`, a directory laid out like the project's `shared/`
//!    folder (`sigstore-conformance/bundle-verify`, `policy-controller-testdata`);
//! 2. a `shared/` directory beside the checkout or any directory above it
//!    (so the main checkout and git worktrees alike find `../shared`);
//! 3. `<checkout>/.cache/testdata/shared`, where `scripts/fetch-testdata.sh`
//!    puts the upstream files at the pinned commits below.
//!
//! A missing data set is an error value that says where it looked and what to
//! run, so a test can fail with that message instead of a panic about a
//! directory. This crate is dev-only and depends on nothing.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};

/// The environment variable naming a `shared/`-shaped directory.
pub const SHARED_DIR_ENV: &str = "SIGIL_SHARED_DIR";

/// A public data set the tests read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    /// The sigstore-conformance bundle-verification cases.
    SigstoreConformance,
    /// policy-controller's example ClusterImagePolicies.
    PolicyControllerTestdata,
    /// GitHub's `trust-policies` Helm chart (policy-controller objects that
    /// enforce GitHub's artifact attestations).
    GithubTrustPolicies,
    /// notation-core-go's test data (JWS and COSE conformance envelopes,
    /// CRLs, timestamp tokens, X.509 files), laid out as in its repository.
    NotationCoreGo,
}

impl Dataset {
    /// Where the data set sits inside a `shared/`-shaped directory.
    pub fn shared_path(self) -> &'static str {
        match self {
            Self::SigstoreConformance => "sigstore-conformance/bundle-verify",
            Self::PolicyControllerTestdata => "policy-controller-testdata",
            Self::GithubTrustPolicies => "github-trust-policies/charts/trust-policies",
            Self::NotationCoreGo => "notation-core-go-testdata",
        }
    }

    /// The upstream repository, commit and folder the data set comes from;
    /// `scripts/fetch-testdata.sh` pins the same values.
    pub fn upstream(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::SigstoreConformance => (
                "https://github.com/sigstore/sigstore-conformance",
                "a73de4970176d258e0154c530b89d20b89444e4d",
                "test/assets/bundle-verify",
            ),
            Self::PolicyControllerTestdata => (
                "https://github.com/sigstore/policy-controller",
                "f925c0c1a412910787a7f045581fa9d5ed09a20a",
                "test/testdata/policy-controller",
            ),
            Self::GithubTrustPolicies => (
                "https://github.com/github/artifact-attestations-helm-charts",
                "d437a7baac41a048fd3da4f841ca2cb0020748cb",
                "charts/trust-policies",
            ),
            Self::NotationCoreGo => (
                "https://github.com/notaryproject/notation-core-go",
                "ef8789627fc3c764e1563a2999b33381e7992963",
                ".",
            ),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::SigstoreConformance => "the sigstore-conformance bundle-verification cases",
            Self::PolicyControllerTestdata => "policy-controller's example ClusterImagePolicies",
            Self::GithubTrustPolicies => "GitHub's trust-policies Helm chart",
            Self::NotationCoreGo => "notation-core-go's test data",
        }
    }
}

/// A data set was found nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    dataset: Dataset,
    looked_in: Vec<PathBuf>,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (repo, commit, folder) = self.dataset.upstream();
        write!(f, "{} were not found; looked in ", self.dataset.describe())?;
        for (i, p) in self.looked_in.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{}", p.display())?;
        }
        write!(
            f,
            ". Run `scripts/fetch-testdata.sh` to fetch them ({repo} at commit {commit}, \
             folder {folder}), or set {SHARED_DIR_ENV} to a directory holding {}",
            self.dataset.shared_path()
        )
    }
}

impl std::error::Error for Missing {}

/// Finds `dataset`, or says where it looked and what to do.
pub fn locate(dataset: Dataset) -> Result<PathBuf, Missing> {
    let candidates = candidates(
        dataset,
        std::env::var_os(SHARED_DIR_ENV).map(PathBuf::from),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );
    match candidates.iter().find(|p| p.is_dir()) {
        Some(found) => Ok(found.clone()),
        None => Err(Missing {
            dataset,
            looked_in: candidates,
        }),
    }
}

/// GitHub's `trust-policies` chart directory.
pub fn github_trust_policies() -> Result<PathBuf, Missing> {
    locate(Dataset::GithubTrustPolicies)
}

/// notation-core-go's tree (its `*/testdata` folders).
pub fn notation_core_go() -> Result<PathBuf, Missing> {
    locate(Dataset::NotationCoreGo)
}

/// The sigstore-conformance `bundle-verify` directory.
pub fn sigstore_conformance() -> Result<PathBuf, Missing> {
    locate(Dataset::SigstoreConformance)
}

/// policy-controller's `test/testdata/policy-controller` directory.
pub fn policy_controller_testdata() -> Result<PathBuf, Missing> {
    locate(Dataset::PolicyControllerTestdata)
}

/// Every place `dataset` may be, in the order they are tried. `crate_dir` is
/// this crate's directory inside the checkout (`<checkout>/crates/sigil-testdata`).
fn candidates(dataset: Dataset, env_dir: Option<PathBuf>, crate_dir: &Path) -> Vec<PathBuf> {
    let sub = dataset.shared_path();
    let mut out: Vec<PathBuf> = env_dir.into_iter().map(|d| d.join(sub)).collect();
    out.extend(
        crate_dir
            .ancestors()
            .skip(1)
            .map(|a| a.join("shared").join(sub)),
    );
    if let Some(checkout) = crate_dir.ancestors().nth(2) {
        out.push(checkout.join(".cache/testdata/shared").join(sub));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_comes_first_then_shared_dirs_above_the_checkout_then_the_fetch_cache() {
        let got = candidates(
            Dataset::SigstoreConformance,
            Some(PathBuf::from("/data")),
            Path::new("/w/sigil/crates/sigil-testdata"),
        );
        let want: Vec<PathBuf> = [
            "/data/sigstore-conformance/bundle-verify",
            "/w/sigil/crates/shared/sigstore-conformance/bundle-verify",
            "/w/sigil/shared/sigstore-conformance/bundle-verify",
            "/w/shared/sigstore-conformance/bundle-verify",
            "/shared/sigstore-conformance/bundle-verify",
            "/w/sigil/.cache/testdata/shared/sigstore-conformance/bundle-verify",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_missing_data_set_says_where_it_looked_and_what_to_run() {
        let missing = Missing {
            dataset: Dataset::PolicyControllerTestdata,
            looked_in: vec![PathBuf::from("/a/shared/policy-controller-testdata")],
        };
        let text = missing.to_string();
        assert!(
            text.contains("/a/shared/policy-controller-testdata"),
            "{text}"
        );
        assert!(text.contains("scripts/fetch-testdata.sh"), "{text}");
        assert!(
            text.contains("f925c0c1a412910787a7f045581fa9d5ed09a20a"),
            "{text}"
        );
        assert!(text.contains(SHARED_DIR_ENV), "{text}");
    }

    #[test]
    fn the_fetch_script_pins_the_same_commits() {
        let script = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/fetch-testdata.sh"
        ))
        .unwrap_or_else(|e| panic!("scripts/fetch-testdata.sh: {e}"));
        for dataset in [
            Dataset::SigstoreConformance,
            Dataset::PolicyControllerTestdata,
            Dataset::GithubTrustPolicies,
            Dataset::NotationCoreGo,
        ] {
            let (repo, commit, folder) = dataset.upstream();
            let owner_name = repo.trim_start_matches("https://github.com/");
            let line = format!(
                "\"{}|{owner_name}|{commit}|{folder}\"",
                dataset.shared_path()
            );
            assert!(script.contains(&line), "the script lacks {line}");
        }
    }
}
