//! The process's allocator, mimalloc, and the one setting a command changes in it.

use crate::args::Command;

/// The process's allocator: mimalloc (docs/design.md, "Dependencies"). Every record costs a few
/// dozen short-lived allocations on every path (keys and values staged, strings of a parsed
/// request, the answer line), and glibc's malloc and free were about a fifth of the
/// instructions of an append (docs/performance.md). RocksDB's own C++ allocations are not
/// affected.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`: its place in the enum `mi_option_e` of `mimalloc.h`
/// (version 3.3.2, the one `libmimalloc-sys` 0.1.49 builds), which the binding names no
/// constant for. A test below holds the version and the option's default, so an upgrade that
/// moves it fails there rather than setting another option.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long, in milliseconds, `verify` and `reindex` let mimalloc keep freed pages before it
/// gives them back (its default: 1,000). Both fill a bounded view, write it out and fill it
/// again; over a second of that, freed pages are kept beside the ones in use, about 25 MiB of
/// `verify`'s peak, for about 2% more CPU at 100 ms (docs/performance.md, "The allocator's
/// purge delay"). The server and `append` keep the default: their targets are CPU.
const BULK_PURGE_DELAY_MS: std::os::raw::c_long = 100;

/// Sets the allocator for the command about to run; called once by `main`, before the
/// command starts any thread.
pub fn tune_for(command: &Command) {
    if matches!(command, Command::Verify { .. } | Command::Reindex) {
        // SAFETY: `mi_option_set` stores an integer in mimalloc's table of options, and no
        // other thread of ours runs yet to read it; the option's place is checked by the
        // tests below.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, BULK_PURGE_DELAY_MS) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmimalloc_sys::{mi_option_get, mi_version};

    /// The option's place was read from mimalloc 3.3.2's header, where option 15 is the purge
    /// delay with a default of 1,000 ms (its neighbours default to 1 and 0): a different version,
    /// or another option at 15, fails here. Then `verify` and `reindex` set the shorter delay,
    /// and `append` and the server keep the default. One test, since it changes an option of the
    /// whole process. (The environment's `MIMALLOC_PURGE_DELAY` would change the default;
    /// nothing in the tests sets it.)
    #[test]
    fn the_bulk_commands_shorten_the_purge_delay() {
        assert_eq!(unsafe { mi_version() }, 30302);
        let default = unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(default, 1000);
        let cli = |args: &[&str]| {
            <crate::args::Cli as clap::Parser>::try_parse_from(args)
                .expect("arguments parse")
                .command
        };
        let set = |command: &[&str]| {
            unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, default) };
            tune_for(&cli(command));
            unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) }
        };
        assert_eq!(set(&["hitl-ledger", "append", "--batch", "10"]), default);
        assert_eq!(set(&["hitl-ledger", "serve"]), default);
        assert_eq!(set(&["hitl-ledger", "reindex"]), BULK_PURGE_DELAY_MS);
        assert_eq!(set(&["hitl-ledger", "verify"]), BULK_PURGE_DELAY_MS);
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, default) };
    }
}
