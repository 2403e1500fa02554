//! The Rego sandbox: a bounded pool of worker processes that evaluate Rego
//! for this process, and the threads that talk to them.
//!
//! Why processes, and not regorus' allocator limits or WebAssembly (as CUE
//! runs): regorus (0.14) allocates by input size inside built-ins before any
//! of its checks runs — `numbers.range(0, 2000000000)` asks for 48 GB in one
//! `Vec::with_capacity`, and a failed allocation aborts a Rust process
//! whatever limit is configured; its `allocator-memory-limits` feature
//! (mimalloc as the global allocator) counts the whole process, not one
//! evaluation, and checks after the fact; its timer is not checked inside
//! built-ins. Compiling regorus to WebAssembly would need a wasm32 Rust
//! standard library this project's toolchains do not ship. A process
//! bounded by the kernel holds against all of it: `RLIMIT_DATA` caps its
//! heap (the allocation fails, the worker aborts, this process does not),
//! the parent kills it at the deadline (a loop inside a built-in ends
//! too), a panic ends it, and none of it reaches the process serving
//! admission.
//!
//! Shape (as sigil-cue's pool): `workers` threads, each owning at most one
//! worker process and serving one request at a time from a queue of
//! `queue` requests; a request is refused when the queue is full. Callers
//! await the answer; no async runtime thread runs Rego. A worker that
//! crossed a bound is replaced for the next request; workers are started
//! only when the first request arrives.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_channel::oneshot;

use super::wire::{HELLO, MAX_ANSWER_BYTES, parse_answer, write_frame};
use super::worker::WorkerArgs;
use super::{RegoError, RegoVerdict};

/// Time a new worker may take to start and greet.
const START_TIME: Duration = Duration::from_secs(10);
/// What a worker wrote to stderr last is kept for the error message.
const STDERR_TAIL_BYTES: usize = 4096;

/// Bounds of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Heap and private mappings one worker may hold, in bytes
    /// (`RLIMIT_DATA`): the document, the module and everything the
    /// evaluation makes.
    pub memory_bytes: u64,
    /// Time one evaluation may take: regorus' own timer stops the
    /// interpreter then; a worker that has not answered a quarter later
    /// (at least 250 ms; a built-in that does not return) is killed.
    pub time: Duration,
    /// Largest input document sent to a worker, in bytes.
    pub max_input_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 128 << 20,
            time: Duration::from_secs(1),
            max_input_bytes: 16 << 20,
        }
    }
}

impl Limits {
    /// When the parent gives up on an answer and kills the worker.
    fn hard_deadline(&self) -> Duration {
        self.time + (self.time / 4).max(Duration::from_millis(250))
    }
}

/// How the sandbox starts its workers and how many it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// The program started as a worker, with [`super::WORKER_ARG`] as its
    /// first argument: this very binary in production.
    pub program: PathBuf,
    /// Per-evaluation bounds.
    pub limits: Limits,
    /// Worker processes (at least one).
    pub workers: usize,
    /// Evaluations that may wait for a worker before new ones are refused.
    pub queue: usize,
}

impl SandboxConfig {
    /// Two workers of `program` with the default limits.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            limits: Limits::default(),
            workers: 2,
            queue: 64,
        }
    }

    /// Workers that are this binary, started again: every sigil binary
    /// that evaluates Rego calls [`super::serve_if_requested`] first in
    /// `main`.
    pub fn this_binary() -> Self {
        // /proc/self/exe is the running image even when its file was
        // replaced on disk since (an upgrade in place).
        let program = if cfg!(target_os = "linux") {
            PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("sigil"))
        };
        Self::new(program)
    }
}

/// Counters, for tests and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SandboxStats {
    /// Worker processes started.
    pub workers_started: u64,
    /// Worker processes ended because of a bound, a crash or a failed start.
    pub workers_lost: u64,
    /// Evaluations answered by a worker.
    pub evaluations: u64,
}

#[derive(Default)]
struct Counters {
    started: AtomicU64,
    lost: AtomicU64,
    evaluations: AtomicU64,
}

