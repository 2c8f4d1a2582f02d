//! The process under measurement: spawn, CPU time and peak RSS from /proc (Linux only), stop.

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A running system under measurement, its stdout and stderr appended to a log file.
pub struct Child {
    child: std::process::Child,
    name: String,
}

/// What /proc says about a process tree: CPU time (user + system, all threads) and peak RSS.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// utime + stime, in seconds.
    pub cpu_s: f64,
    /// VmHWM, in MiB.
    pub peak_rss_mib: f64,
}

impl Child {
    /// Starts `command` (program and arguments; no shell), appending its output to `log`.
    pub fn spawn(name: &str, command: &[String], log: &Path) -> anyhow::Result<Self> {
        let (program, args) = command.split_first().context("no command to run after `--`")?;
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("could not open the log file {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("{name}: could not start {program}; is it built?"))?;
        Ok(Child { child, name: name.to_owned() })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails, naming the system and showing the end of its log, if the process has exited.
    pub fn check_alive(&mut self, log: &Path) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} exited early ({status}); last lines of {}:\n{}", self.name, log.display(), tail(log, 30));
        }
        Ok(())
    }

    /// CPU time and peak RSS so far of the process and every process it started (a system of
    /// several processes, such as `bench/processes.sh`): the sum over the tree, read from
    /// /proc/PID/stat and /proc/PID/status.
    pub fn usage(&self) -> anyhow::Result<Usage> {
        let mut total = Usage { cpu_s: 0.0, peak_rss_mib: 0.0 };
        for pid in tree(self.pid()) {
            let usage =
                process_usage(pid).with_context(|| format!("reading /proc/{pid} of {} (Linux only)", self.name))?;
            total.cpu_s += usage.cpu_s;
            total.peak_rss_mib += usage.peak_rss_mib;
        }
        Ok(total)
    }

    /// SIGTERM, then SIGKILL if the process is still running after `grace`.
    pub fn terminate(&mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
        unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
        let asked = Instant::now();
        while asked.elapsed() < grace {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("weir-bench: {} still running {grace:?} after SIGTERM; sending SIGKILL", self.name);
        self.kill()
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) -> anyhow::Result<ExitStatus> {
        self.child.kill()?;
        Ok(self.child.wait()?)
    }
}

/// `root` and its descendants, from the parent pids in /proc/*/stat.
fn tree(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat_fields(pid).ok()?.get(1)?.parse().ok()?)))
        .collect();
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(parents.iter().filter(|(_, ppid)| *ppid == parent).map(|(pid, _)| *pid));
        next += 1;
    }
    found
}

/// The fields of /proc/PID/stat after the parenthesised command name (field 3, the state, first).
fn stat_fields(pid: u32) -> anyhow::Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("malformed /proc/PID/stat")? + 2..];
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

/// One process's CPU time (utime + stime, fields 14 and 15) and peak RSS (VmHWM).
fn process_usage(pid: u32) -> anyhow::Result<Usage> {
    let fields = stat_fields(pid)?;
    let ticks = |i: usize| -> anyhow::Result<f64> { Ok(fields.get(i - 3).context("short /proc/PID/stat")?.parse()?) };
    // SAFETY: sysconf has no preconditions.
    let clock_ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu_s = (ticks(14)? + ticks(15)?) / clock_ticks;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let hwm_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/PID/status")?;
    Ok(Usage { cpu_s, peak_rss_mib: hwm_kib / 1024.0 })
}

/// The last `lines` lines of a log file (for error messages).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `checkpoint_us` of every `checkpoint committed` line of a Weir log, in order.
pub fn checkpoint_latencies_us(log: &Path) -> anyhow::Result<Vec<u64>> {
    let file = File::open(log).with_context(|| format!("could not open {}", log.display()))?;
    let text = std::io::read_to_string(file)?;
    Ok(text
        .lines()
        .filter(|l| l.contains("checkpoint committed"))
        .filter_map(|l| {
            let value = l.split("checkpoint_us=").nth(1)?;
            let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect())
}
