//! glibc malloc settings for the long-running processes: freed memory goes back to the system
//! instead of staying in the heap's free lists, which held the scheduler's first run over
//! 10,000 pods above its 100 MiB target (docs/performance.md, "Memory").

/// Blocks of 128 KiB and more get their own mapping, and a heap top free beyond 128 KiB is
/// returned: glibc's `mmap_threshold` and `trim_threshold` tunables, fixed rather than grown
/// with the largest block freed (glibc's default). Left alone where the administrator tuned
/// malloc through the environment. Call before any other thread starts.
pub(super) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tuned = std::env::var_os("GLIBC_TUNABLES")
            .is_some_and(|t| t.to_string_lossy().contains("glibc.malloc."))
            || ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
                .iter()
                .any(|k| std::env::var_os(k).is_some());
        if tuned {
            return;
        }
        const THRESHOLD: libc::c_int = 128 * 1024;
        // SAFETY: mallopt only sets allocator parameters, and no other thread allocates yet.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD);
        }
    }
}