type Answer = Result<RegoVerdict, RegoError>;

struct Job {
    name: Arc<str>,
    source: Arc<str>,
    input: Vec<u8>,
    reply: oneshot::Sender<Answer>,
}

struct Inner {
    config: SandboxConfig,
    jobs: Mutex<Option<SyncSender<Job>>>,
    counters: Arc<Counters>,
}

/// A handle on one pool of Rego workers; cheap to clone. Dropping the last
/// handle ends the worker threads and their processes once they finish
/// what they hold.
#[derive(Clone)]
pub struct RegoSandbox {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RegoSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegoSandbox")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RegoSandbox {
    /// A sandbox for `config`; nothing starts until the first evaluation.
    pub fn new(config: SandboxConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                jobs: Mutex::new(None),
                counters: Arc::default(),
            }),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Counters since the sandbox was made.
    pub fn stats(&self) -> SandboxStats {
        let c = &self.inner.counters;
        SandboxStats {
            workers_started: c.started.load(Ordering::Relaxed),
            workers_lost: c.lost.load(Ordering::Relaxed),
            evaluations: c.evaluations.load(Ordering::Relaxed),
        }
    }

    /// Evaluates the module `source` (labelled `name`) on `input` in a
    /// worker; the future only waits. Dropping it before a worker takes the
    /// request withdraws the request.
    pub async fn evaluate(&self, name: Arc<str>, source: Arc<str>, input: Vec<u8>) -> Answer {
        let limits = &self.inner.config.limits;
        if input.len() > limits.max_input_bytes {
            return Err(RegoError::InputTooLarge {
                size: input.len(),
                limit: limits.max_input_bytes,
            });
        }
        let (reply, answer) = oneshot::channel();
        let job = Job {
            name,
            source,
            input,
            reply,
        };
        self.submit(job)?;
        answer.await.unwrap_or_else(|_| {
            Err(RegoError::Crashed(
                "the Rego worker thread stopped without answering".into(),
            ))
        })
    }

    fn submit(&self, job: Job) -> Result<(), RegoError> {
        let mut jobs = lock(&self.inner.jobs);
        let sender = match &*jobs {
            Some(sender) => sender.clone(),
            None => {
                let sender = self.start()?;
                *jobs = Some(sender.clone());
                sender
            }
        };
        drop(jobs);
        match sender.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(RegoError::Busy(self.inner.config.queue)),
            Err(TrySendError::Disconnected(_)) => Err(RegoError::Crashed(
                "the Rego worker threads have stopped".into(),
            )),
        }
    }

    /// Starts the worker threads (their processes start with their first
    /// request).
    fn start(&self) -> Result<SyncSender<Job>, RegoError> {
        let config = &self.inner.config;
        let (jobs, queue) = sync_channel(config.queue.max(1));
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..config.workers.max(1) {
            let queue = Arc::clone(&queue);
            let config = config.clone();
            let counters = Arc::clone(&self.inner.counters);
            std::thread::Builder::new()
                .name(format!("sigil-rego-{i}"))
                .spawn(move || serve(&config, &counters, &queue))
                .map_err(|e| RegoError::Unavailable(format!("cannot start a thread: {e}")))?;
        }
        Ok(jobs)
    }
}

/// One worker thread: takes requests one at a time and runs each in its
/// worker process, starting one when it has none.
fn serve(config: &SandboxConfig, counters: &Counters, queue: &Mutex<Receiver<Job>>) {
    let mut worker: Option<Worker> = None;
    loop {
        let job = match lock(queue).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        if job.reply.is_canceled() {
            continue;
        }
        let mut current = match worker.take() {
            Some(w) => w,
            None => match Worker::start(config) {
                Ok(w) => {
                    counters.started.fetch_add(1, Ordering::Relaxed);
                    w
                }
                Err(e) => {
                    counters.lost.fetch_add(1, Ordering::Relaxed);
                    let _ = job.reply.send(Err(e));
                    continue;
                }
            },
        };
        let answer = current.evaluate(&job, &config.limits);
        counters.evaluations.fetch_add(1, Ordering::Relaxed);
        match answer {
            Ok(answer) => {
                worker = Some(current);
                let _ = job.reply.send(answer);
            }
            Err(stop) => {
                counters.lost.fetch_add(1, Ordering::Relaxed);
                let error = current.end(stop, &config.limits);
                let _ = job.reply.send(Err(error));
            }
        }
    }
}

