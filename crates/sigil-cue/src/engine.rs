//! The engine: loads the module on first use, runs a pool of worker threads
//! (each owning one instance), queues requests to them, maps what the guest
//! reports onto [`CueFailure`], and remembers compile verdicts by the
//! policy's hash (the controller and the webhook compile the same policies
//! again and again).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmi::{Config, CustomFuelCosts, Engine, Linker, Module};

use crate::guest::{Budget, Description, EXPORTS, Guest, Outcome, Stop};
use crate::reply::{Pending, Replier, channel};
use crate::wasi::{self, Host};
use crate::{CUE_VERSION, CueConfig, CueFailure, Diagnostics};

/// Fuel for starting an instance (Go runtime and CUE package
/// initialisation take about 1.5e9).
const START_FUEL: u64 = 30_000_000_000;
/// Wall-clock time for starting an instance.
const START_TIME: Duration = Duration::from_secs(60);
/// Compile verdicts remembered before the memo is cleared.
const COMPILED_MEMO: usize = 512;
/// Largest module file read.
const MAX_MODULE_BYTES: u64 = 256 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the loaded module reported about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// The cuelang.org/go version it was built from.
    pub cue_version: String,
    /// The Go version that built it.
    pub go_version: String,
    /// SHA-256 of the file, hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
}

/// Counters, for tests and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineStats {
    /// Instances started (including the first).
    pub instances_started: u64,
    /// Instances dropped after a trap or because their memory grew large.
    pub instances_dropped: u64,
    /// Requests answered by a worker.
    pub requests: u64,
    /// Fuel used by the last request a worker answered.
    pub last_fuel: u64,
}

#[derive(Default)]
struct Counters {
    started: AtomicU64,
    dropped: AtomicU64,
    requests: AtomicU64,
    last_fuel: AtomicU64,
}

/// One unit of work for a worker.
enum Request {
    Compile(String),
    Evaluate(String, Vec<u8>),
}

struct Job {
    request: Request,
    reply: Replier,
}

/// The loaded module and the pool's queue.
struct Runtime {
    jobs: SyncSender<Job>,
    info: ModuleInfo,
}

/// What the workers share.
struct Shared {
    engine: Engine,
    module: Module,
    linker: Linker<Host>,
    config: CueConfig,
    counters: Arc<Counters>,
}

struct Inner {
    config: CueConfig,
    runtime: Mutex<Option<Result<Runtime, CueFailure>>>,
    compiled: Mutex<HashMap<[u8; 32], Result<(), CueFailure>>>,
    counters: Arc<Counters>,
}

/// A handle on one CUE module and its worker pool; cheap to clone. Loads
/// the module on the first request; dropping the last handle stops the
/// workers once they finish what they hold.
#[derive(Clone)]
pub struct CueEngine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CueEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CueEngine")
            .field("module", &self.inner.config.module)
            .finish_non_exhaustive()
    }
}

