//! Throughput at saturation of the two independent P-384 checks of a bundle
//! logged to Rekor v2 with an RFC 3161 timestamp (the floor of its
//! verification): `SIGIL_SAT_CALLERS` threads (default: 1, 2 and 4 in turn)
//! each verify as fast as they can for `SIGIL_SAT_SECONDS` (default 5) per
//! mode, with the two checks
//! - `sequential`: one after the other on the caller's thread;
//! - `scoped_thread`: the second on a thread spawned for it;
//! - `pool`: the second handed to a shared pool of as many warm worker threads
//!   as there are cores, as a runtime's blocking pool would run it.
//!
//! Prints verifications per second and the mean wall time per verification
//! seen by a caller. Run: `cargo bench -p sigil-verifier --bench saturation`.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::Check;

#[derive(Clone, Copy, Debug)]
enum Mode {
    Sequential,
    ScopedThread,
    Pool,
}

type Job = mpsc::Sender<bool>;

/// Warm workers sharing one queue; each job runs `check` and replies.
struct Pool {
    queue: Option<mpsc::Sender<Job>>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Pool {
    fn new(size: usize, check: Arc<Check>) -> Self {
        let (queue, inbox) = mpsc::channel::<Job>();
        let inbox = Arc::new(Mutex::new(inbox));
        let workers = (0..size)
            .map(|_| {
                let (inbox, check) = (inbox.clone(), check.clone());
                std::thread::spawn(move || {
                    loop {
                        let job = inbox.lock().unwrap().recv();
                        let Ok(reply) = job else { return };
                        let _ = reply.send(check.run());
                    }
                })
            })
            .collect();
        Self {
            queue: Some(queue),
            workers,
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.queue = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `callers` threads in `mode` for `seconds`; returns (verifications/s,
/// mean wall time per verification).
fn run(
    mode: Mode,
    callers: usize,
    seconds: u64,
    leaf: &Arc<Check>,
    token: &Arc<Check>,
) -> (f64, Duration) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let pool = Pool::new(cores, token.clone());
    let queue = pool.queue.clone().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..callers)
        .map(|_| {
            let (leaf, token, stop, done, queue) = (
                leaf.clone(),
                token.clone(),
                stop.clone(),
                done.clone(),
                queue.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let ok = match mode {
                        Mode::Sequential => leaf.run() && token.run(),
                        Mode::ScopedThread => std::thread::scope(|s| {
                            let other = s.spawn(|| token.run());
                            let here = leaf.run();
                            here && other.join().unwrap_or(false)
                        }),
                        Mode::Pool => {
                            let (reply, answer) = mpsc::channel();
                            queue.send(reply).unwrap();
                            let here = leaf.run();
                            here && answer.recv().unwrap_or(false)
                        }
                    };
                    assert!(ok, "a check failed");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed();
    drop(queue);
    drop(pool);
    let n = done.load(Ordering::Relaxed).max(1);
    let rate = n as f64 / elapsed.as_secs_f64();
    (rate, elapsed.mul_f64(callers as f64 / n as f64))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken from the command line.
    let seconds = env("SIGIL_SAT_SECONDS").unwrap_or(5);
    let callers: Vec<usize> = match env("SIGIL_SAT_CALLERS") {
        Some(n) => vec![n as usize],
        None => vec![1, 2, 4],
    };
    let leaf = Arc::new(Check::p384(1024));
    let token = Arc::new(Check::p384(256));
    println!(
        "two P-384 checks per verification, {} cores, {seconds} s per run",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for &n in &callers {
        for mode in [Mode::Sequential, Mode::ScopedThread, Mode::Pool] {
            let (rate, wall) = run(mode, n, seconds, &leaf, &token);
            println!(
                "{n} callers, {mode:?}: {rate:.0} verifications/s, {:.1} us per verification per caller",
                wall.as_secs_f64() * 1e6
            );
        }
    }
}
