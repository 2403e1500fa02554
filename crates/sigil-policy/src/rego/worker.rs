//! The worker process: a sigil binary started again by itself with
//! [`WORKER_ARG`] (or the test-only `sigil-rego-worker`). It bounds its own
//! memory with `RLIMIT_DATA` before reading anything, then evaluates
//! request after request from its stdin, answering on its stdout
//! ([`super::wire`]). Whatever a policy does to it — an allocation past the
//! bound aborts it, a panic in a built-in, a loop in a built-in the parent
//! kills at the deadline — ends this process only, never the one serving
//! admission.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, BufReader, BufWriter, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use super::wire::{HELLO, answer, read_frame, write_frame};
use super::{MAX_MODULE_BYTES, RegoError, engine};

/// The first argument that makes a sigil binary a Rego worker.
pub const WORKER_ARG: &str = "__sigil-rego-worker";

/// Longest module name a request carries.
const MAX_NAME_BYTES: usize = 4096;
/// Prepared modules kept between requests, and their text in all.
const CACHED_MODULES: usize = 64;
const CACHED_BYTES: usize = 8 << 20;

/// What the parent tells a worker on its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WorkerArgs {
    /// `RLIMIT_DATA`: heap and private mappings, in bytes.
    pub(super) memory_bytes: u64,
    /// regorus' own timer.
    pub(super) time: Duration,
    /// Largest input document read.
    pub(super) max_input_bytes: usize,
}

impl WorkerArgs {
    /// The arguments after [`WORKER_ARG`].
    pub(super) fn to_args(self) -> Vec<String> {
        vec![
            WORKER_ARG.to_owned(),
            self.memory_bytes.to_string(),
            self.time.as_millis().to_string(),
            self.max_input_bytes.to_string(),
        ]
    }

    fn parse(args: &[OsString]) -> Option<Self> {
        let number = |i: usize| args.get(i)?.to_str()?.parse::<u64>().ok();
        Some(Self {
            memory_bytes: number(0)?,
            time: Duration::from_millis(number(1)?),
            max_input_bytes: usize::try_from(number(2)?).ok()?,
        })
    }
}

/// Serves as a Rego worker, and exits, when this process was started as
/// one (its first argument is [`WORKER_ARG`]); returns at once otherwise.
/// Every sigil binary that evaluates Rego calls it first thing in `main`,
/// so that the sandbox can start the binary again as its worker.
pub fn serve_if_requested() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|a| a != WORKER_ARG) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    let code = match WorkerArgs::parse(&rest) {
        Some(worker) => match serve(worker) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("sigil Rego worker: {e}");
                1
            }
        },
        None => {
            eprintln!(
                "sigil Rego worker: expected MEMORY_BYTES TIME_MS MAX_INPUT_BYTES after {WORKER_ARG}"
            );
            2
        }
    };
    std::process::exit(code);
}

/// Bounds this process, greets, and answers requests until stdin closes.
fn serve(args: WorkerArgs) -> io::Result<()> {
    confine(args.memory_bytes)?;
    let mut input = BufReader::new(io::stdin().lock());
    let mut output = BufWriter::new(io::stdout().lock());
    write_frame(&mut output, HELLO)?;
    output.flush()?;
    let mut cache: HashMap<(String, String), regorus::Engine> = HashMap::new();
    let mut cached_bytes = 0usize;
    loop {
        let Some(name) = read_frame(&mut input, MAX_NAME_BYTES)? else {
            return Ok(());
        };
        let source = read_frame(&mut input, MAX_MODULE_BYTES)?;
        let document = read_frame(&mut input, args.max_input_bytes)?;
        let (Some(source), Some(document)) = (source, document) else {
            return Ok(());
        };
        let text = |bytes: Vec<u8>| {
            String::from_utf8(bytes)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a frame is not UTF-8"))
        };
        let (name, source, document) = (text(name)?, text(source)?, text(document)?);
        let result = catch_unwind(AssertUnwindSafe(|| {
            let key = (name, source);
            if !cache.contains_key(&key) {
                let prepared = engine::load(&key.0, &key.1, args.time)?;
                if cache.len() >= CACHED_MODULES || cached_bytes + key.1.len() > CACHED_BYTES {
                    cache.clear();
                    cached_bytes = 0;
                }
                cached_bytes += key.1.len();
                cache.insert(key.clone(), prepared);
            }
            match cache.get(&key) {
                Some(prepared) => engine::evaluate(prepared, &document, args.time),
                None => Err(RegoError::Crashed("the module was not kept".into())),
            }
        }))
        .unwrap_or_else(|panic| {
            // A half-updated cache is not worth trusting after a panic.
            cache.clear();
            cached_bytes = 0;
            Err(RegoError::Crashed(panic_text(panic.as_ref())))
        });
        write_frame(&mut output, &answer(&result))?;
        output.flush()?;
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    format!("regorus panicked: {what}")
}

/// The kernel's bounds on this process: no core files, at most
/// `memory_bytes` of heap and private mappings (an allocation past it
/// fails, and Rust aborts the process), and death with the parent.
#[cfg(unix)]
fn confine(memory_bytes: u64) -> io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let limit = |n: u64| Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    setrlimit(Resource::Core, limit(0))?;
    setrlimit(Resource::Data, limit(memory_bytes))?;
    #[cfg(target_os = "linux")]
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    Ok(())
}

#[cfg(not(unix))]
fn confine(_memory_bytes: u64) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the Rego sandbox bounds memory with RLIMIT_DATA, which this system lacks",
    ))
}
