//! CUE policies (`policy.type: cue`): the policy text, checked once when the
//! ClusterImagePolicy is compiled (it must compile on its own, as
//! policy-controller's first evaluation step requires) and evaluated
//! through [`sigil_cue`] against the document policy-controller would build
//! ([`crate::document`]). Messages keep policy-controller's text
//! (`failed evaluating cue policy for <name>: …`, which alerts and
//! policy-controller's own tests match) and add where in the
//! ClusterImagePolicy the policy is and the line in it.

use std::sync::Arc;

use sigil_cue::CueEngine;
pub use sigil_cue::{CueFailure, Diagnostics};

/// The name policy-controller gives the ClusterImagePolicy-level policy in
/// its messages.
pub const CIP_LEVEL_NAME: &str = "ClusterImagePolicy";

/// A CUE policy, checked and ready to evaluate.
#[derive(Clone)]
pub struct CuePolicy {
    name: String,
    field: String,
    text: Arc<str>,
    engine: CueEngine,
}

impl std::fmt::Debug for CuePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuePolicy")
            .field("name", &self.name)
            .field("field", &self.field)
            .finish_non_exhaustive()
    }
}

impl CuePolicy {
    /// Checks `text` with the process's engine ([`sigil_cue::shared`]).
    /// `name` is the attestation's name, or [`CIP_LEVEL_NAME`]; `field` is
    /// where the text is in the ClusterImagePolicy
    /// (`spec.authorities[0].attestations[1].policy.data`). The error is the
    /// engine's: the policy does not compile alone, exceeds a bound, or the
    /// process has no CUE module.
    pub fn compile(name: &str, field: &str, text: &str) -> Result<Self, CueFailure> {
        Self::compile_with(sigil_cue::shared(), name, field, text)
    }

    /// [`CuePolicy::compile`] on a given engine.
    pub fn compile_with(
        engine: &CueEngine,
        name: &str,
        field: &str,
        text: &str,
    ) -> Result<Self, CueFailure> {
        engine.compile(text)?;
        Ok(Self {
            name: name.to_owned(),
            field: field.to_owned(),
            text: Arc::from(text),
            engine: engine.clone(),
        })
    }

    /// The name messages use.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Evaluates the policy on `document` (Go's JSON encoding of it). The
    /// work runs on the engine's threads; this only waits.
    pub async fn evaluate(&self, document: &str) -> Result<(), String> {
        self.engine
            .evaluate_async(&self.text, document.as_bytes())
            .await
            .map_err(|failure| self.describe(&failure))
    }

    /// policy-controller's message for `failure`, with sigil's location.
    pub fn describe(&self, failure: &CueFailure) -> String {
        describe(&self.name, &self.field, failure)
    }
}

/// `failed evaluating cue policy for <name>: <what>`, then where: the field
/// and, for a CUE error, the first line and column in the policy text it
/// names.
pub fn describe(name: &str, field: &str, failure: &CueFailure) -> String {
    let position = failure
        .diagnostics()
        .and_then(sigil_cue::Diagnostics::first_position)
        .map(|p| format!(", line {} column {}", p.line, p.column))
        .unwrap_or_default();
    format!("failed evaluating cue policy for {name}: {failure} (policy at {field}{position})")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use sigil_cue::testing;

    fn engine() -> CueEngine {
        testing::engine().unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_violation_keeps_policy_controllers_text_and_adds_the_field_and_line() {
        let p = CuePolicy::compile_with(
            &engine(),
            "signed-by-ci",
            "spec.authorities[0].attestations[0].policy.data",
            "predicate: {\n  Data: \"ci\"\n}\n",
        )
        .unwrap();
        let doc =
            r#"{"_type":"t","predicateType":"p","subject":null,"predicate":{"Data":"laptop"}}"#;
        let message = p.evaluate(doc).await.unwrap_err();
        assert_eq!(
            message,
            "failed evaluating cue policy for signed-by-ci: failed to evaluate the policy with \
             error: predicate.Data: conflicting values \"laptop\" and \"ci\" (policy at \
             spec.authorities[0].attestations[0].policy.data, line 2 column 9)"
        );
    }

    #[test]
    fn a_policy_that_does_not_compile_alone_is_refused_when_compiled() {
        let failure = CuePolicy::compile_with(
            &engine(),
            CIP_LEVEL_NAME,
            "spec.policy.data",
            "authorityMatches: {}\nif authorityMatches.x.y != 1 { fail: true }\n",
        )
        .unwrap_err();
        assert!(
            failure
                .to_string()
                .starts_with("failed to compile the cue policy with error: "),
            "{failure}"
        );
    }
}
