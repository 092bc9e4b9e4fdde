//! `tandem-nri`: see the library docs and `tandem-nri --help`.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use tandem_inject::plugin::Plugin;
use tandem_inject::policy::Paths;
use tandem_inject::reconnect::Reconnect;

const USAGE: &str = "usage: tandem-nri [--socket PATH] [--records DIR] [--host-lib-dir DIR] [--host-socket-dir DIR] [--idx NN]
       tandem-nri --version

  --socket PATH          the runtime's NRI socket (default /var/run/nri/nri.sock)
  --records DIR          where pod records go, tandemd's [kubernetes] pod_info_dir
                         (default /run/tandem-pods)
  --host-lib-dir DIR     host directory holding libtandem.so (default /var/lib/tandem/lib)
  --host-socket-dir DIR  host directory holding tandemd.sock (default /run/tandem)
  --idx NN               plugin index, two digits (default 50)
While the runtime is unreachable it retries, waiting 1 s, then twice as long
each time up to 60 s, and logs once per change of state.";

fn main() -> ExitCode {
    let mut socket = PathBuf::from("/var/run/nri/nri.sock");
    let mut records = PathBuf::from("/run/tandem-pods");
    let mut paths = Paths::default();
    let mut idx = "50".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |what: &str| args.next().ok_or_else(|| format!("{a} needs {what}"));
        let r = match a.as_str() {
            "--socket" => val("a PATH").map(|v| socket = v.into()),
            "--records" => val("a DIR").map(|v| records = v.into()),
            "--host-lib-dir" => val("a DIR").map(|v| paths.host_lib_dir = v),
            "--host-socket-dir" => val("a DIR").map(|v| paths.host_socket_dir = v),
            "--idx" => val("two digits").map(|v| idx = v),
            "-V" | "--version" => {
                println!("tandem-nri {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => Err(format!("unknown argument {a:?}")),
        };
        if let Err(e) = r {
            eprintln!("tandem-nri: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    if idx.len() != 2 || !idx.bytes().all(|b| b.is_ascii_digit()) {
        eprintln!("tandem-nri: --idx must be two digits, not {idx:?}");
        return ExitCode::from(2);
    }
    let log = Box::new(|m: &str| eprintln!("tandem-nri: {m}"));
    let mut plugin = match Plugin::new(paths, &records, log) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tandem-nri: cannot use {}: {e}", records.display());
            return ExitCode::FAILURE;
        }
    };
    let mut retry = Reconnect::default();
    let at = socket.display().to_string();
    loop {
        let why = match UnixStream::connect(&socket) {
            Ok(s) => {
                if let Some(line) = retry.connected(&at) {
                    eprintln!("tandem-nri: {line}");
                }
                match plugin.serve(s, "tandem", &idx) {
                    Ok(()) => "the runtime closed the connection".to_string(),
                    Err(e) => e.to_string(),
                }
            }
            Err(e) => format!("cannot reach {at} ({e}): is NRI enabled in the runtime?"),
        };
        let (wait, line) = retry.failed(&why);
        if let Some(line) = line {
            eprintln!("tandem-nri: {line}");
        }
        std::thread::sleep(wait);
    }
}
