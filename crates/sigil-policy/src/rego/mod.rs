//! Rego policies as policy-controller defines them: a module in package
//! `sigstore` whose rule `isCompliant` is either a boolean or an object
//! `{result: bool, error: string, warning: string}`.
//!
//! A module is parsed when its policy is compiled, in this process (the
//! parse is bounded: 1 MiB, regorus' nesting and line limits, and a panic
//! in it is caught), so a bad module is refused with its reason. It is
//! evaluated only in the Rego sandbox ([`sandbox`]): worker processes
//! bounded in memory and time by the kernel, so that no policy text and no
//! document, whoever wrote them, can take the process that serves
//! admission down with it.
//!
//! Both Rego syntaxes are accepted: v1 (OPA 1.0's default, `if` required)
//! and v0 (`isCompliant { … }`), which most published policy-controller
//! policies still use.

mod engine;
pub mod sandbox;
mod wire;
mod worker;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use sandbox::{Limits, RegoSandbox, SandboxConfig, SandboxStats};
pub use worker::{WORKER_ARG, serve_if_requested};

/// The rule every sigil Rego policy defines.
pub const QUERY: &str = "data.sigstore.isCompliant";

/// Longest Rego module accepted (1 MiB).
pub const MAX_MODULE_BYTES: usize = 1 << 20;

/// The stack a module is parsed on in the compiling process.
const PARSE_STACK_BYTES: usize = 64 << 20;

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
    /// Evaluation failed (a built-in's error, an undefined function, …).
    #[error("Rego evaluation failed: {0}")]
    Eval(String),
    /// `isCompliant` is neither a boolean nor a `{result, error, warning}` object.
    #[error(
        "isCompliant evaluated to {0}; it must be a boolean or an object \
         {{\"result\": bool, \"error\": string, \"warning\": string}}"
    )]
    Shape(String),
    /// The evaluation took longer than its time limit.
    #[error(
        "the Rego evaluation exceeded its time limit of {}; simplify the policy or the document",
        duration(*limit)
    )]
    TimeLimit {
        /// The limit.
        limit: Duration,
    },
    /// The evaluation needed more memory than its limit.
    #[error(
        "the Rego evaluation exceeded its memory limit of {mib} MiB; simplify the policy or the \
         document"
    )]
    MemoryLimit {
        /// The limit, in MiB.
        mib: u64,
    },
    /// The document is larger than the sandbox accepts.
    #[error(
        "the document is {size} bytes; sigil evaluates Rego policies on documents up to {limit} bytes"
    )]
    InputTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Every worker is busy and the queue is full.
    #[error("{0} Rego evaluations are already waiting; sigil refuses more until they finish")]
    Busy(usize),
    /// The evaluator failed in a way no bound explains (a panic in a
    /// built-in, a worker that ended).
    #[error("the Rego evaluator failed: {0}")]
    Crashed(String),
    /// No worker could be started.
    #[error("the Rego sandbox cannot start a worker: {0}")]
    Unavailable(String),
}

impl RegoError {
    /// A stable reason, for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Parse(_) => "parse",
            Self::Package { .. } => "package",
            Self::NoRule => "no_rule",
            Self::TooLarge(_) => "too_large",
            Self::Eval(_) => "eval",
            Self::Shape(_) => "shape",
            Self::TimeLimit { .. } => "time_limit",
            Self::MemoryLimit { .. } => "memory_limit",
            Self::InputTooLarge { .. } => "input_too_large",
            Self::Busy(_) => "busy",
            Self::Crashed(_) => "crashed",
            Self::Unavailable(_) => "unavailable",
        }
    }
}

/// `1s`, `250ms`, `1.5s`.
fn duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

/// A compiled Rego policy: its text, checked, and the sandbox that
/// evaluates it.
#[derive(Clone)]
pub struct RegoPolicy {
    name: Arc<str>,
    source: Arc<str>,
    sandbox: RegoSandbox,
}

