//! End-to-end harness for tandem: the real shim (`libtandem.so`), the fake
//! driver (`libcuda.so.1` from `tests/fake-driver`) and the C test hosts in
//! `tests/hosts/`.
//!
//! [`artifacts`] builds the two libraries with the same cargo and profile as
//! the running test executable, lays out `target/<profile>/e2e/lib/` (the fake
//! as `libcuda.so.1` and `libcuda.so`), and [`run_host`] compiles a host on
//! first use into `target/<profile>/e2e/bin/` and runs it under an [`Env`].
//!
//! Host output protocol (see `tests/hosts/workload.h`):
//! `RESULT <hex> [role]`, `OWN|FAKE|HOOK <label> sym=n ...`,
//! `KERNELS <label> <n> expected <m>`, `MISMATCH ...`, `CUDA_ERROR <call> <code>`,
//! `GPA <name> key=value ...`, `RESOLVE <name> key=value ...`, `DONE mismatches=<n>`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

pub mod coord;
pub mod inproc;
pub mod mps;

/// Kernels one workload run executes, read from `WL_KERNELS_PER_RUN` in
/// workload.h so the hosts and the tests cannot disagree.
pub fn workload_kernels() -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hosts/workload.h");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        text.lines()
            .find_map(|l| l.strip_prefix("#define WL_KERNELS_PER_RUN "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no numeric WL_KERNELS_PER_RUN in {}", path.display()))
    })
}

/// Exit codes of the hosts (`WL_EXIT_*` in workload.h).
pub mod exit {
    /// Everything matched.
    pub const OK: i32 = 0;
    /// Wrong data or a count MISMATCH.
    pub const CHECK: i32 = 1;
    /// Bad command line.
    pub const USAGE: i32 = 2;
    /// A driver call failed (a `CUDA_ERROR` line says which).
    pub const CUDA: i32 = 3;
}

/// A host that is killed after this long is reported as hung.
const HOST_TIMEOUT: Duration = Duration::from_secs(120);

/// Every symbol the shim must hook: `tests/hosts/hooked_symbols.h`, the one
/// list the C hosts, the fake driver's tests and these tests share.
pub fn hooked() -> &'static [&'static str] {
    static LIST: OnceLock<Vec<&'static str>> = OnceLock::new();
    LIST.get_or_init(|| parse_hooked_symbols(include_str!("../../hosts/hooked_symbols.h")))
}

/// The names in `TANDEM_HOOKED("name")` lines.
pub fn parse_hooked_symbols(text: &'static str) -> Vec<&'static str> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("TANDEM_HOOKED(\""))
        .filter_map(|rest| rest.strip_suffix("\")"))
        .collect()
}

/// The built libraries and the directories the hosts live in.
#[derive(Debug)]
pub struct Artifacts {
    /// `target/`
    pub target_dir: PathBuf,
    /// `target/<profile>/`
    pub profile_dir: PathBuf,
    /// `target/<profile>/libtandem.so`
    pub shim: PathBuf,
    /// `target/<profile>/libcuda.so` (SONAME libcuda.so.1)
    pub fake: PathBuf,
    /// `target/<profile>/e2e/lib/`: `libcuda.so.1` and `libcuda.so` -> the fake
    pub lib_dir: PathBuf,
    /// `target/<profile>/e2e/bin/`: compiled hosts and the rtld_next helper libraries
    pub bin_dir: PathBuf,
    /// `tests/hosts/`
    pub hosts_src: PathBuf,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// `target/<profile>/` of the running executable (`target/<profile>/deps/<exe>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe has a parent");
    if deps.file_name().is_some_and(|n| n == "deps") {
        return deps.parent().expect("deps has a parent").to_path_buf();
    }
    // An example or a binary directly in target/<profile>/.
    deps.to_path_buf()
}

