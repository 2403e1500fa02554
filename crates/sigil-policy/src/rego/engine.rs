//! regorus itself: loading a module (v1 syntax, else v0), the checks every
//! sigil Rego module must pass, and one evaluation of `isCompliant` into a
//! [`RegoVerdict`]. The parent process only loads (to refuse a bad module
//! when its policy is compiled); evaluation runs in a worker process
//! ([`super::worker`]), never in the process that serves admission.

use std::num::NonZeroU32;
use std::time::Duration;

use regorus::utils::limits::{ExecutionTimerConfig, LimitError};

use super::{MAX_MODULE_BYTES, QUERY, RegoError, RegoVerdict};

/// Deepest nesting of brackets (`(`, `[`, `{`) a module may hold, and most
/// `-` signs in a row (only blanks and comments between them). regorus
/// (0.14) parses both by recursion without a bound that holds (its limit
/// of 32 nested expressions is not checked on every path, and a unary
/// minus is outside it): a module of a few KiB overflowed the stack of the
/// process compiling it, which aborts that process. It also parses each
/// `[` and `{` twice over (a comprehension first, then an array, set or
/// object), so its time doubles with each level: 16 levels took 3 s and
/// 20 levels 50 s to compile (debug build, 2026-12-07), hence 12.
pub(super) const MAX_NESTING: usize = 12;
/// See [`MAX_NESTING`].
pub(super) const MAX_MINUS_RUN: usize = 32;

/// A module loaded into an engine, ready to evaluate (on a clone).
pub(super) fn load(name: &str, source: &str, time: Duration) -> Result<regorus::Engine, RegoError> {
    if source.len() > MAX_MODULE_BYTES {
        return Err(RegoError::TooLarge(source.len()));
    }
    if let Some(problem) = too_deep(source) {
        return Err(RegoError::Parse(problem));
    }
    let path = format!("{name}.rego");
    let engine = match load_syntax(&path, source, false, time) {
        Ok(engine) => engine,
        // Fall back to v0 syntax; report the v1 error when both fail, as
        // v1 is what new policies should be written in.
        Err(v1_error) => {
            load_syntax(&path, source, true, time).map_err(|_| RegoError::Parse(v1_error))?
        }
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
    Ok(engine)
}

/// Where `source` nests brackets deeper than [`MAX_NESTING`], or holds a
/// run of more than [`MAX_MINUS_RUN`] `-` signs, outside strings and
/// comments (blanks and comments do not end a run): the line and the bound.
fn too_deep(source: &str) -> Option<String> {
    let mut run = 0usize;
    let mut depth = 0usize;
    let mut line = 1usize;
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            ' ' | '\t' | '\r' => {}
            '#' => {
                if chars.by_ref().any(|c| c == '\n') {
                    line += 1;
                }
            }
            '"' => {
                run = 0;
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' | '\n' => break,
                        _ => {}
                    }
                }
            }
            '`' => {
                run = 0;
                for c in chars.by_ref() {
                    match c {
                        '`' => break,
                        '\n' => line += 1,
                        _ => {}
                    }
                }
            }
            '-' => {
                run += 1;
                if run > MAX_MINUS_RUN {
                    return Some(format!(
                        "line {line} has more than {MAX_MINUS_RUN} `-` signs in a row; sigil \
                         accepts at most {MAX_MINUS_RUN}"
                    ));
                }
            }
            '(' | '[' | '{' => {
                run = 0;
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(format!(
                        "line {line} nests brackets more than {MAX_NESTING} deep; sigil accepts \
                         at most {MAX_NESTING}"
                    ));
                }
            }
            ')' | ']' | '}' => {
                run = 0;
                depth = depth.saturating_sub(1);
            }
            _ => run = 0,
        }
    }
    None
}

fn load_syntax(
    path: &str,
    source: &str,
    v0: bool,
    time: Duration,
) -> Result<regorus::Engine, String> {
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(v0);
    // regorus' own timer stops loops of its interpreter cleanly; it is not
    // checked inside built-ins, which is why the worker's parent also kills
    // the worker at its deadline.
    engine.set_execution_timer_config(ExecutionTimerConfig {
        limit: time,
        check_interval: NonZeroU32::MIN,
    });
    // `print` would write to stderr; what a policy prints is nobody's log.
    engine.set_gather_prints(true);
    engine
        .add_policy(path.to_owned(), source.to_owned())
        .map_err(|e| e.to_string())?;
    Ok(engine)
}

/// Evaluates `isCompliant` on a clone of `prepared` with `input` (JSON
/// text). An undefined result is non-compliant (write `default
/// isCompliant := false` to make that explicit).
pub(super) fn evaluate(
    prepared: &regorus::Engine,
    input: &str,
    time: Duration,
) -> Result<RegoVerdict, RegoError> {
    let input = regorus::Value::from_json_str(input)
        .map_err(|e| RegoError::Eval(format!("the input is not JSON: {e}")))?;
    let mut engine = prepared.clone();
    engine.set_input(input);
    let value =
        engine
            .eval_rule(QUERY.to_owned())
            .map_err(|e| match e.downcast_ref::<LimitError>() {
                Some(LimitError::TimeLimitExceeded { .. }) => RegoError::TimeLimit { limit: time },
                _ => RegoError::Eval(e.to_string()),
            })?;
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
