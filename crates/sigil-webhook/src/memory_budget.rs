//! What the webhook's flags let it hold in memory, against its cgroup's
//! memory limit.
//!
//! Every cache and buffer of the webhook is bounded by a flag, and the threat
//! model counts on those bounds. They only hold if the kernel does not kill
//! the process first: a container limit below their sum turns a burst of
//! large registry responses or a full verdict cache into an OOM kill, which
//! the API server sees as a webhook outage. So at start the webhook adds the
//! bounds up and refuses to run when the sum exceeds its limit, naming the
//! flags to lower. docs/installation.md ("Memory") gives the same sum, and
//! scripts/chart_check.py holds the chart's default limits to it.

use std::path::Path;

use crate::config::Args;

const MIB: u64 = 1 << 20;

/// The process itself: runtime, TLS, the policy snapshot and trust roots,
/// connections (11 MiB of RSS idle in webhook-bench.sh; rounded up for
/// large snapshots).
const PROCESS_BYTES: u64 = 32 * MIB;
/// One cached verdict with its keys (87 MiB of RSS held 100,000 verdicts in
/// webhook-bench.sh, 11 MiB of it idle: about 0.8 KiB each).
const VERDICT_BYTES: u64 = 1024;
/// One CUE instance besides its linear memory: the compiled module.
const CUE_MODULE_BYTES: u64 = 20 * MIB;
/// One Rego worker process besides its `RLIMIT_DATA`: its stack and what
/// the kernel keeps for it (3 MiB of anonymous RSS idle; the binary's pages
/// are shared with this process).
const REGO_PROCESS_BYTES: u64 = 8 * MIB;

/// One term of the sum: what holds the memory and the flags that bound it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// What holds it.
    pub what: String,
    /// The flags that set it (empty when none does).
    pub flags: &'static str,
    /// Bytes at most.
    pub bytes: u64,
}

/// The terms of what `args` let the webhook hold, largest first.
pub fn bounds(args: &Args) -> Vec<Bound> {
    let mut out = vec![
        Bound {
            what: "the process (runtime, TLS, policy snapshot, trust roots)".into(),
            flags: "",
            bytes: PROCESS_BYTES,
        },
        Bound {
            what: format!(
                "{} MiB of registry responses",
                args.judge.registry_memory_mib
            ),
            flags: "--registry-memory-mib",
            bytes: args.judge.registry_memory_mib.saturating_mul(MIB),
        },
        Bound {
            what: format!("{} cached verdicts", args.judge.verdict_cache_size),
            flags: "--verdict-cache-size",
            bytes: args.judge.verdict_cache_size.saturating_mul(VERDICT_BYTES),
        },
        Bound {
            what: format!(
                "{} CUE worker(s) of {} MiB",
                args.judge.cue_workers, args.judge.cue_memory_limit_mib
            ),
            flags: "--cue-workers, --cue-memory-limit-mib",
            bytes: workers(
                args.judge.cue_workers,
                args.judge.cue_memory_limit_mib,
                CUE_MODULE_BYTES,
            ),
        },
        Bound {
            what: format!(
                "{} Rego worker process(es) of {} MiB",
                args.judge.rego_workers, args.judge.rego_memory_limit_mib
            ),
            flags: "--rego-workers, --rego-memory-limit-mib",
            bytes: workers(
                args.judge.rego_workers,
                args.judge.rego_memory_limit_mib,
                REGO_PROCESS_BYTES,
            ),
        },
        Bound {
            what: "the AdmissionReview being read".into(),
            flags: "--max-body-bytes",
            bytes: u64::try_from(args.max_body_bytes).unwrap_or(u64::MAX),
        },
    ];
    if args.judge.signature_ttl_seconds > 0 {
        out.push(Bound {
            what: "cached signature material".into(),
            flags: "--signature-ttl-seconds (0 turns the cache off)",
            bytes: sigil_judge::args::MATERIAL_BYTES,
        });
    }
    out.sort_by_key(|b| std::cmp::Reverse(b.bytes));
    out
}

/// `count` workers, each limited to `limit_mib` and holding `overhead`
/// bytes besides.
fn workers(count: u64, limit_mib: u64, overhead: u64) -> u64 {
    count.saturating_mul(limit_mib.saturating_mul(MIB).saturating_add(overhead))
}

/// The sum of `bounds`.
pub fn total(bounds: &[Bound]) -> u64 {
    bounds.iter().fold(0, |sum, b| sum.saturating_add(b.bytes))
}

/// A cgroup v2 `memory.max`: bytes, or `None` for `max`.
fn parse_v2(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse().ok()
}

/// A cgroup v1 `memory.limit_in_bytes`: bytes, or `None` when unlimited
/// (the kernel writes the largest page-aligned i64 then).
fn parse_v1(text: &str) -> Option<u64> {
    let n: u64 = text.trim().parse().ok()?;
    (n < 1 << 62).then_some(n)
}

/// The memory limit of the cgroup this process runs in, as a container
/// sees it (its cgroup mounted at `root`: cgroup v2's `memory.max`, or v1's
/// `memory/memory.limit_in_bytes`); `None` when unlimited or unknown.
pub fn cgroup_limit(root: &Path) -> Option<u64> {
    if let Ok(text) = std::fs::read_to_string(root.join("memory.max")) {
        return parse_v2(&text);
    }
    std::fs::read_to_string(root.join("memory/memory.limit_in_bytes"))
        .ok()
        .and_then(|text| parse_v1(&text))
}

fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(MIB)
}

