//! The slice of WASI preview 1 that Go's `wasip1` runtime calls, and nothing
//! more: clocks, randomness (map seeds), one program argument, no
//! environment, stdout/stderr into a small bounded buffer (the Go runtime
//! prints fatal errors there), no files, no preopened directories, no
//! sockets. Every other import the module declares in
//! `wasi_snapshot_preview1` answers ENOSYS, so the guest can reach nothing
//! outside its memory; an import from any other module makes loading fail.
//!
//! Each call reads and writes guest memory through bounds-checked slices: a
//! bad pointer is an errno for the guest, never a panic in the host.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wasmi::{Caller, Error, ExternType, Linker, Memory, Module, StoreLimits, Val};

/// The WASI module name Go's `wasip1` port imports from.
pub(crate) const WASI_MODULE: &str = "wasi_snapshot_preview1";

const ESUCCESS: i32 = 0;
const EBADF: i32 = 8;
const EINVAL: i32 = 28;
const EIO: i32 = 29;
const ENOSYS: i32 = 52;

/// What the guest may print before the rest is dropped.
const OUTPUT_CAP: usize = 8 * 1024;
/// The longest a guest sleep is honoured in one `poll_oneoff`, so that a
/// sleeping guest still reaches the host's deadline checks.
const MAX_SLEEP: Duration = Duration::from_millis(10);
/// The program name the guest sees in `os.Args`.
const ARG0: &[u8] = b"sigil-cue\0";

/// Per-instance host state: the guest's memory (once instantiated), the
/// store limits, what the guest printed and the current call's deadline.
pub(crate) struct Host {
    pub(crate) memory: Option<Memory>,
    pub(crate) limits: StoreLimits,
    pub(crate) output: Vec<u8>,
    pub(crate) deadline: Option<Instant>,
    started: Instant,
}

impl Host {
    pub(crate) fn new(limits: StoreLimits) -> Self {
        Self {
            memory: None,
            limits,
            output: Vec::new(),
            deadline: None,
            started: Instant::now(),
        }
    }
}

/// Why the host stopped the guest from inside a host call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HostStop {
    /// The guest called `proc_exit` (Go does on a fatal error).
    #[error("the CUE evaluator exited with status {0}")]
    Exit(i32),
    /// The guest slept past the call's deadline.
    #[error("the CUE evaluator passed its deadline while waiting")]
    Deadline,
    /// The guest called an import that must never be reached.
    #[error("the CUE evaluator called the unsupported WASI function {0}")]
    Unsupported(String),
}

impl wasmi::errors::HostError for HostStop {}

fn u32_at(mem: &[u8], ptr: i32) -> Option<u32> {
    let at = usize::try_from(ptr as u32).ok()?;
    let bytes = mem.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn u64_at(mem: &[u8], at: usize) -> Option<u64> {
    let bytes = mem.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

fn bytes_mut(mem: &mut [u8], ptr: i32, len: usize) -> Option<&mut [u8]> {
    let at = usize::try_from(ptr as u32).ok()?;
    mem.get_mut(at..at.checked_add(len)?)
}

fn put_u32(mem: &mut [u8], ptr: i32, value: u32) -> bool {
    bytes_mut(mem, ptr, 4)
        .map(|b| b.copy_from_slice(&value.to_le_bytes()))
        .is_some()
}

fn put_u64(mem: &mut [u8], ptr: i32, value: u64) -> bool {
    bytes_mut(mem, ptr, 8)
        .map(|b| b.copy_from_slice(&value.to_le_bytes()))
        .is_some()
}

/// The guest's memory and the host state, for one host call.
fn split<'a>(caller: &'a mut Caller<'_, Host>) -> Option<(&'a mut [u8], &'a mut Host)> {
    let memory = caller.data().memory?;
    Some(memory.data_and_store_mut(caller))
}

fn errno(ok: bool) -> i32 {
    if ok { ESUCCESS } else { EINVAL }
}

/// `fd_write` to stdout or stderr: keeps the first [`OUTPUT_CAP`] bytes and
/// reports everything as written, so the guest never retries.
fn fd_write(caller: &mut Caller<'_, Host>, fd: i32, iovs: i32, count: i32, written: i32) -> i32 {
    if fd != 1 && fd != 2 {
        return EBADF;
    }
    let Some((mem, host)) = split(caller) else {
        return EINVAL;
    };
    let mut total: u32 = 0;
    for i in 0..count.max(0) {
        let entry = iovs.wrapping_add(i.wrapping_mul(8));
        let (Some(ptr), Some(len)) = (u32_at(mem, entry), u32_at(mem, entry.wrapping_add(4)))
        else {
            return EINVAL;
        };
        let Some(data) = usize::try_from(ptr)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(p, l)| mem.get(p..p.checked_add(l)?))
        else {
            return EINVAL;
        };
        let room = OUTPUT_CAP.saturating_sub(host.output.len());
        host.output
            .extend_from_slice(data.get(..room.min(data.len())).unwrap_or_default());
        total = total.saturating_add(len);
    }
    errno(put_u32(mem, written, total))
}

