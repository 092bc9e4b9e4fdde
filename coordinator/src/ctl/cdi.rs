//! `tandemctl cdi generate`: a Container Device Interface spec that gives a
//! container tandem the way tandem-nri does (the library and tandemd's
//! socket directory mounted read-only, `LD_PRELOAD` and `TANDEM_SOCKET` set),
//! for runtimes that read CDI specs (podman, docker >= 25 and containerd
//! >= 1.7 with CDI enabled): `--device tandem.io/shim=all`.
//!
//! The container-side layout is tandem-nri's ([`tandem_inject::policy::Paths`]),
//! so an image sees the same paths whichever way it got tandem. Unlike
//! tandem-nri, CDI cannot prepend to an `LD_PRELOAD` the image sets itself:
//! its `env` edit replaces the variable.

use std::path::PathBuf;

use serde::Serialize;
use tandem_inject::policy::Paths;

/// The CDI kind (vendor/class) of the spec.
pub const KIND: &str = "tandem.io/shim";
/// The one device it declares.
pub const DEVICE: &str = "all";
/// The spec version written by default: podman 4.3 (Debian 12) ignores a
/// 0.6.0 spec without a word.
pub const DEFAULT_VERSION: &str = "0.5.0";
/// Versions it writes. Every one has what the spec uses (env and mounts with
/// options, since 0.3.0); only the declared version differs.
pub const VERSIONS: [&str; 6] = ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0"];

/// `tandemctl cdi`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: CdiCommand,
}

/// `tandemctl cdi`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum CdiCommand {
    /// Write a CDI spec that gives containers tandem (tandem.io/shim=all)
    #[command(
        after_help = "Containers then ask for the device tandem.io/shim=all (podman run \
                            --device, docker run --device, a CRI runtime's CDI annotation)."
    )]
    Generate(GenerateArgs),
}

/// `tandemctl cdi generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// CDI spec version (podman 4.3 ignores 0.6.0 without a word)
    #[arg(long = "version", value_name = "V", default_value = DEFAULT_VERSION, value_parser = VERSIONS)]
    pub spec_version: String,
    /// Host directory holding libtandem.so [default: tandem-nri's]
    #[arg(long, value_name = "DIR")]
    pub lib_dir: Option<String>,
    /// Host directory holding tandemd's sockets [default: tandem-nri's]
    #[arg(long, value_name = "DIR")]
    pub socket_dir: Option<String>,
    /// Write the spec there (e.g. /etc/cdi/tandem.json) instead of stdout
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// What the spec is made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `cdiVersion`.
    pub version: String,
    /// Host directory holding `libtandem.so`.
    pub lib_dir: String,
    /// Host directory holding tandemd's sockets.
    pub socket_dir: String,
}

impl Default for Options {
    fn default() -> Self {
        let p = Paths::default();
        Options {
            version: DEFAULT_VERSION.into(),
            lib_dir: p.host_lib_dir,
            socket_dir: p.host_socket_dir,
        }
    }
}

/// A CDI spec (the fields this one uses), in the spec's key order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec<'a> {
    cdi_version: &'a str,
    kind: &'a str,
    devices: [Device<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Device<'a> {
    name: &'a str,
    container_edits: Edits,
}

