//! Rego policies as policy-controller defines them: a module in package
//! `sigstore` whose rule `isCompliant` is either a boolean or an object
//! `{result: bool, error: string, warning: string}`. Modules are parsed once,
//! at compile time, with regorus; each evaluation runs on a clone of the
//! prepared engine under a time limit.
//!
//! Both Rego syntaxes are accepted: v1 (OPA 1.0's default, `if` required)
//! and v0 (`isCompliant { … }`), which most published policy-controller
//! policies still use.

use std::num::NonZeroU32;
use std::time::Duration;

use regorus::utils::limits::ExecutionTimerConfig;

/// The rule every sigil Rego policy defines.
pub const QUERY: &str = "data.sigstore.isCompliant";

/// Longest Rego module accepted (1 MiB).
const MAX_MODULE_BYTES: usize = 1 << 20;

/// Wall-clock budget of one evaluation.
const EVAL_LIMIT: Duration = Duration::from_secs(1);

/// Why a Rego module was refused or could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegoError {
    /// The module does not parse as Rego v1 or v0.
    #[error("invalid Rego: {0}")]
    Parse(String),
    /// The module is not in package `sigstore`.
    #[error(
        "the Rego module declares package {found}; sigil (like policy-controller) evaluates \
         `data.sigstore.isCompliant`, so write `package sigstore`"
    )]
    Package {
        /// The package(s) found.
        found: String,
    },
    /// The module has no `isCompliant` rule.
    #[error(
        "the Rego module defines no `isCompliant` rule; add `default isCompliant := false` and the rule"
    )]
    NoRule,
    /// The module is larger than 1 MiB.
    #[error("the Rego module is {0} bytes; the limit is 1 MiB")]
    TooLarge(usize),
    /// Evaluation failed (a builtin error, the time limit, …).
    #[error("Rego evaluation failed: {0}")]
    Eval(String),
    /// `isCompliant` is neither a boolean nor a `{result, error, warning}` object.
    #[error(
        "isCompliant evaluated to {0}; it must be a boolean or an object \
         {{\"result\": bool, \"error\": string, \"warning\": string}}"
    )]
    Shape(String),
}

/// A compiled Rego policy.
#[derive(Clone)]
pub struct RegoPolicy {
    name: String,
    engine: regorus::Engine,
}

impl std::fmt::Debug for RegoPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegoPolicy")
            .field("name", &self.name)
            .finish()
    }
}

/// The outcome of one evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegoVerdict {
    /// Whether `isCompliant` (or its `result`) is true.
    pub compliant: bool,
    /// The policy's `error` text, when it gave one.
    pub error: Option<String>,
    /// The policy's `warning` text, when it gave one.
    pub warning: Option<String>,
}

impl RegoPolicy {
    /// Parses `source`, requiring package `sigstore` and rule `isCompliant`.
    /// `name` labels the module in messages.
    pub fn compile(name: &str, source: &str) -> Result<Self, RegoError> {
        if source.len() > MAX_MODULE_BYTES {
            return Err(RegoError::TooLarge(source.len()));
        }
        let path = format!("{name}.rego");
        let engine = match load(&path, source, false) {
            Ok(engine) => engine,
            // Fall back to v0 syntax; report the v1 error when both fail, as
            // v1 is what new policies should be written in.
            Err(v1_error) => load(&path, source, true).map_err(|_| RegoError::Parse(v1_error))?,
        };
        let packages = engine
            .get_packages()
            .map_err(|e| RegoError::Parse(e.to_string()))?;
        if packages.iter().any(|p| p != "data.sigstore") || packages.is_empty() {
            return Err(RegoError::Package {
                found: packages.join(", "),
            });
        }
        if !engine
            .has_declared_rule_rooted_at(&path, "isCompliant")
            .map_err(|e| RegoError::Parse(e.to_string()))?
        {
            return Err(RegoError::NoRule);
        }
        Ok(Self {
            name: name.to_owned(),
            engine,
        })
    }

    /// The module's label.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Evaluates `isCompliant` with `input`. An undefined result is
    /// non-compliant (write `default isCompliant := false` to make that explicit).
    pub fn evaluate(&self, input: &serde_json::Value) -> Result<RegoVerdict, RegoError> {
        let mut engine = self.engine.clone();
        engine.set_input(regorus::Value::from(input.clone()));
        let value = engine
            .eval_rule(QUERY.to_owned())
            .map_err(|e| RegoError::Eval(e.to_string()))?;
        if value == regorus::Value::Undefined {
            return Ok(RegoVerdict {
                compliant: false,
                error: Some("isCompliant is undefined for this input".into()),
                warning: None,
            });
        }
        let json: serde_json::Value = serde_json::to_value(&value)
            .map_err(|e| RegoError::Eval(format!("result is not JSON: {e}")))?;
        verdict_from_json(&json)
    }
}

