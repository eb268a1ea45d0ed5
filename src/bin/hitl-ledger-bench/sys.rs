//! The machine and its processes: what a run was measured on, each child's wall time, CPU
//! and peak memory (from `wait4`'s resource usage), and `/proc` readings of a running child
//! (its peak resident set, which can be reset between phases, and its CPU time).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::BoxResult;

/// What the run was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// `model name` of the first CPU in `/proc/cpuinfo`.
    pub cpu_model: String,
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// `MemTotal` of `/proc/meminfo`, MiB.
    pub memory_mib: u64,
    /// The file system type of the work directory (where every ledger, the fdatasync loop and
    /// the RocksDB limit write).
    pub work_fs: String,
}

/// Reads the machine's description; the file system is the one `work` is on.
pub fn machine(work: &Path) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let memory_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024);
    Machine {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        kernel,
        memory_mib,
        work_fs: fs_type(work),
    }
}

/// The name of the file system `path` is on (from `statfs`'s magic number).
pub fn fs_type(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return "unknown".into();
    };
    // SAFETY: `statfs` writes into the zeroed struct we own; `c` is a valid C string.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return "unknown".into();
    }
    #[allow(clippy::unnecessary_cast)] // f_type's integer type differs between libcs
    match s.f_type as i64 {
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x9123_683E => "btrfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        0x6969 => "nfs".into(),
        other => format!("0x{other:x}"),
    }
}

/// What a finished child process used.
#[derive(Debug, Clone, Serialize)]
pub struct ChildRun {
    /// Wall time from spawn to exit.
    #[serde(serialize_with = "crate::report::secs")]
    pub wall: Duration,
    /// Exit code, or minus the signal that ended it.
    pub status: i32,
    /// Peak resident set size, KiB: the child's own `VmHWM` sampled every 10 ms while it
    /// runs (`ru_maxrss` only when no sample was taken, or for a server's whole life).
    pub max_rss_kib: u64,
    /// User CPU, seconds.
    pub user_s: f64,
    /// System CPU, seconds.
    pub sys_s: f64,
    /// Standard output.
    #[serde(skip)]
    pub stdout: Vec<u8>,
    /// The end of standard error (for messages).
    #[serde(skip)]
    pub stderr_tail: String,
}

impl ChildRun {
    /// Fails with the child's standard error when it did not exit 0.
    pub fn check(&self, what: &str) -> BoxResult<()> {
        if self.status == 0 {
            return Ok(());
        }
        Err(format!(
            "{what} exited with status {}: {}",
            self.status,
            self.stderr_tail.trim()
        )
        .into())
    }
}

/// Waits for `pid` with `wait4`, returning its exit status and resource usage.
fn wait4(pid: libc::pid_t) -> BoxResult<(i32, libc::rusage)> {
    let mut status: libc::c_int = 0;
    // SAFETY: plain FFI; `ru` is a zeroed struct we own and wait4 fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waiting for process {pid}: {e}").into());
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        -libc::WTERMSIG(status)
    } else {
        -1
    };
    Ok((code, ru))
}