/// `Err` with what to do when `bounds` exceed `limit`.
pub fn check_against(bounds: &[Bound], limit: Option<u64>) -> Result<(), String> {
    let Some(limit) = limit else {
        return Ok(());
    };
    let sum = total(bounds);
    if sum <= limit {
        return Ok(());
    }
    let terms = bounds
        .iter()
        .map(|b| {
            if b.flags.is_empty() {
                format!("{} MiB {}", mib(b.bytes), b.what)
            } else {
                format!("{} MiB {} ({})", mib(b.bytes), b.what, b.flags)
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(format!(
        "with these flags sigil-webhook may hold up to {} MiB, more than its cgroup memory limit of \
         {} MiB, so the kernel could kill it before its own bounds apply: {terms}. Lower those flags \
         (the largest first) or raise the limit (chart value webhook.resources.limits.memory; \
         docs/installation.md, \"Memory\")",
        mib(sum),
        limit / MIB,
    ))
}

/// The start-up check: the bounds of `args` against this process's cgroup.
pub fn check(args: &Args) -> Result<(), crate::Error> {
    let limit = cgroup_limit(Path::new("/sys/fs/cgroup"));
    check_against(&bounds(args), limit).map_err(crate::Error::Config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["sigil-webhook", "--tls-cert", "c.pem", "--tls-key", "k.pem"];
        argv.extend_from_slice(extra);
        match Args::try_parse_from(argv) {
            Ok(a) => a,
            Err(e) => panic!("flags {extra:?} do not parse: {e}"),
        }
    }

    #[test]
    fn the_defaults_add_up_to_what_the_docs_and_the_chart_say() {
        let b = bounds(&args(&[]));
        // 32 + 96 + 32 + 195.3 + 2 × (256 + 20) + 2 × (128 + 8) + 7:
        // docs/installation.md's 1,187 MiB.
        assert_eq!(mib(total(&b)), 1187);
        assert_eq!(b[0].flags, "--cue-workers, --cue-memory-limit-mib");
        assert_eq!(b[0].bytes, 552 * MIB);
        assert_eq!(b[1].flags, "--rego-workers, --rego-memory-limit-mib");
        assert_eq!(b[1].bytes, 272 * MIB);
        assert!(check_against(&b, Some(1280 * MIB)).is_ok());
        assert!(check_against(&b, Some(1024 * MIB)).is_err());
    }

    #[test]
    fn a_limit_below_the_bounds_is_refused_naming_the_flags() {
        let b = bounds(&args(&[]));
        let err = match check_against(&b, Some(256 * MIB)) {
            Err(e) => e,
            Ok(()) => panic!("1187 MiB of bounds passed a 256 MiB limit"),
        };
        assert!(err.contains("up to 1187 MiB"), "{err}");
        assert!(err.contains("limit of 256 MiB"), "{err}");
        for flag in [
            "--cue-workers",
            "--cue-memory-limit-mib",
            "--rego-workers",
            "--rego-memory-limit-mib",
            "--registry-memory-mib",
            "--verdict-cache-size",
        ] {
            assert!(err.contains(flag), "{flag} missing from: {err}");
        }
        assert!(err.contains("webhook.resources.limits.memory"), "{err}");
    }

    #[test]
    fn lower_flags_fit_a_lower_limit() {
        let small = args(&[
            "--cue-workers=1",
            "--cue-memory-limit-mib=64",
            "--rego-workers=1",
            "--rego-memory-limit-mib=64",
            "--verdict-cache-size=50000",
        ]);
        let b = bounds(&small);
        // 32 + 96 + 32 + 48.8 + (64 + 20) + (64 + 8) + 7: the docs' 372 MiB
        // example.
        assert_eq!(mib(total(&b)), 372);
        assert!(check_against(&b, Some(384 * MIB)).is_ok());
        assert!(check_against(&b, Some(320 * MIB)).is_err());
    }

    #[test]
    fn no_signature_cache_no_term_for_it() {
        let with = total(&bounds(&args(&[])));
        let without = total(&bounds(&args(&["--signature-ttl-seconds=0"])));
        assert_eq!(with - without, sigil_judge::args::MATERIAL_BYTES);
    }

    #[test]
    fn no_limit_means_no_refusal() {
        let huge = bounds(&args(&["--verdict-cache-size=100000000"]));
        assert!(check_against(&huge, None).is_ok());
    }

    #[test]
    fn cgroup_files_are_read_as_the_kernel_writes_them() {
        assert_eq!(parse_v2("1073741824\n"), Some(1 << 30));
        assert_eq!(parse_v2("max\n"), None);
        assert_eq!(parse_v2("garbage"), None);
        assert_eq!(parse_v1("268435456\n"), Some(256 * MIB));
        assert_eq!(parse_v1("9223372036854771712\n"), None);
        assert_eq!(parse_v1(""), None);

        let dir = std::env::temp_dir().join(format!("sigil-memory-budget-{}", std::process::id()));
        let v1 = dir.join("v1");
        let v2 = dir.join("v2");
        let setup = std::fs::create_dir_all(v1.join("memory"))
            .and_then(|()| std::fs::create_dir_all(&v2))
            .and_then(|()| std::fs::write(v1.join("memory/memory.limit_in_bytes"), "536870912\n"))
            .and_then(|()| std::fs::write(v2.join("memory.max"), "max\n"));
        if let Err(e) = setup {
            panic!(
                "cannot write the cgroup fixtures under {}: {e}",
                dir.display()
            );
        }
        assert_eq!(cgroup_limit(&v1), Some(512 * MIB));
        assert_eq!(cgroup_limit(&v2), None);
        assert_eq!(cgroup_limit(&dir.join("absent")), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
