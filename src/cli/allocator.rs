//! The command line's allocator, shared with the benches (`benches/store.rs` includes
//! this file) so that they measure the store as the binary runs it.

/// The command line's allocator. A restore reads and checks the log on a blocking
/// thread and writes on another, so most of what one thread allocates the other
/// frees; glibc's malloc takes the allocating thread's arena lock for each such free,
/// and the two threads spent a fifth of a long restore waking each other on it
/// (BENCHMARKS.md, "The allocator"). mimalloc frees across threads without a lock.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_arena_eager_commit` (its header's `mi_option_e`; the
/// bindings leave the experimental options unnamed on purpose).
#[cfg(target_os = "linux")]
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Runs before `main` and before the first Rust allocation, which reserves
/// mimalloc's arena. (mimalloc's own constructor runs earlier: it reads its
/// `MIMALLOC_*` variables and reserves nothing by default, so this overrides a
/// `MIMALLOC_ARENA_EAGER_COMMIT` given there.) Where the system overcommits, mimalloc
/// commits a whole arena up front and then only resets what it frees, so freed pages
/// stay resident until the kernel wants them, and a restore's or a record's peak
/// resident memory doubled. Committing on demand frees them back. Only on Linux, where
/// it was measured; elsewhere the binary runs on mimalloc's defaults.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static COMMIT_ON_DEMAND: extern "C" fn() = commit_on_demand;

#[cfg(target_os = "linux")]
extern "C" fn commit_on_demand() {
    // SAFETY: sets one option before any thread exists (mimalloc's option setters are
    // not thread-safe); the option is one the linked mimalloc has.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) }
}