fn load(path: &str, source: &str, v0: bool) -> Result<regorus::Engine, String> {
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(v0);
    engine.set_execution_timer_config(ExecutionTimerConfig {
        limit: EVAL_LIMIT,
        check_interval: NonZeroU32::MIN,
    });
    engine
        .add_policy(path.to_owned(), source.to_owned())
        .map_err(|e| e.to_string())?;
    Ok(engine)
}

fn verdict_from_json(json: &serde_json::Value) -> Result<RegoVerdict, RegoError> {
    let text = |v: Option<&serde_json::Value>| {
        v.and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    match json {
        serde_json::Value::Bool(compliant) => Ok(RegoVerdict {
            compliant: *compliant,
            error: None,
            warning: None,
        }),
        serde_json::Value::Object(map) => {
            let compliant = map
                .get("result")
                .and_then(serde_json::Value::as_bool)
                .ok_or_else(|| RegoError::Shape(shorten(json)))?;
            Ok(RegoVerdict {
                compliant,
                error: text(map.get("error")),
                warning: text(map.get("warning")),
            })
        }
        other => Err(RegoError::Shape(shorten(other))),
    }
}

fn shorten(json: &serde_json::Value) -> String {
    let s = json.to_string();
    if s.len() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn a_boolean_is_compliant_rule_in_v1_syntax_evaluates() {
        let p = RegoPolicy::compile(
            "t",
            "package sigstore\ndefault isCompliant := false\nisCompliant if input.predicate.ok == true\n",
        )
        .unwrap();
        assert!(
            p.evaluate(&json!({"predicate": {"ok": true}}))
                .unwrap()
                .compliant
        );
        assert!(
            !p.evaluate(&json!({"predicate": {"ok": false}}))
                .unwrap()
                .compliant
        );
    }

    #[test]
    fn v0_syntax_as_policy_controller_examples_use_it_is_accepted() {
        let p = RegoPolicy::compile(
            "t",
            "package sigstore\ndefault isCompliant = false\nisCompliant {\n  input.predicate.ok == true\n}\n",
        )
        .unwrap();
        assert!(
            p.evaluate(&json!({"predicate": {"ok": true}}))
                .unwrap()
                .compliant
        );
    }

    #[test]
    fn an_object_result_carries_error_and_warning() {
        let p = RegoPolicy::compile(
            "t",
            r#"package sigstore
isCompliant := {"result": false, "error": "too old", "warning": "check builder"}
"#,
        )
        .unwrap();
        let v = p.evaluate(&json!({})).unwrap();
        assert_eq!(
            v,
            RegoVerdict {
                compliant: false,
                error: Some("too old".into()),
                warning: Some("check builder".into())
            }
        );
    }

    #[test]
    fn an_undefined_rule_is_not_compliant() {
        let p =
            RegoPolicy::compile("t", "package sigstore\nisCompliant if input.x == 1\n").unwrap();
        let v = p.evaluate(&json!({})).unwrap();
        assert!(!v.compliant);
        assert!(v.error.unwrap().contains("undefined"));
    }

    #[test]
    fn wrong_package_missing_rule_and_syntax_errors_are_refused() {
        let err = RegoPolicy::compile("t", "package other\nisCompliant := true\n").unwrap_err();
        assert!(matches!(err, RegoError::Package { .. }), "{err}");
        assert!(err.to_string().contains("package sigstore"));
        let err = RegoPolicy::compile("t", "package sigstore\nallow := true\n").unwrap_err();
        assert_eq!(err, RegoError::NoRule);
        let err = RegoPolicy::compile("t", "package sigstore\nisCompliant if {{{\n").unwrap_err();
        assert!(matches!(err, RegoError::Parse(_)), "{err}");
    }

    #[test]
    fn a_non_boolean_result_is_a_shape_error() {
        let p = RegoPolicy::compile("t", "package sigstore\nisCompliant := 3\n").unwrap();
        let err = p.evaluate(&json!({})).unwrap_err();
        assert!(matches!(err, RegoError::Shape(_)), "{err}");
    }
}