impl CueEngine {
    /// An engine for `config`; nothing is read until the first request.
    pub fn new(config: CueConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                runtime: Mutex::new(None),
                compiled: Mutex::new(HashMap::new()),
                counters: Arc::default(),
            }),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &CueConfig {
        &self.inner.config
    }

    /// Loads the module now (if not yet) and describes it, or says why it
    /// cannot be used.
    pub fn load(&self) -> Result<ModuleInfo, CueFailure> {
        self.with_runtime(|rt| rt.info.clone())
    }

    /// Whether the module has been loaded (successfully or not) already.
    pub fn is_loaded(&self) -> bool {
        lock(&self.inner.runtime).is_some()
    }

    /// Counters since the engine was made.
    pub fn stats(&self) -> EngineStats {
        let c = &self.inner.counters;
        EngineStats {
            instances_started: c.started.load(Ordering::Relaxed),
            instances_dropped: c.dropped.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            last_fuel: c.last_fuel.load(Ordering::Relaxed),
        }
    }

    /// Checks that `policy` compiles on its own, as policy-controller's
    /// first step requires; blocks until a worker answers. Verdicts are
    /// remembered by the policy's hash (bounds excepted, which are retried).
    pub fn compile(&self, policy: &str) -> Result<(), CueFailure> {
        let key: [u8; 32] = Sha256::digest(policy.as_bytes()).into();
        if let Some(known) = lock(&self.inner.compiled).get(&key) {
            return known.clone();
        }
        let verdict = self
            .submit(policy, || Request::Compile(policy.to_owned()))
            .wait();
        let memorable = matches!(verdict, Ok(()) | Err(CueFailure::Policy(_)));
        if memorable {
            let mut memo = lock(&self.inner.compiled);
            if memo.len() >= COMPILED_MEMO {
                memo.clear();
            }
            memo.insert(key, verdict.clone());
        }
        verdict
    }

    /// Evaluates `policy` against the JSON `document` the way cosign's
    /// `evaluateCue` does, blocking until a worker answers.
    pub fn evaluate(&self, policy: &str, document: &[u8]) -> Result<(), CueFailure> {
        self.evaluate_async(policy, document).wait()
    }

    /// [`CueEngine::evaluate`] as a future: the work runs on the engine's
    /// worker threads, never on the caller's. Dropping the future before a
    /// worker starts the request cancels it.
    pub fn evaluate_async(&self, policy: &str, document: &[u8]) -> Pending {
        let limits = &self.inner.config.limits;
        if document.len() > limits.max_input_bytes {
            return Pending::ready(Err(CueFailure::InputTooLarge {
                size: document.len(),
                limit: limits.max_input_bytes,
            }));
        }
        self.submit(policy, || {
            Request::Evaluate(policy.to_owned(), document.to_vec())
        })
    }

    fn submit(&self, policy: &str, request: impl FnOnce() -> Request) -> Pending {
        let limits = &self.inner.config.limits;
        if policy.len() > limits.max_policy_bytes {
            return Pending::ready(Err(CueFailure::PolicyTooLarge {
                size: policy.len(),
                limit: limits.max_policy_bytes,
            }));
        }
        let queued = self.with_runtime(|rt| {
            let (reply, pending) = channel();
            match rt.jobs.try_send(Job {
                request: request(),
                reply,
            }) {
                Ok(()) => Ok(pending),
                Err(TrySendError::Full(job)) => {
                    job.reply.send(Ok(()));
                    Err(CueFailure::Busy(self.inner.config.queue))
                }
                Err(TrySendError::Disconnected(job)) => {
                    job.reply.send(Ok(()));
                    Err(CueFailure::Guest("the CUE workers have stopped".into()))
                }
            }
        });
        match queued {
            Ok(Ok(pending)) => pending,
            Ok(Err(e)) | Err(e) => Pending::ready(Err(e)),
        }
    }

    fn with_runtime<T>(&self, f: impl FnOnce(&Runtime) -> T) -> Result<T, CueFailure> {
        let mut slot = lock(&self.inner.runtime);
        let runtime = slot.get_or_insert_with(|| start(&self.inner.config, &self.inner.counters));
        match runtime {
            Ok(rt) => Ok(f(rt)),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Reads and checks the module, starts one instance for the handshake and
/// the worker threads (the first of which adopts that instance).
fn start(config: &CueConfig, counters: &Arc<Counters>) -> Result<Runtime, CueFailure> {
    let unavailable = |reason: String| CueFailure::Unavailable {
        path: config.module.clone(),
        reason,
    };
    let rebuild = "build it with scripts/build-cue-wasm.sh, or point --cue-module or \
                   SIGIL_CUE_MODULE at sigil's cue.wasm";
    let size = std::fs::metadata(&config.module)
        .map_err(|e| unavailable(format!("{e}; {rebuild}")))?
        .len();
    if size > MAX_MODULE_BYTES {
        return Err(unavailable(format!(
            "the file is {size} bytes, more than a CUE module can be; {rebuild}"
        )));
    }
    let bytes =
        std::fs::read(&config.module).map_err(|e| unavailable(format!("{e}; {rebuild}")))?;
    let sha256 = hex(&Sha256::digest(&bytes));

    let mut wasm_config = Config::default();
    wasm_config.consume_fuel(true);
    // wasmi translates a function on its first call, once per engine, and
    // charges that to whichever call comes first; running out of fuel in
    // the middle of a translation is a trap the call cannot resume from. Go's
    // scheduler makes that first call land at a different point from run to
    // run, so with translation on the meter an instance's start or an
    // evaluation failed now and then with "out of fuel" far below its
    // budget. Translation is work of the host, bounded by the module's size,
    // not of the policy: it is left off the meter, so a request's fuel counts
    // only what it executes.
    wasm_config.fuel_cost(CustomFuelCosts {
        bytes_copied_per_fuel: 64,
        fuel_per_bytes_translated: 0,
        fuel_per_bytes_validated: 0,
    });
    let engine = Engine::new(&wasm_config);
    let module = Module::new(&engine, &bytes)
        .map_err(|e| unavailable(format!("not a WebAssembly module ({e}); {rebuild}")))?;
    drop(bytes);
    if let Some(missing) = EXPORTS.iter().find(|e| module.get_export(e).is_none()) {
        return Err(unavailable(format!(
            "not sigil's CUE module: it has no export `{missing}`; {rebuild}"
        )));
    }
    let mut linker = Linker::new(&engine);
    wasi::link(&mut linker, &module)
        .map_err(|e| unavailable(format!("not sigil's CUE module: {e}; {rebuild}")))?;

    let shared = Arc::new(Shared {
        engine,
        module,
        linker,
        config: config.clone(),
        counters: Arc::clone(counters),
    });
    let mut first = start_guest(&shared).map_err(|stop| {
        unavailable(format!(
            "the module does not start: {}",
            describe_stop(&stop, None)
        ))
    })?;
    let mut budget = Budget::new(START_FUEL, Instant::now() + START_TIME);
    let description = first.describe(&mut budget).map_err(|stop| {
        unavailable(format!(
            "not sigil's CUE module: {}",
            describe_stop(&stop, None)
        ))
    })?;
    check_description(&description).map_err(unavailable)?;

    let (jobs, queue) = sync_channel(config.queue.max(1));
    let queue = Arc::new(Mutex::new(queue));
    let mut adopted = Some(first);
    for i in 0..config.workers.max(1) {
        let shared = Arc::clone(&shared);
        let queue = Arc::clone(&queue);
        let guest = adopted.take();
        std::thread::Builder::new()
            .name(format!("sigil-cue-{i}"))
            .spawn(move || work(&shared, &queue, guest))
            .map_err(|e| unavailable(format!("cannot start a worker thread: {e}")))?;
    }
    Ok(Runtime {
        jobs,
        info: ModuleInfo {
            cue_version: description.cue,
            go_version: description.go,
            sha256,
            size,
        },
    })
}

pub(crate) fn check_description(d: &Description) -> Result<(), String> {
    if d.cue != CUE_VERSION {
        return Err(format!(
            "it was built from cuelang.org/go {}, and sigil evaluates CUE as policy-controller \
             does, with {CUE_VERSION}; rebuild it with scripts/build-cue-wasm.sh",
            d.cue
        ));
    }
    Ok(())
}

fn start_guest(shared: &Shared) -> Result<Guest, Stop> {
    shared.counters.started.fetch_add(1, Ordering::Relaxed);
    let mut budget = Budget::new(START_FUEL, Instant::now() + START_TIME);
    Guest::new(
        &shared.engine,
        &shared.linker,
        &shared.module,
        shared.config.limits.memory_bytes,
        &mut budget,
    )
}

/// A worker: takes requests one at a time, runs them on its instance, and
/// replaces the instance after a trap or once its memory grew past half
/// the cap (wasm memory never shrinks).
fn work(shared: &Shared, queue: &Mutex<Receiver<Job>>, mut guest: Option<Guest>) {
    let limits = &shared.config.limits;
    loop {
        let job = {
            let queue = lock(queue);
            match queue.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        if job.reply.is_abandoned() {
            continue;
        }
        let mut instance = match guest.take() {
            Some(g) => g,
            None => match start_guest(shared) {
                Ok(g) => g,
                Err(stop) => {
                    shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    job.reply.send(Err(CueFailure::Guest(format!(
                        "a new instance does not start: {}",
                        describe_stop(&stop, None)
                    ))));
                    continue;
                }
            },
        };
        let mut budget = Budget::new(limits.fuel, Instant::now() + limits.time);
        let result = match &job.request {
            Request::Compile(policy) => instance.compile(policy, &mut budget),
            Request::Evaluate(policy, document) => instance.evaluate(policy, document, &mut budget),
        };
        shared.counters.requests.fetch_add(1, Ordering::Relaxed);
        shared
            .counters
            .last_fuel
            .store(budget.used, Ordering::Relaxed);
        let answer = match result {
            Ok(outcome) => {
                if instance.memory_bytes() <= (limits.memory_bytes / 2) as u64 {
                    guest = Some(instance);
                } else {
                    shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                verdict(outcome)
            }
            Err(stop) => {
                shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                Err(stop_failure(&stop, &shared.config, &instance))
            }
        };
        job.reply.send(answer);
    }
}

fn verdict(outcome: Outcome) -> Result<(), CueFailure> {
    if outcome.ok {
        return Ok(());
    }
    let diagnostics = Diagnostics {
        message: outcome.message,
        errors: outcome.errors,
    };
    Err(match outcome.stage.as_str() {
        "policy" => CueFailure::Policy(diagnostics),
        "input" => CueFailure::Input(diagnostics),
        _ => CueFailure::Violation(diagnostics),
    })
}

fn stop_failure(stop: &Stop, config: &CueConfig, guest: &Guest) -> CueFailure {
    let limits = &config.limits;
    match stop {
        Stop::Fuel => CueFailure::TimeLimit(format!(
            "{} units of fuel, about {:.1}s of CPU",
            limits.fuel,
            limits.fuel as f64 / 8e9
        )),
        Stop::Deadline => CueFailure::TimeLimit(format!("{:?}", limits.time)),
        Stop::Memory => CueFailure::MemoryLimit {
            mib: limits.memory_bytes >> 20,
        },
        Stop::Trap(_) => CueFailure::Guest(describe_stop(stop, Some(guest))),
    }
}

fn describe_stop(stop: &Stop, guest: Option<&Guest>) -> String {
    let what = match stop {
        Stop::Fuel => "it ran out of fuel".to_owned(),
        Stop::Deadline => "it ran out of time".to_owned(),
        Stop::Memory => "it ran out of memory".to_owned(),
        Stop::Trap(reason) => reason.clone(),
    };
    match guest.map(Guest::output).filter(|o| !o.is_empty()) {
        Some(output) => format!("{what} (it printed: {output})"),
        None => what,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
