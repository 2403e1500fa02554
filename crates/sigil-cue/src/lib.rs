//! sigil-cue: CUE policies, evaluated exactly as sigstore policy-controller
//! evaluates them.
//!
//! policy-controller v0.15.1 evaluates `type: cue` policies with cosign
//! v3.0.5's `evaluateCue` on cuelang.org/go v0.15.4. sigil runs that same Go
//! code: `crates/sigil-cue/guest` is cosign's evaluation compiled by standard
//! Go to a WebAssembly module (`GOOS=wasip1 GOARCH=wasm`,
//! `scripts/build-cue-wasm.sh`), and this crate runs the module in-process
//! with the [wasmi] interpreter, so verdicts and error texts are
//! policy-controller's by construction, without a process per admission.
//!
//! Why wasmi (measured for issue 14, on this project's 2-core machines):
//! the same verdicts as wasmtime on the whole corpus, no native code
//! generation and no precompiled per-architecture artifact in the admission
//! path (wasmtime needs a 62 MB `.cwasm` per architecture, made by Cranelift
//! in 600+ CPU-seconds, about 15 CPU-minutes more for every cold CI run, and
//! wasmtime 48 needs rustc 1.95); the price is speed: a corpus evaluation
//! costs about 11 ms median (p90 29 ms) of CPU with wasmi against 2.3 ms
//! (p90 4.9 ms) with wasmtime, and a new instance 130–230 ms against
//! 10–18 ms. That is small next to registry round trips, and the webhook
//! caches verdicts.
//!
//! What the crate guarantees:
//! - bounded time: each request runs on a fuel budget (deterministic: the
//!   same policy stops at the same point on every machine) and a wall-clock
//!   limit, checked every ~10 ms of guest work ([`Limits`]);
//! - bounded memory: each instance's linear memory is capped; reaching the
//!   cap stops the request;
//! - bounded input: policy and document sizes are capped before anything
//!   runs;
//! - a small pool of worker threads, each owning one instance that serves
//!   request after request; an instance that trapped (time, memory, a Go
//!   fatal error) is dropped and a fresh one made for the next request;
//! - the module is read only on the first request, so a process without CUE
//!   policies never pays its memory; a missing or foreign module is a clear
//!   [`CueFailure::Unavailable`] naming the path.
//!
//! It must not depend on Kubernetes, the network, an async runtime or other
//! sigil crates: it reads one file (the module) and runs it.
#![forbid(unsafe_code)]

mod engine;
mod guest;
mod reply;
mod wasi;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde::Deserialize;

pub use engine::{CueEngine, EngineStats, ModuleInfo};
pub use reply::Pending;

/// The cuelang.org/go release the module must be built from: what
/// policy-controller v0.15.1 resolves. The module reports its own, and a
/// module built from another release is refused.
pub const CUE_VERSION: &str = "v0.15.4";

/// The environment variable naming the module file.
pub const MODULE_ENV: &str = "SIGIL_CUE_MODULE";

/// Where the module is installed relative to the binaries' directory
/// (`/usr/local/bin` → `/usr/local/lib/sigil/cue.wasm` in the image).
pub const MODULE_RELATIVE_TO_BINARY: &str = "../lib/sigil/cue.wasm";

/// The module's default path: [`MODULE_RELATIVE_TO_BINARY`] resolved against
/// the running executable's directory, or `/usr/local/lib/sigil/cue.wasm`
/// when that directory cannot be determined.
pub fn default_module_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .map(|dir| dir.join(MODULE_RELATIVE_TO_BINARY))
        .map(|p| normalize(&p))
        .unwrap_or_else(|| PathBuf::from("/usr/local/lib/sigil/cue.wasm"))
}

/// Resolves `..` lexically, so messages show `/usr/local/lib/…` rather than
/// `/usr/local/bin/../lib/…`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Bounds of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Fuel (wasmi's count of executed instructions) one request may use;
    /// wasmi runs about 8e9 a CPU-second here.
    pub fuel: u64,
    /// Wall-clock time one request may take, waiting for a worker excluded.
    pub time: Duration,
    /// Linear memory one instance may grow to, in bytes.
    pub memory_bytes: usize,
    /// Longest policy text accepted, in bytes.
    pub max_policy_bytes: usize,
    /// Longest document accepted, in bytes.
    pub max_input_bytes: usize,
}

