//! `tandemd`: the tandem coordinator daemon. See `tandemd --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use tandem_coordinator::config::{Config, Source, DEFAULT_CONFIG_PATH, DEFAULT_CONFIG_TOML};
use tandem_coordinator::daemon::{Daemon, Options};
use tandem_coordinator::logging;

const USAGE: &str = "usage: tandemd [--config PATH | --no-config] [--socket PATH] [--foreground]
       tandemd --print-default-config

  --config PATH            configuration file, which must exist (without it:
                           /etc/tandem/tandemd.toml, or the built-in defaults
                           if that does not exist)
  --no-config              use the built-in defaults, read no file
  --socket PATH            main socket (default: $TANDEM_SOCKET, else
                           /run/tandem/tandemd.sock for root, else
                           $XDG_RUNTIME_DIR/tandem/tandemd.sock, else
                           /tmp/tandem-<uid>/tandemd.sock, refused unless that
                           directory is yours, closed to others' writes); the stats socket
                           sits beside it, named after it: stats.sock for
                           tandemd.sock, NAME.stats.sock for NAME.sock
  --foreground             accepted for compatibility: tandemd never forks
                           (systemd Type=notify)
  --print-default-config   print the documented defaults and exit
Signals: SIGTERM/SIGINT stop, SIGHUP reloads the configuration.";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let mut config: Option<PathBuf> = None;
    let mut no_config = false;
    let mut socket: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--config") => match args.next() {
                Some(p) => config = Some(p.into()),
                None => return usage_error("--config needs a PATH"),
            },
            Some("--no-config") => no_config = true,
            Some("--socket") => match args.next() {
                Some(p) => socket = Some(p.into()),
                None => return usage_error("--socket needs a PATH"),
            },
            Some("--foreground") => {}
            Some("--print-default-config") => {
                print!("{DEFAULT_CONFIG_TOML}");
                return ExitCode::SUCCESS;
            }
            Some("--help") | Some("-h") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Some("--version") | Some("-V") => {
                println!("tandemd {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            _ => return usage_error(&format!("unknown argument {a:?}")),
        }
    }
    if no_config && config.is_some() {
        return usage_error("--config and --no-config exclude each other");
    }
    let explicit = config.is_some();
    let config_path = if no_config {
        PathBuf::new()
    } else {
        config.unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH))
    };
    let (cfg, source) = if no_config {
        (Config::default(), Source::MissingFile)
    } else {
        match Config::load(&config_path) {
            Ok((_, Source::MissingFile)) if explicit => {
                eprintln!(
                    "tandemd: {} (given with --config) does not exist: create it (tandemd --print-default-config > {} writes the defaults), or start with --no-config to run on the built-in defaults",
                    config_path.display(),
                    config_path.display()
                );
                return ExitCode::from(2);
            }
            Ok(x) => x,
            Err(e) => {
                eprintln!("tandemd: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let (level, level_warning) = logging::choose_level(cfg.level());
    let set_level = logging::init(level);
    if let Some(w) = level_warning {
        tracing::warn!("{w}");
    }
    // A few descriptors per job (its connection, its region while it is
    // handed over): the soft limit's usual 1024 is far below what the hard
    // one allows.
    match tandem_os::rlimit::raise_nofile() {
        Ok((before, after)) if before.soft != after.soft => tracing::info!(
            "open-file limit raised from {} to {} (the hard limit)",
            before.soft,
            after.soft
        ),
        Ok((_, now)) => tracing::info!("open-file limit {} (the hard limit)", now.soft),
        Err(e) => tracing::warn!("cannot raise the open-file limit to the hard one: {e}"),
    }
    if no_config {
        tracing::info!("--no-config: using the built-in defaults");
    } else if source == Source::MissingFile {
        tracing::info!(
            "{} does not exist; using the built-in defaults (tandemd --print-default-config shows them)",
            config_path.display()
        );
    } else {
        tracing::info!("configuration read from {}", config_path.display());
    }
    let socket = socket.unwrap_or_else(tandem_proto::paths::default_socket);
    let daemon = match Daemon::bind(Options {
        config_path,
        config: cfg,
        socket,
        handle_signals: true,
        set_log_level: Some(set_level),
    }) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tandemd: {e}");
            return ExitCode::FAILURE;
        }
    };
    match daemon.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("tandemd failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("tandemd: {msg}\n{USAGE}");
    ExitCode::from(2)
}