impl std::fmt::Debug for RegoPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegoPolicy")
            .field("name", &self.name)
            .finish_non_exhaustive()
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
    /// Parses `source`, requiring package `sigstore` and rule `isCompliant`;
    /// it will be evaluated in the process-wide sandbox ([`shared`]).
    /// `name` labels the module in messages.
    pub fn compile(name: &str, source: &str) -> Result<Self, RegoError> {
        Self::compile_with(shared(), name, source)
    }

    /// [`RegoPolicy::compile`] for evaluation in `sandbox`.
    pub fn compile_with(
        sandbox: &RegoSandbox,
        name: &str,
        source: &str,
    ) -> Result<Self, RegoError> {
        let time = sandbox.config().limits.time;
        // On a thread of its own with a stack of known size: within the
        // nesting bounds regorus' recursion fits in it, whatever thread
        // compiles (an async worker's stack is 2 MiB). Only the pages used
        // are ever resident.
        let panicked = || {
            RegoError::Parse(
                "regorus failed on this module (it panicked); simplify the module".into(),
            )
        };
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("sigil-rego-parse".into())
                .stack_size(PARSE_STACK_BYTES)
                .spawn_scoped(scope, || {
                    catch_unwind(AssertUnwindSafe(|| {
                        engine::load(name, source, time).map(drop)
                    }))
                    .unwrap_or_else(|_| Err(panicked()))
                })
                .map_err(|e| RegoError::Unavailable(format!("cannot start a thread: {e}")))?
                .join()
                .unwrap_or_else(|_| Err(panicked()))
        })?;
        Ok(Self {
            name: Arc::from(name),
            source: Arc::from(source),
            sandbox: sandbox.clone(),
        })
    }

    /// The module's label.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Evaluates `isCompliant` with `input` in the sandbox; the future only
    /// waits. An undefined result is non-compliant (write `default
    /// isCompliant := false` to make that explicit).
    pub async fn evaluate(&self, input: &serde_json::Value) -> Result<RegoVerdict, RegoError> {
        let input = serde_json::to_vec(input)
            .map_err(|e| RegoError::Eval(format!("the input is not JSON: {e}")))?;
        self.sandbox
            .evaluate(Arc::clone(&self.name), Arc::clone(&self.source), input)
            .await
    }

    /// [`RegoPolicy::evaluate`] for callers without an async runtime
    /// (`sigil policy lint`): blocks this thread until a worker answers.
    pub fn evaluate_blocking(&self, input: &serde_json::Value) -> Result<RegoVerdict, RegoError> {
        sandbox::block_on(self.evaluate(input))
    }
}

static SHARED: OnceLock<RegoSandbox> = OnceLock::new();

/// The process's sandbox was configured already, differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Rego sandbox is already configured ({0})")]
pub struct AlreadyConfigured(String);

/// Sets the configuration of the process-wide sandbox ([`shared`]); call it
/// once at start-up, before any Rego policy is compiled. Configuring it
/// again with the same configuration is a no-op.
pub fn configure_shared(config: SandboxConfig) -> Result<(), AlreadyConfigured> {
    let sandbox = SHARED.get_or_init(|| RegoSandbox::new(config.clone()));
    if sandbox.config() == &config {
        Ok(())
    } else {
        Err(AlreadyConfigured(format!("{:?}", sandbox.config())))
    }
}

/// The process-wide sandbox every compiled Rego policy uses. Unless
/// [`configure_shared`] ran first, its workers are this binary started
/// again ([`SandboxConfig::this_binary`]) with the default limits. Nothing
/// starts until a policy is evaluated.
pub fn shared() -> &'static RegoSandbox {
    SHARED.get_or_init(|| RegoSandbox::new(default_config()))
}

#[cfg(not(any(test, feature = "testing")))]
fn default_config() -> SandboxConfig {
    SandboxConfig::this_binary()
}

// A unit-test binary cannot serve as a worker: this crate's unit tests, and
// those of crates that enable `testing`, use the `sigil-rego-worker` binary
// built beside them (in target/debug, above target/debug/deps). A sigil
// binary built with `testing` (dev-dependency features are unified in a
// test build) finds none two directories above itself, and starts itself.
#[cfg(any(test, feature = "testing"))]
fn default_config() -> SandboxConfig {
    testing::config().unwrap_or_else(|_| SandboxConfig::this_binary())
}

/// For tests of sigil's crates that evaluate Rego in-process: workers
/// from the `sigil-rego-worker` binary of this crate.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::path::PathBuf;

    use super::SandboxConfig;

    /// The environment variable naming a worker program to test with.
    pub const WORKER_ENV: &str = "SIGIL_REGO_WORKER";

    /// The worker program: [`WORKER_ENV`] when set, else `sigil-rego-worker`
    /// in the target directory of the running test (cargo builds it with
    /// the workspace, and with this crate's integration tests).
    pub fn worker_program() -> Result<PathBuf, String> {
        if let Some(path) = std::env::var_os(WORKER_ENV).filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(path));
        }
        let exe = std::env::current_exe().map_err(|e| format!("no current executable: {e}"))?;
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .ok_or_else(|| format!("{} has no target directory", exe.display()))?;
        let program = profile_dir.join("sigil-rego-worker");
        if program.is_file() {
            Ok(program)
        } else {
            Err(format!(
                "{} is missing; build it with `cargo build -p sigil-policy --bins`, or set {WORKER_ENV}",
                program.display()
            ))
        }
    }

    /// A sandbox configuration on [`worker_program`].
    pub fn config() -> Result<SandboxConfig, String> {
        worker_program().map(SandboxConfig::new)
    }

    /// Configures the process-wide sandbox with [`config`].
    pub fn configure() -> Result<(), String> {
        super::configure_shared(config()?).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests;