#[derive(Serialize)]
struct Edits {
    env: [String; 2],
    mounts: [Mount; 2],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Mount {
    host_path: String,
    container_path: String,
    options: [&'static str; 4],
}

/// The spec for `o`, as JSON (CDI reads `.json` and `.yaml` specs).
pub fn spec(o: &Options) -> Result<String, String> {
    if !VERSIONS.contains(&o.version.as_str()) {
        return Err(format!(
            "CDI version {:?} is not one tandemctl writes: use one of {}",
            o.version,
            VERSIONS.join(", ")
        ));
    }
    for (what, dir) in [("--lib-dir", &o.lib_dir), ("--socket-dir", &o.socket_dir)] {
        if !dir.starts_with('/') {
            return Err(format!(
                "{what} {dir:?} is not an absolute path: CDI mounts need one"
            ));
        }
    }
    let paths = Paths {
        host_lib_dir: o.lib_dir.trim_end_matches('/').to_string(),
        host_socket_dir: o.socket_dir.trim_end_matches('/').to_string(),
        ..Paths::default()
    };
    let mount = |host: &str, ctr: &str| Mount {
        host_path: if host.is_empty() { "/" } else { host }.to_string(),
        container_path: ctr.to_string(),
        options: ["ro", "nosuid", "nodev", "rbind"],
    };
    // Edits on the device itself: a CDI device with no edits of its own is
    // refused by the CDI library's validation.
    let spec = Spec {
        cdi_version: &o.version,
        kind: KIND,
        devices: [Device {
            name: DEVICE,
            container_edits: Edits {
                env: [
                    format!("LD_PRELOAD={}/libtandem.so", paths.container_lib_dir),
                    format!("TANDEM_SOCKET={}/tandemd.sock", paths.container_socket_dir),
                ],
                mounts: [
                    mount(&paths.host_lib_dir, &paths.container_lib_dir),
                    mount(&paths.host_socket_dir, &paths.container_socket_dir),
                ],
            },
        }],
    };
    let mut text = serde_json::to_string_pretty(&spec).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}

/// `tandemctl cdi`; returns the exit code.
#[must_use]
pub fn main(args: &Args) -> u8 {
    let CdiCommand::Generate(g) = &args.command;
    match run(g) {
        Ok(()) => 0,
        Err((code, e)) => {
            eprintln!("tandemctl cdi generate: {e}");
            code
        }
    }
}

fn run(g: &GenerateArgs) -> Result<(), (u8, String)> {
    let d = Options::default();
    let o = Options {
        version: g.spec_version.clone(),
        lib_dir: g.lib_dir.clone().unwrap_or(d.lib_dir),
        socket_dir: g.socket_dir.clone().unwrap_or(d.socket_dir),
    };
    let text = spec(&o).map_err(|e| (2, e))?;
    match &g.out {
        None => super::stdout::print(&text)
            .map(|_| ())
            .map_err(|e| (1, format!("writing the spec: {e}"))),
        Some(path) => write_file(path, &text).map_err(|e| {
            (
                1,
                format!(
                    "cannot write {}: {e} (does its directory exist?)",
                    path.display()
                ),
            )
        }),
    }
}

/// Writes `text` to `path` through a temporary file beside it, so that a
/// runtime watching the directory never reads half a spec.
fn write_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn parsed(o: &Options) -> Value {
        serde_json::from_str(&spec(o).unwrap()).unwrap()
    }

    #[test]
    fn the_default_spec_is_a_cdi_spec_laid_out_as_tandem_nri_injects() {
        let s = parsed(&Options::default());
        assert_eq!(s["cdiVersion"], "0.5.0");
        assert_eq!(s["kind"], "tandem.io/shim");
        let obj = s.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["cdiVersion", "devices", "kind"]);
        let devices = s["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0]["name"], "all");
        let edits = &devices[0]["containerEdits"];
        // The same environment and mounts tandem-nri gives a GPU container
        // whose image sets no LD_PRELOAD.
        let nri = tandem_inject::policy::adjustment(
            &tandem_inject::api::Pod::default(),
            &tandem_inject::api::Container::default(),
            &Paths::default(),
        );
        let want_env: Vec<String> = nri.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let env: Vec<&str> = edits["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(env, want_env);
        assert_eq!(
            env,
            [
                "LD_PRELOAD=/usr/local/lib/tandem/libtandem.so",
                "TANDEM_SOCKET=/run/tandem/tandemd.sock"
            ]
        );
        let mounts = edits["mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), nri.mounts.len());
        for (m, n) in mounts.iter().zip(&nri.mounts) {
            assert_eq!(m["hostPath"], n.source.as_str());
            assert_eq!(m["containerPath"], n.destination.as_str());
            let opts: Vec<&str> = m["options"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert!(opts.contains(&"ro") && opts.contains(&"rbind"), "{m}");
        }
        assert_eq!(mounts[0]["hostPath"], "/var/lib/tandem/lib");
        assert_eq!(mounts[1]["hostPath"], "/run/tandem");
    }

    #[test]
    fn options_change_the_version_and_the_host_directories_only() {
        let o = Options {
            version: "0.6.0".into(),
            lib_dir: "/opt/tandem/lib/".into(),
            socket_dir: "/srv/tandem".into(),
        };
        let s = parsed(&o);
        assert_eq!(s["cdiVersion"], "0.6.0");
        let m = &s["devices"][0]["containerEdits"]["mounts"];
        assert_eq!(m[0]["hostPath"], "/opt/tandem/lib");
        assert_eq!(m[0]["containerPath"], "/usr/local/lib/tandem");
        assert_eq!(m[1]["hostPath"], "/srv/tandem");
        assert_eq!(m[1]["containerPath"], "/run/tandem");
    }

    #[test]
    fn bad_options_are_refused_with_what_to_use() {
        let e = spec(&Options {
            version: "1.0".into(),
            ..Options::default()
        })
        .unwrap_err();
        assert!(e.contains("0.5.0") && e.contains("\"1.0\""), "{e}");
        let e = spec(&Options {
            lib_dir: "lib".into(),
            ..Options::default()
        })
        .unwrap_err();
        assert!(e.contains("--lib-dir") && e.contains("absolute"), "{e}");
    }

    #[test]
    fn the_command_line_writes_the_file_it_is_given() {
        use clap::Parser as _;
        let dir = std::env::temp_dir().join(format!("tandem-cdi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("tandem.json");
        let parse = |extra: &[&str]| {
            let args = ["tandemctl", "cdi", "generate"]
                .iter()
                .chain(extra)
                .map(std::ffi::OsString::from);
            crate::ctl::Cli::try_parse_from(args)
        };
        let cli = parse(&[
            "--version=0.6.0",
            "--socket-dir",
            "/srv/t",
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap();
        let crate::ctl::Command::Cdi(a) = cli.command else {
            panic!("not cdi")
        };
        assert_eq!(main(&a), 0);
        let s: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(s["cdiVersion"], "0.6.0");
        assert_eq!(
            s["devices"][0]["containerEdits"]["mounts"][1]["hostPath"],
            "/srv/t"
        );
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--version", "9.9.9"]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