/// Fuel the default limits grant per second of their wall-clock limit:
/// about half of what wasmi executes in a CPU-second on this project's
/// machines, so that on an idle machine the fuel bound (the same on every
/// run) stops a runaway policy first and the clock only under load.
pub const FUEL_PER_SECOND: u64 = 4_000_000_000;

impl Limits {
    /// The default limits with `time` as the wall-clock limit and the fuel
    /// budget that goes with it ([`FUEL_PER_SECOND`]).
    pub fn for_time(time: Duration) -> Self {
        let fuel = (time.as_secs_f64() * FUEL_PER_SECOND as f64) as u64;
        Self {
            fuel: fuel.max(1),
            time,
            ..Self::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel: 5 * FUEL_PER_SECOND,
            time: Duration::from_secs(5),
            memory_bytes: 256 << 20,
            max_policy_bytes: 1 << 20,
            max_input_bytes: 4 << 20,
        }
    }
}

/// How an engine finds its module and how much it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CueConfig {
    /// The module file (`sigil-cue.wasm` as built, `cue.wasm` installed).
    pub module: PathBuf,
    /// Per-request bounds.
    pub limits: Limits,
    /// Worker threads, each with its own instance (at least one).
    pub workers: usize,
    /// Requests that may wait for a worker before new ones are refused.
    pub queue: usize,
}

impl CueConfig {
    /// The default configuration for the module at `module`.
    pub fn new(module: impl Into<PathBuf>) -> Self {
        Self {
            module: module.into(),
            limits: Limits::default(),
            workers: 2,
            queue: 64,
        }
    }

    /// The module named by [`MODULE_ENV`], else [`default_module_path`].
    pub fn from_env() -> Self {
        let module = std::env::var_os(MODULE_ENV)
            .filter(|v| !v.is_empty())
            .map_or_else(default_module_path, PathBuf::from);
        Self::new(module)
    }
}

/// A line and column in the policy text (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Position {
    /// Line.
    pub line: u32,
    /// Column.
    pub column: u32,
}

/// One CUE error, with the value path it concerns and where in the policy
/// it arose.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CueErrorDetail {
    /// The value path, e.g. `predicate.Data`; empty for syntax errors.
    pub path: String,
    /// CUE's message, e.g. `conflicting values "a" and "b"`.
    pub message: String,
    /// Positions in the policy text (none when the error lies in the document).
    #[serde(default)]
    pub positions: Vec<Position>,
}

/// Every CUE error of a failed stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics {
    /// policy-controller's text, e.g. `failed to evaluate the policy with
    /// error: predicate.Data: conflicting values "a" and "b"`.
    pub message: String,
    /// Each error on its own.
    pub errors: Vec<CueErrorDetail>,
}

impl Diagnostics {
    /// The first position in the policy any error names.
    pub fn first_position(&self) -> Option<Position> {
        self.errors
            .iter()
            .find_map(|e| e.positions.first().copied())
    }
}

/// Why a policy did not pass, or could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CueFailure {
    /// The module could not be loaded (missing, unreadable, foreign, or
    /// built from another CUE release).
    #[error("this sigil has no CUE module at {}: {reason}", path.display())]
    Unavailable {
        /// Where it looked.
        path: PathBuf,
        /// What went wrong and what to do.
        reason: String,
    },
    /// The policy text is larger than [`Limits::max_policy_bytes`].
    #[error("the CUE policy is {size} bytes; sigil accepts CUE policies up to {limit} bytes")]
    PolicyTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The document is larger than [`Limits::max_input_bytes`].
    #[error(
        "the document is {size} bytes; sigil evaluates CUE policies on documents up to {limit} bytes"
    )]
    InputTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The policy does not compile on its own (cosign's first step).
    #[error("{}", .0.message)]
    Policy(Diagnostics),
    /// The document does not compile as CUE.
    #[error("{}", .0.message)]
    Input(Diagnostics),
    /// The policy and the document do not unify: the policy is violated.
    #[error("{}", .0.message)]
    Violation(Diagnostics),
    /// The request ran out of fuel or time.
    #[error(
        "the CUE evaluation exceeded its time limit ({0}); simplify the policy or the document"
    )]
    TimeLimit(String),
    /// The instance's memory reached its cap.
    #[error(
        "the CUE evaluation exceeded its memory limit of {mib} MiB; simplify the policy or the document"
    )]
    MemoryLimit {
        /// The cap, in MiB.
        mib: usize,
    },
    /// Every worker is busy and the queue is full.
    #[error("{0} CUE evaluations are already waiting; sigil refuses more until they finish")]
    Busy(usize),
    /// The evaluator failed in a way that is not the policy's fault.
    #[error("the CUE evaluator failed: {0}")]
    Guest(String),
}