/// Why a worker stopped answering.
#[derive(Debug)]
enum Stop {
    /// It did not answer in time.
    Deadline,
    /// It closed its end (it exited), or the pipe broke.
    Gone,
    /// It answered something that is not a frame of the protocol.
    Garbled(String),
}

/// One worker process and its pipes.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
    stderr_tail: Vec<u8>,
    /// How it ended, once it has.
    status: String,
}

impl Worker {
    fn start(config: &SandboxConfig) -> Result<Self, RegoError> {
        let unavailable = |reason: String| {
            RegoError::Unavailable(format!("{}: {reason}", config.program.display()))
        };
        let args = WorkerArgs {
            memory_bytes: config.limits.memory_bytes,
            time: config.limits.time,
            max_input_bytes: config.limits.max_input_bytes,
        };
        // A clean environment: the worker needs none, and the parent's may
        // hold credentials (KMS, cloud).
        let mut child = Command::new(&config.program)
            .args(args.to_args())
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| unavailable(format!("cannot start it: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(unavailable("its pipes are missing".into()));
        };
        let mut worker = Self {
            child,
            stdin,
            stdout,
            stderr,
            stderr_tail: Vec::new(),
            status: String::new(),
        };
        if let Err(e) = worker.nonblocking() {
            worker.kill();
            return Err(unavailable(format!("cannot set up its pipes: {e}")));
        }
        match worker.exchange(&[], Instant::now() + START_TIME) {
            Ok(hello) if hello == HELLO => Ok(worker),
            other => {
                let what = match other {
                    Ok(_) => "it answered, but not as a sigil Rego worker".to_owned(),
                    Err(Stop::Deadline) => format!("it did not greet within {START_TIME:?}"),
                    Err(Stop::Gone | Stop::Garbled(_)) => "it exited without greeting".to_owned(),
                };
                worker.kill();
                let said = worker.last_words();
                Err(unavailable(format!(
                    "{what}{said}; it must be a sigil binary that serves as a Rego worker when \
                     started with {}",
                    super::WORKER_ARG
                )))
            }
        }
    }

    #[cfg(unix)]
    fn nonblocking(&self) -> io::Result<()> {
        use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
        use std::os::fd::AsFd as _;
        for fd in [self.stdin.as_fd(), self.stdout.as_fd(), self.stderr.as_fd()] {
            let flags = fcntl_getfl(fd)?;
            fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
        }
        Ok(())
    }

    #[cfg(not(unix))]
    fn nonblocking(&self) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the Rego sandbox needs a Unix system",
        ))
    }

    /// Sends one request and reads its answer before the hard deadline.
    fn evaluate(&mut self, job: &Job, limits: &Limits) -> Result<Answer, Stop> {
        let mut request =
            Vec::with_capacity(12 + job.name.len() + job.source.len() + job.input.len());
        for part in [job.name.as_bytes(), job.source.as_bytes(), &job.input] {
            write_frame(&mut request, part).map_err(|e| Stop::Garbled(e.to_string()))?;
        }
        let answer = self.exchange(&request, Instant::now() + limits.hard_deadline())?;
        Ok(parse_answer(&answer, limits.time))
    }

    /// Writes `request` and reads one frame back, polling stdin, stdout and
    /// stderr (whatever the worker writes there is kept, so it never blocks
    /// on a full pipe) until `deadline`.
    #[cfg(unix)]
    fn exchange(&mut self, request: &[u8], deadline: Instant) -> Result<Vec<u8>, Stop> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut written = 0;
        let mut answer = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if let Some(frame) = complete_frame(&answer)? {
                return Ok(frame);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Stop::Deadline);
            }
            let timeout = Timespec::try_from(left).unwrap_or(Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            });
            let want_out = written < request.len();
            let mut fds = [
                PollFd::new(&self.stdout, PollFlags::IN),
                PollFd::new(&self.stderr, PollFlags::IN),
                PollFd::new(
                    &self.stdin,
                    if want_out {
                        PollFlags::OUT
                    } else {
                        PollFlags::empty()
                    },
                ),
            ];
            match poll(&mut fds, Some(&timeout)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(Stop::Garbled(format!("poll: {e}"))),
            }
            let [out_ready, err_ready, in_ready] = fds.map(|fd| fd.revents());
            let readable = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
            if err_ready.intersects(readable) {
                self.drain_stderr(&mut buf);
            }
            if want_out && in_ready.intersects(PollFlags::OUT | PollFlags::ERR | PollFlags::HUP) {
                let rest = request.get(written..).unwrap_or_default();
                match self.stdin.write(rest) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Err(Stop::Gone),
                }
            }
            if out_ready.intersects(readable) {
                match self.stdout.read(&mut buf) {
                    Ok(0) => return Err(Stop::Gone),
                    Ok(n) => answer.extend_from_slice(buf.get(..n).unwrap_or_default()),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Err(Stop::Gone),
                }
            }
        }
    }

    #[cfg(not(unix))]
    fn exchange(&mut self, _request: &[u8], _deadline: Instant) -> Result<Vec<u8>, Stop> {
        Err(Stop::Garbled("the Rego sandbox needs a Unix system".into()))
    }

    /// Reads what stderr holds now, keeping the last few KiB.
    fn drain_stderr(&mut self, buf: &mut [u8]) {
        loop {
            match self.stderr.read(buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    self.stderr_tail
                        .extend_from_slice(buf.get(..n).unwrap_or_default());
                    let excess = self.stderr_tail.len().saturating_sub(STDERR_TAIL_BYTES);
                    self.stderr_tail.drain(..excess);
                }
            }
        }
    }

    /// Ends a worker that stopped answering and says which bound, if any,
    /// it crossed.
    fn end(mut self, stop: Stop, limits: &Limits) -> RegoError {
        self.kill();
        let said = String::from_utf8_lossy(&self.stderr_tail).into_owned();
        match stop {
            Stop::Deadline => RegoError::TimeLimit { limit: limits.time },
            _ if said.contains("memory allocation of") => RegoError::MemoryLimit {
                mib: limits.memory_bytes >> 20,
            },
            _ if said.contains("has overflowed its stack") => {
                RegoError::Crashed("the evaluation overflowed its stack".into())
            }
            Stop::Garbled(what) => RegoError::Crashed(format!("the worker's answer: {what}")),
            Stop::Gone => RegoError::Crashed(format!(
                "the worker ended ({}){}",
                self.status,
                self.last_words()
            )),
        }
    }

    /// The worker's last line on stderr, as `: …`, or nothing.
    fn last_words(&self) -> String {
        let said = String::from_utf8_lossy(&self.stderr_tail);
        said.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| format!(": {}", l.chars().take(300).collect::<String>()))
            .unwrap_or_default()
    }

    /// Kills and reaps the process (it may be gone already), then reads
    /// what it left on stderr.
    fn kill(&mut self) {
        let _ = self.child.kill();
        self.status = match self.child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => format!("unknown status: {e}"),
        };
        let mut buf = vec![0u8; 16 * 1024];
        self.drain_stderr(&mut buf);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `future` on this thread, parked between polls.
pub(super) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// The frame `bytes` holds when it is complete.
fn complete_frame(bytes: &[u8]) -> Result<Option<Vec<u8>>, Stop> {
    let Some(head) = bytes.get(..4) else {
        return Ok(None);
    };
    let mut len = [0u8; 4];
    len.copy_from_slice(head);
    let len = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if len > MAX_ANSWER_BYTES {
        return Err(Stop::Garbled(format!(
            "an answer of {len} bytes, over the {MAX_ANSWER_BYTES} accepted"
        )));
    }
    Ok(bytes.get(4..4 + len).map(<[u8]>::to_vec))
}