fn tv_secs(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

fn drain(mut r: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

fn tail(bytes: &[u8], n: usize) -> String {
    let s = String::from_utf8_lossy(bytes);
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(s.len());
    s[start..].to_string()
}

/// Runs `cmd` to completion (standard input closed), collecting its output, wall time, CPU
/// and peak memory.
pub fn run_child(cmd: &mut Command) -> BoxResult<ChildRun> {
    run(cmd, true)
}

/// As [`run_child`], with standard output thrown away (`/dev/null`: the child still writes
/// it, nobody holds it in memory).
pub fn run_child_quiet(cmd: &mut Command) -> BoxResult<ChildRun> {
    run(cmd, false)
}

fn run(cmd: &mut Command, keep_stdout: bool) -> BoxResult<ChildRun> {
    cmd.stdin(Stdio::null())
        .stdout(if keep_stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting {:?}: {e}", cmd.get_program()))?;
    let out = child.stdout.take().map(drain);
    let err = drain(child.stderr.take().ok_or("no stderr")?);
    let pid = child.id() as libc::pid_t;
    let peak = PeakPoll::start(pid);
    let (status, ru) = wait4(pid)?;
    let wall = started.elapsed();
    let polled = peak.stop();
    let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok(ChildRun {
        wall,
        status,
        max_rss_kib: polled.unwrap_or(ru.ru_maxrss as u64),
        user_s: tv_secs(ru.ru_utime),
        sys_s: tv_secs(ru.ru_stime),
        stdout,
        stderr_tail: tail(&stderr, 4000),
    })
}

/// Samples a running child's `VmHWM` (the peak resident set of its own address space, reset
/// by `exec`) every [`PEAK_POLL`]. `wait4`'s `ru_maxrss` is not used when a sample exists:
/// the standard library spawns with `CLONE_VM`, and Linux then counts the parent's peak in
/// the child's `ru_maxrss`, so every child would show at least this program's own peak.
struct PeakPoll {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<Option<u64>>,
}

/// How often [`PeakPoll`] samples (a peak reached in a child's last interval is missed).
const PEAK_POLL: Duration = Duration::from_millis(10);

impl PeakPoll {
    fn start(pid: libc::pid_t) -> PeakPoll {
        use std::sync::atomic::Ordering;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&done);
        let handle = std::thread::spawn(move || {
            let mut peak: Option<u64> = None;
            while !flag.load(Ordering::Acquire) {
                if let Some(k) = proc_status_kib(pid, "VmHWM") {
                    peak = Some(peak.map_or(k, |p| p.max(k)));
                }
                std::thread::sleep(PEAK_POLL);
            }
            peak
        });
        PeakPoll { done, handle }
    }

    /// The highest sample, once the child has been reaped.
    fn stop(self) -> Option<u64> {
        self.done.store(true, std::sync::atomic::Ordering::Release);
        self.handle.join().ok().flatten()
    }
}

/// A child process that runs until stopped (a server).
pub struct Running {
    child: Option<Child>,
    started: Instant,
}

impl Running {
    /// Wraps a spawned child.
    pub fn new(child: Child) -> Running {
        Running {
            child: Some(child),
            started: Instant::now(),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> libc::pid_t {
        self.child.as_ref().map_or(0, |c| c.id() as libc::pid_t)
    }

    /// Asks it to stop (SIGTERM), waits, and returns what it used over its whole life.
    pub fn stop(mut self) -> BoxResult<ChildRun> {
        let mut child = self.child.take().ok_or("already stopped")?;
        let pid = child.id() as libc::pid_t;
        // SAFETY: signals the child we spawned and have not reaped, by its pid.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let err = child.stderr.take().map(drain);
        let (status, ru) = wait4(pid)?;
        let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
        Ok(ChildRun {
            wall: self.started.elapsed(),
            status,
            max_rss_kib: ru.ru_maxrss as u64,
            user_s: tv_secs(ru.ru_utime),
            sys_s: tv_secs(ru.ru_stime),
            stdout: Vec::new(),
            stderr_tail: tail(&stderr, 4000),
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Only on an error path: the child we spawned, by its handle.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A `kB` field of `/proc/PID/status` (`VmHWM`, `VmRSS`), KiB.
pub fn proc_status_kib(pid: libc::pid_t, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// Resets the peak resident set (`VmHWM`) of `pid` to its current size (Linux 4.0+), so the
/// next reading is the peak of what follows. False when the kernel refused.
pub fn reset_peak_rss(pid: libc::pid_t) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), b"5").is_ok()
}

fn clock_ticks() -> f64 {
    // SAFETY: plain FFI, no pointers.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// User + system CPU seconds of a running process, from `/proc/PID/stat`.
pub fn proc_cpu_s(pid: libc::pid_t) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start at state, field 3.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// User + system CPU seconds this process has used so far.
pub fn self_cpu_s() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    tv_secs(ru.ru_utime) + tv_secs(ru.ru_stime)
}

/// The machine's busy and total CPU time so far (all CPUs, `/proc/stat`), in ticks.
pub fn machine_cpu() -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = s.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// Reads one line from a child's output (the server's `listening on ADDR`).
pub fn read_line_from(r: &mut impl std::io::Read, deadline: Instant) -> BoxResult<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while Instant::now() < deadline {
        match r.read(&mut b) {
            Ok(0) => break,
            Ok(_) if b[0] == b'\n' => return Ok(String::from_utf8_lossy(&line).into_owned()),
            Ok(_) => line.push(b[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!(
        "the server printed no line before exiting: {:?}",
        String::from_utf8_lossy(&line)
    )
    .into())
}

/// Copies a directory tree (a closed ledger: its RocksDB files are not being written).
pub fn copy_dir(from: &Path, to: &Path) -> BoxResult<()> {
    std::fs::create_dir_all(to)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700))?;
    }
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

/// The size in bytes of everything under `path`.
pub fn dir_bytes(path: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(path) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// Runs `git` in the current directory; `None` when it is not a checkout or git is missing.
pub fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