/// `poll_oneoff`: every subscription fires at once; for clock subscriptions
/// the host first sleeps the shortest timeout, at most [`MAX_SLEEP`] and
/// never past the deadline (then the guest is stopped).
fn poll_oneoff(
    caller: &mut Caller<'_, Host>,
    subscriptions: i32,
    events: i32,
    count: i32,
    written: i32,
) -> Result<i32, Error> {
    let Some((mem, host)) = split(caller) else {
        return Ok(EINVAL);
    };
    let (Ok(subscriptions), Ok(events), Ok(count)) = (
        usize::try_from(subscriptions as u32),
        usize::try_from(events as u32),
        usize::try_from(count.max(0)),
    ) else {
        return Ok(EINVAL);
    };
    let mut sleep: Option<Duration> = None;
    for i in 0..count {
        let Some(sub) = i.checked_mul(48).and_then(|o| subscriptions.checked_add(o)) else {
            return Ok(EINVAL);
        };
        let (Some(userdata), Some(tag)) = (u64_at(mem, sub), mem.get(sub.wrapping_add(8)).copied())
        else {
            return Ok(EINVAL);
        };
        if tag == 0 {
            // A clock subscription: flags bit 0 marks an absolute time, which
            // Go's runtime does not use; treat it like a relative one.
            let timeout = u64_at(mem, sub.wrapping_add(24)).unwrap_or(0);
            let d = Duration::from_nanos(timeout);
            sleep = Some(sleep.map_or(d, |s| s.min(d)));
        }
        let Some(event) = i
            .checked_mul(32)
            .and_then(|o| events.checked_add(o))
            .and_then(|e| mem.get_mut(e..e.checked_add(32)?))
        else {
            return Ok(EINVAL);
        };
        event.fill(0);
        if let Some(b) = event.get_mut(0..8) {
            b.copy_from_slice(&userdata.to_le_bytes());
        }
        if let Some(b) = event.get_mut(10) {
            *b = tag;
        }
        if tag != 0
            && let Some(b) = event.get_mut(8..10)
        {
            // fd subscriptions: there are no descriptors to wait on.
            b.copy_from_slice(&(EBADF as u16).to_le_bytes());
        }
    }
    if let Some(d) = sleep {
        let mut d = d.min(MAX_SLEEP);
        if let Some(deadline) = host.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::host(HostStop::Deadline));
            }
            d = d.min(left);
        }
        std::thread::sleep(d);
    }
    Ok(errno(put_u32(mem, written, count as u32)))
}

/// The calls implemented here; every other `wasi_snapshot_preview1` import
/// answers ENOSYS.
const IMPLEMENTED: &[&str] = &[
    "sched_yield",
    "proc_exit",
    "args_sizes_get",
    "args_get",
    "environ_sizes_get",
    "environ_get",
    "clock_time_get",
    "random_get",
    "fd_write",
    "poll_oneoff",
    "fd_fdstat_get",
    "fd_prestat_get",
];

