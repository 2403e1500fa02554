//! The test process's peak resident memory (Linux `VmHWM`), for tests that
//! show an input costs no more than a bound allows: reset the peak, run the
//! input, read how far the peak grew.

/// Starts a new peak measurement where the process stands now (writes `5`
/// to `/proc/self/clear_refs`, Linux 4.0 and later).
pub fn reset() -> std::io::Result<()> {
    std::fs::write("/proc/self/clear_refs", "5")
}

/// The peak resident memory since the last [`reset`] (or the start), in
/// KiB; `None` where `/proc/self/status` does not say.
pub fn kib() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_peak_grows_by_what_is_touched_and_starts_again_at_a_reset() {
        reset().unwrap();
        let before = kib().unwrap();
        // 64 MiB, every page written so that it is resident.
        let held = std::hint::black_box(vec![1u8; 64 << 20]);
        let holding = kib().unwrap();
        assert!(
            holding - before >= 60 << 10,
            "the peak grew {} KiB for 64 MiB",
            holding - before
        );
        drop(held);
        reset().unwrap();
        let after = kib().unwrap();
        assert!(
            after + (32 << 10) < holding,
            "after a reset the peak is {after} KiB, as while 64 MiB were held ({holding} KiB)"
        );
    }
}