/// `cargo build <args>` into `target_dir` for `profile`, as the running test
/// was built; panics with cargo's stderr on failure.
pub(crate) fn cargo_build(target_dir: &Path, profile: &str, args: &[&str]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(workspace_root())
        .arg("build")
        .args(args)
        .arg("--target-dir")
        .arg(target_dir)
        .env_remove("CARGO_TARGET_DIR");
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let what = format!("cargo build {}", args.join(" "));
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{what}` ({}): {e}", Path::new(&cargo).display()));
    if !out.status.success() {
        panic!(
            "`{what}` ({profile}) failed with {}:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Replaces `link` with a symlink to `target`, atomically.
fn symlink_force(target: &Path, link: &Path) {
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .unwrap_or_else(|e| panic!("symlink {} -> {}: {e}", tmp.display(), target.display()));
    std::fs::rename(&tmp, link)
        .unwrap_or_else(|e| panic!("rename {} -> {}: {e}", tmp.display(), link.display()));
}

/// Builds (once per process) the shim and the fake driver and lays out the lib dir.
pub fn artifacts() -> &'static Artifacts {
    static ART: OnceLock<Artifacts> = OnceLock::new();
    ART.get_or_init(|| {
        let profile_dir = profile_dir();
        let target_dir = profile_dir
            .parent()
            .expect("target/<profile> has a parent")
            .to_path_buf();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("profile dir name")
            .to_string();
        cargo_build(
            &target_dir,
            &profile,
            &["-p", "tandem-shim", "-p", "tandem-fake-driver"],
        );
        let shim = profile_dir.join("libtandem.so");
        let fake = profile_dir.join("libcuda.so");
        for (what, p) in [("shim", &shim), ("fake driver", &fake)] {
            assert!(
                p.is_file(),
                "the {what} was built but {} does not exist",
                p.display()
            );
        }
        let e2e = profile_dir.join("e2e");
        let lib_dir = e2e.join("lib");
        let bin_dir = e2e.join("bin");
        for d in [&lib_dir, &bin_dir] {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        }
        symlink_force(&fake, &lib_dir.join("libcuda.so.1"));
        symlink_force(&fake, &lib_dir.join("libcuda.so"));
        Artifacts {
            target_dir,
            profile_dir,
            shim,
            fake,
            lib_dir,
            bin_dir,
            hosts_src: workspace_root().join("tests/hosts"),
        }
    })
}

struct HostSpec {
    name: &'static str,
    sources: &'static [&'static str],
    /// Link against the driver (NEEDED libcuda.so.1).
    link_cuda: bool,
    /// Export the executable's symbols and link libnexta.so + libnextb.so.
    rtld_next: bool,
}

const COMMON: &[&str] = &["workload.c", "resolve.c"];

const HOSTS: &[HostSpec] = &[
    HostSpec {
        name: "linked",
        sources: &["linked.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "dlopen",
        sources: &["dlopen.c"],
        link_cuda: false,
        rtld_next: false,
    },
    HostSpec {
        name: "gpa",
        sources: &["gpa.c"],
        link_cuda: false,
        rtld_next: false,
    },
    HostSpec {
        name: "threads",
        sources: &["threads.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "forked",
        sources: &["forked.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "launcher",
        sources: &["launcher.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "init_race",
        sources: &["init_race.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "replay",
        sources: &["replay.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "infer",
        sources: &["infer.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "train",
        sources: &["train.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "replica",
        sources: &["replica.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "follower",
        sources: &["follower.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "smmask",
        sources: &["smmask.c"],
        link_cuda: true,
        rtld_next: false,
    },
    HostSpec {
        name: "rtld_next",
        sources: &["rtld_next.c", "resolve_linked.c"],
        link_cuda: true,
        rtld_next: true,
    },
];

const CFLAGS: &[&str] = &[
    "-std=gnu11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-O1",
    "-g",
    "-pthread",
];

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Newest modification time among the host sources (every .c and .h).
fn sources_mtime(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
    for e in entries.flatten() {
        let p = e.path();
        if matches!(p.extension().and_then(|x| x.to_str()), Some("c" | "h")) {
            if let Some(t) = mtime(&p) {
                newest = newest.max(t);
            }
        }
    }
    newest
}

/// Runs the C compiler; Err carries the command and its diagnostics.
fn run_cc(args: &[std::ffi::OsString], out: &Path) -> Result<(), String> {
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let cc = cc();
    let res = Command::new(&cc).args(args).arg("-o").arg(&tmp).output();
    let o = match res {
        Ok(o) => o,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "C compiler `{cc}` not found: the e2e tests compile C hosts; install gcc \
             (e.g. `apt-get install gcc`) or set CC"
        ),
        Err(e) => panic!("cannot run C compiler `{cc}`: {e}"),
    };
    if !o.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "{cc} {:?} -o {} failed:\n{}",
            args,
            out.display(),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    std::fs::rename(&tmp, out).map_err(|e| format!("rename {}: {e}", tmp.display()))
}

fn needs_build(out: &Path, newest_src: SystemTime) -> bool {
    mtime(out).is_none_or(|t| t < newest_src)
}

fn build_next_libs(a: &Artifacts, newest: SystemTime) -> Result<(), String> {
    for lib in ["nexta", "nextb"] {
        let out = a.bin_dir.join(format!("lib{lib}.so"));
        if !needs_build(&out, newest) {
            continue;
        }
        let mut args: Vec<std::ffi::OsString> = CFLAGS.iter().map(Into::into).collect();
        args.extend(["-shared".into(), "-fPIC".into()]);
        args.push(a.hosts_src.join(format!("lib{lib}.c")).into());
        args.push("-ldl".into());
        run_cc(&args, &out)?;
    }
    Ok(())
}

fn build_host(a: &Artifacts, spec: &HostSpec) -> Result<PathBuf, String> {
    let out = a.bin_dir.join(spec.name);
    let newest = sources_mtime(&a.hosts_src);
    if spec.rtld_next {
        build_next_libs(a, newest)?;
    }
    if !needs_build(&out, newest) {
        return Ok(out);
    }
    let mut args: Vec<std::ffi::OsString> = CFLAGS.iter().map(Into::into).collect();
    args.push("-I".into());
    args.push(a.hosts_src.clone().into());
    if spec.rtld_next {
        args.push("-rdynamic".into());
    }
    for s in spec.sources.iter().chain(COMMON) {
        args.push(a.hosts_src.join(s).into());
    }
    args.push("-Wl,--no-as-needed".into());
    if spec.rtld_next {
        args.push("-L".into());
        args.push(a.bin_dir.clone().into());
        args.extend(["-lnexta".into(), "-lnextb".into()]);
        args.push("-Wl,-rpath,$ORIGIN".into());
    }
    if spec.link_cuda {
        args.push("-L".into());
        args.push(a.lib_dir.clone().into());
        args.push("-lcuda".into());
    }
    args.push("-ldl".into());
    args.push("-lm".into());
    run_cc(&args, &out)?;
    Ok(out)
}

/// Path of a compiled host (compiling it on first use in this process, or when
/// a source is newer than the binary). Panics with the compiler's output.
pub fn host(name: &str) -> PathBuf {
    type Built = Arc<OnceLock<Result<PathBuf, String>>>;
    static BUILT: OnceLock<Mutex<HashMap<String, Built>>> = OnceLock::new();
    let spec = HOSTS
        .iter()
        .find(|h| h.name == name)
        .unwrap_or_else(|| panic!("unknown host {name:?}"));
    let a = artifacts();
    let cell = {
        let mut map = BUILT
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.entry(name.to_string()).or_default().clone()
    };
    match cell.get_or_init(|| build_host(a, spec)) {
        Ok(p) => p.clone(),
        Err(e) => panic!("building host {name} failed: {e}"),
    }
}

/// Sets `LD_PRELOAD` to the shim for a host about to run. When
/// `TANDEM_TEST_LSAN` names a directory (`scripts/leaks`), LeakSanitizer's
/// runtime (`TANDEM_TEST_LSAN_LIB`, default GCC's `liblsan.so.0`) is preloaded
/// first and each process that exits with leaks writes its report to
/// `<dir>/lsan.<pid>`; its exit status is left alone (`exitcode=0`), so the
/// tests judge the hosts exactly as without it.
pub fn preload_shim(cmd: &mut Command, shim: &Path) {
    match std::env::var_os("TANDEM_TEST_LSAN") {
        Some(dir) if !dir.is_empty() => {
            let lib =
                std::env::var_os("TANDEM_TEST_LSAN_LIB").unwrap_or_else(|| "liblsan.so.0".into());
            let mut preload = lib;
            preload.push(":");
            preload.push(shim);
            let mut opts = std::ffi::OsString::from("exitcode=0:log_path=");
            opts.push(Path::new(&dir).join("lsan"));
            cmd.env("LD_PRELOAD", preload).env("LSAN_OPTIONS", opts);
        }
        _ => {
            cmd.env("LD_PRELOAD", shim);
        }
    }
}

/// The environment a host runs in. Starts hermetic: no LD_PRELOAD, no
/// TANDEM_* / FAKECUDA_* from the caller, LD_LIBRARY_PATH = the e2e lib dir,
/// TANDEM_SOCKET pointing at a path where no coordinator listens.
#[derive(Clone, Debug, Default)]
pub struct Env {
    shim: bool,
    vars: BTreeMap<String, Option<String>>,
}

impl Env {
    /// The fake driver alone.
    pub fn fake_only() -> Self {
        Self::default()
    }

    /// The shim preloaded (`LD_PRELOAD=<target>/libtandem.so`) over the fake driver.
    pub fn with_shim() -> Self {
        Self {
            shim: true,
            ..Self::default()
        }
    }

    /// Whether LD_PRELOAD carries the shim.
    pub fn has_shim(&self) -> bool {
        self.shim
    }

    /// Sets TANDEM_LOG.
    pub fn log(self, level: &str) -> Self {
        self.var("TANDEM_LOG", level)
    }

    /// Sets a variable.
    pub fn var(mut self, k: &str, v: &str) -> Self {
        self.vars.insert(k.to_string(), Some(v.to_string()));
        self
    }

    /// Removes a variable (also one the harness would set).
    pub fn unset(mut self, k: &str) -> Self {
        self.vars.insert(k.to_string(), None);
        self
    }

    fn apply(&self, cmd: &mut Command, a: &Artifacts) {
        strip_inherited(cmd);
        cmd.env("LD_LIBRARY_PATH", &a.lib_dir);
        cmd.env(
            "TANDEM_SOCKET",
            a.profile_dir.join("e2e/no-coordinator/tandemd.sock"),
        );
        if self.shim {
            preload_shim(cmd, &a.shim);
        }
        for (k, v) in &self.vars {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
    }
}

/// Removes what the test runner's own environment would otherwise hand
/// to a spawned process and change its behaviour: tandem's and the fake
/// driver's variables, a preload, and a service manager's notify socket (a
/// tandemd a test starts must not report to the runner's). The harness's
/// own spawns (hosts through [`Env`], tandemd, `tandemctl`) go through it.
pub fn strip_inherited(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("TANDEM_")
            || k.starts_with("FAKECUDA_")
            || k == "LD_PRELOAD"
            || k == "NOTIFY_SOCKET"
        {
            cmd.env_remove(&*k);
        }
    }
}

/// What a host run produced.
pub struct HostOutput {
    /// The command line, for messages.
    pub cmdline: String,
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Killed after HOST_TIMEOUT.
    pub timed_out: bool,
}

/// A `TAG head... key=value...` line.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// Tokens without `=`, after the tag.
    pub head: Vec<String>,
    /// `key=value` tokens.
    pub kv: BTreeMap<String, String>,
}

impl Record {
    /// A key's value; panics naming the line if absent.
    pub fn get(&self, k: &str) -> &str {
        self.kv
            .get(k)
            .unwrap_or_else(|| panic!("no {k}= in {self:?}"))
    }
}

/// Parses `sym=n` tokens into a map.
pub fn parse_counts<'a>(tokens: impl Iterator<Item = &'a str>) -> BTreeMap<String, u64> {
    tokens
        .filter_map(|t| {
            let (k, v) = t.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Every `tandem[<pid>]: counts sym=n ...` line in `stderr`, in order.
pub fn parse_tandem_counts(stderr: &str) -> Vec<(u32, BTreeMap<String, u64>)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("tandem[")?;
            let (pid, rest) = rest.split_once("]: counts")?;
            Some((pid.parse().ok()?, parse_counts(rest.split_whitespace())))
        })
        .collect()
}

impl HostOutput {
    /// The exit code (None when killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics, with the whole output, unless the host exited 0.
    #[track_caller]
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.status.success() && !self.timed_out,
            "host failed: {self}\nmismatches: {:#?}",
            self.mismatches()
        );
        self
    }

    /// Panics, with the whole output, unless the host exited with `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code(), Some(code), "unexpected exit: {self}");
        self
    }

    /// Stdout lines starting with `prefix`.
    pub fn lines(&self, prefix: &str) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }

    /// Every `MISMATCH` line.
    pub fn mismatches(&self) -> Vec<&str> {
        self.lines("MISMATCH")
    }

    /// The checksums of the `RESULT <hex> [role]` lines, with their roles ("" when none).
    pub fn results(&self) -> Vec<(String, String)> {
        self.lines("RESULT ")
            .iter()
            .map(|l| {
                let mut t = l.split_whitespace().skip(1);
                (
                    t.next().unwrap_or_default().to_string(),
                    t.next().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// The single `RESULT` checksum; panics unless there is exactly one.
    #[track_caller]
    pub fn result(&self) -> String {
        let r = self.results();
        assert_eq!(r.len(), 1, "want exactly one RESULT line: {self}");
        r[0].0.clone()
    }

    /// The `OWN|FAKE|HOOK <label> sym=n ...` counts (empty when the line is absent).
    pub fn counts(&self, kind: &str, label: &str) -> BTreeMap<String, u64> {
        let prefix = format!("{kind} {label}");
        self.stdout
            .lines()
            .find(|l| {
                l.strip_prefix(&prefix)
                    .is_some_and(|r| r.is_empty() || r.starts_with(' '))
            })
            .map(|l| parse_counts(l.split_whitespace().skip(2)))
            .unwrap_or_default()
    }

    /// Whether a `<kind> <label>` line is present.
    pub fn has_counts(&self, kind: &str, label: &str) -> bool {
        let prefix = format!("{kind} {label}");
        self.stdout.lines().any(|l| {
            l.strip_prefix(&prefix)
                .is_some_and(|r| r.is_empty() || r.starts_with(' '))
        })
    }

    /// Symbols the shim counts (`HOOKSET` line: tandem_hook_count != UINT64_MAX),
    /// empty without the shim.
    pub fn hook_set(&self) -> BTreeSet<String> {
        self.lines("HOOKSET ")
            .first()
            .map(|l| l.split_whitespace().skip(2).map(String::from).collect())
            .unwrap_or_default()
    }

    /// Whether the shim intercepts `sym`: a contract hook, or an extra one it
    /// declares through tandem_hook_count.
    pub fn is_hooked(&self, sym: &str) -> bool {
        is_hooked(sym) || self.hook_set().contains(sym)
    }

    /// `KERNELS <label> <n> expected <m>` -> (n, m).
    pub fn kernels(&self, label: &str) -> Option<(u64, u64)> {
        self.kernel_line("KERNELS", label)
    }

    /// `SHIMKERNELS <label> <n> expected <m>`: the shim's tandem_kernels_launched
    /// delta (the count a GPU run compares with CUPTI).
    pub fn shim_kernels(&self, label: &str) -> Option<(u64, u64)> {
        self.kernel_line("SHIMKERNELS", label)
    }

    fn kernel_line(&self, tag: &str, label: &str) -> Option<(u64, u64)> {
        let prefix = format!("{tag} {label} ");
        let l = self.stdout.lines().find(|l| l.starts_with(&prefix))?;
        let t: Vec<&str> = l.split_whitespace().collect();
        Some((t.get(2)?.parse().ok()?, t.get(4)?.parse().ok()?))
    }

    /// Every `<tag> ...` line parsed into head tokens and key=value pairs.
    pub fn records(&self, tag: &str) -> Vec<Record> {
        let prefix = format!("{tag} ");
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|rest| {
                let mut r = Record::default();
                for t in rest.split_whitespace() {
                    match t.split_once('=') {
                        Some((k, v)) => {
                            r.kv.insert(k.to_string(), v.to_string());
                        }
                        None => r.head.push(t.to_string()),
                    }
                }
                r
            })
            .collect()
    }

    /// The `<tag> <name> ...` record for `name`; panics if absent.
    #[track_caller]
    pub fn record(&self, tag: &str, name: &str) -> Record {
        self.records(tag)
            .into_iter()
            .find(|r| r.head.first().is_some_and(|h| h == name))
            .unwrap_or_else(|| panic!("no `{tag} {name}` line: {self}"))
    }

    /// `tandem[<pid>]: counts ...` lines from stderr.
    pub fn tandem_counts(&self) -> Vec<(u32, BTreeMap<String, u64>)> {
        parse_tandem_counts(&self.stderr)
    }

    /// Stderr lines starting with `prefix`.
    pub fn stderr_lines(&self, prefix: &str) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }
}

impl fmt::Display for HostOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` -> {}{}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.cmdline,
            self.status,
            if self.timed_out { " (TIMED OUT)" } else { "" },
            self.stdout,
            self.stderr
        )
    }
}

impl fmt::Debug for HostOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The `DONE digest=...` line of the `replica` host run with `args` on the fake
/// driver alone: what every replica with the same arguments must print under
/// the shim, whether or not it shared its weights. `--write-when-shared` is
/// dropped (without a shim nothing is ever shared).
pub fn unshared_replica_done(args: &[&str]) -> String {
    let args: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| *a != "--write-when-shared")
        .collect();
    let out = run_host("replica", &args, &Env::fake_only());
    out.assert_ok();
    out.lines("DONE").pop().expect("DONE line").to_string()
}

/// Runs host `name` with `args` in `env`; never panics on the host's failure
/// (only when it cannot be built or started).
pub fn run_host(name: &str, args: &[&str], env: &Env) -> HostOutput {
    let bin = host(name);
    let a = artifacts();
    let mut cmd = Command::new(&bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    env.apply(&mut cmd, a);
    let cmdline = format!(
        "{}{} {}",
        if env.shim {
            "LD_PRELOAD=libtandem.so "
        } else {
            ""
        },
        env.vars
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v} "),
                None => format!("-{k} "),
            })
            .collect::<String>(),
        std::iter::once(name)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let pid = child.id() as libc::pid_t;
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        // Not a timing measurement: a bound so that a hung host fails the test
        // instead of hanging the suite.
        if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(HOST_TIMEOUT) {
            // SAFETY: kill(2) on the pid of a child we have not reaped yet
            // (wait_with_output has not returned), so the pid cannot have been
            // reused by another process.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    let out = child.wait_with_output();
    let _ = done_tx.send(());
    let timed_out = watchdog.join().unwrap_or(false);
    let out = out.unwrap_or_else(|e| panic!("waiting for {}: {e}", bin.display()));
    HostOutput {
        cmdline,
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        timed_out,
    }
}

/// Checks the contract's core count invariant on a host's `label` window:
/// no MISMATCH lines, and (with the shim) HOOK counts equal FAKE counts for
/// every hooked symbol, and the kernels executed equal `kernels`.
#[track_caller]
pub fn assert_counts_consistent(out: &HostOutput, label: &str, kernels: u64) {
    assert!(
        out.mismatches().is_empty(),
        "MISMATCH lines: {:#?}\n{out}",
        out.mismatches()
    );
    assert!(out.has_counts("FAKE", label), "no FAKE {label} line: {out}");
    let fake = out.counts("FAKE", label);
    let own = out.counts("OWN", label);
    // Calls the shim made to the driver itself (not on the program's behalf).
    let shim_own = out.counts("SHIMOWN", label);
    let get = |m: &BTreeMap<String, u64>, s: &str| m.get(s).copied().unwrap_or(0);
    let symbols: BTreeSet<&str> = fake
        .keys()
        .chain(own.keys())
        .chain(shim_own.keys())
        .map(String::as_str)
        .collect();
    for s in &symbols {
        assert_eq!(
            get(&own, s) + get(&shim_own, s),
            get(&fake, s),
            "own calls + shim's own calls != fake driver calls for {s}: {out}"
        );
    }
    assert_eq!(
        out.kernels(label),
        Some((kernels, kernels)),
        "kernels executed: {out}"
    );
    if out.lines("CHECK ").iter().any(|l| l.contains("shim=1")) {
        let hook = out.counts("HOOK", label);
        let set = out.hook_set();
        for s in hooked()
            .iter()
            .copied()
            .chain(set.iter().map(String::as_str))
        {
            assert_eq!(
                get(&hook, s) + get(&shim_own, s),
                get(&fake, s),
                "tandem_hook_count({s}) + tandem_driver_calls({s}) != fakecuda_calls({s}): {out}"
            );
        }
        assert_eq!(
            out.shim_kernels(label),
            Some((kernels, kernels)),
            "tandem_kernels_launched: {out}"
        );
    }
}

/// (legacy symbol, per-thread symbol) pairs the workload calls.
pub const PER_THREAD_PAIRS: &[(&str, &str)] = &[
    ("cuLaunchKernel", "cuLaunchKernel_ptsz"),
    ("cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"),
    (
        "cuLaunchCooperativeKernel",
        "cuLaunchCooperativeKernel_ptsz",
    ),
    ("cuGraphLaunch", "cuGraphLaunch_ptsz"),
    ("cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"),
    ("cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"),
    ("cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"),
    ("cuMemsetD8_v2", "cuMemsetD8_v2_ptds"),
    ("cuMemsetD16_v2", "cuMemsetD16_v2_ptds"),
    ("cuMemsetD32_v2", "cuMemsetD32_v2_ptds"),
    ("cuMemsetD8Async", "cuMemsetD8Async_ptsz"),
    ("cuMemsetD16Async", "cuMemsetD16Async_ptsz"),
    ("cuMemsetD32Async", "cuMemsetD32Async_ptsz"),
    ("cuStreamSynchronize", "cuStreamSynchronize_ptsz"),
    ("cuStreamQuery", "cuStreamQuery_ptsz"),
    ("cuEventRecord", "cuEventRecord_ptsz"),
    ("cuMemAllocAsync", "cuMemAllocAsync_ptsz"),
    ("cuMemFreeAsync", "cuMemFreeAsync_ptsz"),
    ("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"),
];

/// Object name the hosts print (dladdr base name) for the shim.
pub const SHIM_OBJ: &str = "libtandem.so";
/// Object name the hosts print for the fake driver (loaded as libcuda.so.1).
pub const FAKE_OBJ: &str = "libcuda.so.1";

/// Whether `sym` is one of the contract's hooked variants.
pub fn is_hooked(sym: &str) -> bool {
    hooked().contains(&sym)
}

/// Runs `name args` without and with the shim, asserts both succeed with
/// consistent counts and the same RESULT; returns (fake-only, with-shim).
#[track_caller]
pub fn run_both(name: &str, args: &[&str], kernels: u64) -> (HostOutput, HostOutput) {
    let plain = run_host(name, args, &Env::fake_only());
    plain.assert_ok();
    assert_counts_consistent(&plain, "main", kernels);
    let shim = run_host(name, args, &Env::with_shim());
    shim.assert_ok();
    assert_counts_consistent(&shim, "main", kernels);
    assert_eq!(
        plain.result(),
        shim.result(),
        "RESULT differs with the shim:\n{plain}\n{shim}"
    );
    (plain, shim)
}