impl CueFailure {
    /// The CUE errors, when the failure comes from CUE itself.
    pub fn diagnostics(&self) -> Option<&Diagnostics> {
        match self {
            Self::Policy(d) | Self::Input(d) | Self::Violation(d) => Some(d),
            _ => None,
        }
    }

    /// A stable reason, for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unavailable { .. } => "unavailable",
            Self::PolicyTooLarge { .. } => "policy_too_large",
            Self::InputTooLarge { .. } => "input_too_large",
            Self::Policy(_) => "policy",
            Self::Input(_) => "input",
            Self::Violation(_) => "violation",
            Self::TimeLimit(_) => "time_limit",
            Self::MemoryLimit { .. } => "memory_limit",
            Self::Busy(_) => "busy",
            Self::Guest(_) => "guest",
        }
    }
}

static SHARED: OnceLock<CueEngine> = OnceLock::new();

/// The process's engine was configured already, differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the CUE engine is already configured with module {}", .0.display())]
pub struct AlreadyConfigured(pub PathBuf);

/// Sets the configuration of the process-wide engine ([`shared`]); call it
/// once at start-up, before any policy is compiled. Configuring it again
/// with the same configuration is a no-op.
pub fn configure_shared(config: CueConfig) -> Result<(), AlreadyConfigured> {
    let engine = SHARED.get_or_init(|| CueEngine::new(config.clone()));
    if engine.config() == &config {
        Ok(())
    } else {
        Err(AlreadyConfigured(engine.config().module.clone()))
    }
}

/// The process-wide engine every compiled CUE policy uses: one module and
/// one pool per process. Unless [`configure_shared`] ran first, it uses
/// [`CueConfig::from_env`]. Nothing is loaded until a CUE policy is compiled
/// or evaluated.
pub fn shared() -> &'static CueEngine {
    SHARED.get_or_init(|| CueEngine::new(CueConfig::from_env()))
}

#[cfg(test)]
mod tests;

/// For tests of sigil's crates: the module built from this checkout.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use crate::{CueConfig, CueEngine, MODULE_ENV};

    /// The module to test with: [`MODULE_ENV`] when set, else the one
    /// `scripts/build-cue-wasm.sh` builds from this checkout's guest sources
    /// (the script runs once per process; it rebuilds only what changed, and
    /// needs Go). The error says what failed and what to run.
    pub fn module_path() -> Result<PathBuf, String> {
        static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        PATH.get_or_init(|| {
            if let Some(path) = std::env::var_os(MODULE_ENV).filter(|v| !v.is_empty()) {
                return Ok(PathBuf::from(path));
            }
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../scripts/build-cue-wasm.sh"
            );
            let out = std::process::Command::new(script)
                .output()
                .map_err(|e| format!("cannot run {script}: {e}"))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            match stdout.lines().last() {
                Some(path) if out.status.success() => Ok(PathBuf::from(path.trim())),
                _ => Err(format!(
                    "{script} failed ({}): {}; it builds crates/sigil-cue/guest with Go 1.25 or \
                     newer, or set {MODULE_ENV} to a built module",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
            }
        })
        .clone()
    }

    /// The test module's default configuration.
    pub fn config() -> Result<CueConfig, String> {
        module_path().map(CueConfig::new)
    }

    /// One engine on the test module shared by a test binary, so that the
    /// module is loaded once; also configures the process-wide engine.
    pub fn engine() -> Result<CueEngine, String> {
        static ENGINE: OnceLock<Result<CueEngine, String>> = OnceLock::new();
        ENGINE
            .get_or_init(|| {
                let config = config()?;
                crate::configure_shared(config).map_err(|e| e.to_string())?;
                Ok(crate::shared().clone())
            })
            .clone()
    }
}