/// Defines every import of `module` on `linker`: the implemented calls, and
/// ENOSYS for the other `wasi_snapshot_preview1` functions. Fails for an
/// import from another module or of another kind (the file is then not
/// sigil's CUE module).
pub(crate) fn link(linker: &mut Linker<Host>, module: &Module) -> Result<(), String> {
    define_implemented(linker).map_err(|e| e.to_string())?;
    // Go's linker may import one function more than once.
    let mut stubbed = std::collections::BTreeSet::new();
    for import in module.imports() {
        let (from, name) = (import.module(), import.name());
        if from != WASI_MODULE {
            return Err(format!(
                "it imports {from}.{name}; sigil's CUE module imports only {WASI_MODULE}"
            ));
        }
        if IMPLEMENTED.contains(&name) || !stubbed.insert(name.to_owned()) {
            continue;
        }
        let ExternType::Func(ty) = import.ty() else {
            return Err(format!("it imports {from}.{name}, which is not a function"));
        };
        let answers_errno = matches!(ty.results(), [wasmi::ValType::I32]);
        let unsupported = name.to_owned();
        linker
            .func_new(
                from,
                name,
                ty.clone(),
                move |_, _, results: &mut [Val]| match results.first_mut() {
                    Some(slot) if answers_errno => {
                        *slot = Val::I32(ENOSYS);
                        Ok(())
                    }
                    _ => Err(Error::host(HostStop::Unsupported(unsupported.clone()))),
                },
            )
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn define_implemented(linker: &mut Linker<Host>) -> Result<(), wasmi::errors::LinkerError> {
    let m = WASI_MODULE;
    linker.func_wrap(m, "sched_yield", || -> i32 { ESUCCESS })?;
    linker.func_wrap(
        m,
        "proc_exit",
        |_: Caller<'_, Host>, code: i32| -> Result<(), Error> {
            Err(Error::host(HostStop::Exit(code)))
        },
    )?;
    linker.func_wrap(
        m,
        "args_sizes_get",
        |mut c: Caller<'_, Host>, argc: i32, size: i32| -> i32 {
            let Some((mem, _)) = split(&mut c) else {
                return EINVAL;
            };
            errno(put_u32(mem, argc, 1) && put_u32(mem, size, ARG0.len() as u32))
        },
    )?;
    linker.func_wrap(
        m,
        "args_get",
        |mut c: Caller<'_, Host>, argv: i32, buf: i32| -> i32 {
            let Some((mem, _)) = split(&mut c) else {
                return EINVAL;
            };
            if !put_u32(mem, argv, buf as u32) {
                return EINVAL;
            }
            match bytes_mut(mem, buf, ARG0.len()) {
                Some(dst) => {
                    dst.copy_from_slice(ARG0);
                    ESUCCESS
                }
                None => EINVAL,
            }
        },
    )?;
    linker.func_wrap(
        m,
        "environ_sizes_get",
        |mut c: Caller<'_, Host>, count: i32, size: i32| -> i32 {
            let Some((mem, _)) = split(&mut c) else {
                return EINVAL;
            };
            errno(put_u32(mem, count, 0) && put_u32(mem, size, 0))
        },
    )?;
    linker.func_wrap(m, "environ_get", |_: i32, _: i32| -> i32 { ESUCCESS })?;
    linker.func_wrap(
        m,
        "clock_time_get",
        |mut c: Caller<'_, Host>, id: i32, _precision: i64, out: i32| -> i32 {
            let Some((mem, host)) = split(&mut c) else {
                return EINVAL;
            };
            let nanos = match id {
                // Realtime.
                0 => SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
                // Monotonic, process and thread CPU time: one monotonic
                // clock that never reads zero.
                1..=3 => (host.started.elapsed().as_nanos() as u64).saturating_add(1),
                _ => return EINVAL,
            };
            errno(put_u64(mem, out, nanos))
        },
    )?;
    linker.func_wrap(
        m,
        "random_get",
        |mut c: Caller<'_, Host>, buf: i32, len: i32| -> i32 {
            let Some((mem, _)) = split(&mut c) else {
                return EINVAL;
            };
            match bytes_mut(mem, buf, len as u32 as usize).map(getrandom::fill) {
                Some(Ok(())) => ESUCCESS,
                Some(Err(_)) => EIO,
                None => EINVAL,
            }
        },
    )?;
    linker.func_wrap(
        m,
        "fd_write",
        |mut c: Caller<'_, Host>, fd: i32, iovs: i32, count: i32, written: i32| -> i32 {
            fd_write(&mut c, fd, iovs, count, written)
        },
    )?;
    linker.func_wrap(
        m,
        "poll_oneoff",
        |mut c: Caller<'_, Host>,
         subscriptions: i32,
         events: i32,
         count: i32,
         written: i32|
         -> Result<i32, Error> {
            poll_oneoff(&mut c, subscriptions, events, count, written)
        },
    )?;
    linker.func_wrap(
        m,
        "fd_fdstat_get",
        |mut c: Caller<'_, Host>, fd: i32, stat: i32| -> i32 {
            if !(0..=2).contains(&fd) {
                return EBADF;
            }
            let Some((mem, _)) = split(&mut c) else {
                return EINVAL;
            };
            match bytes_mut(mem, stat, 24) {
                Some(dst) => {
                    // A character device with no flags and every right.
                    dst.fill(0);
                    if let Some(b) = dst.get_mut(0) {
                        *b = 2;
                    }
                    for range in [8..16, 16..24] {
                        if let Some(b) = dst.get_mut(range) {
                            b.copy_from_slice(&u64::MAX.to_le_bytes());
                        }
                    }
                    ESUCCESS
                }
                None => EINVAL,
            }
        },
    )?;
    // No preopened directories: Go's os package stops at the first EBADF.
    linker.func_wrap(m, "fd_prestat_get", |_: i32, _: i32| -> i32 { EBADF })?;
    Ok(())
}
