//! `tandemctl`: the tandem operator's CLI. See `tandemctl --help`.

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::ExitCode::from(tandem_coordinator::ctl::main(&args))
}
