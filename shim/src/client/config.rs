//! What the client says in its Hello and where it connects: read from the
//! environment and `/proc` on the first CUDA call (cold path; allocates).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;

use tandem_proto::wire::{
    ClientClass, HELLO_FLAG_FOLLOW, HELLO_FLAG_NO_SHARE_WEIGHTS, HELLO_FLAG_SHARE_WEIGHTS,
    MAX_CGROUP_LEN, MAX_EXE_LEN,
};

/// Longest socket path `sockaddr_un` holds (without the NUL).
pub const SUN_PATH_MAX: usize = 107;

/// Everything a connection attempt needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The coordinator's main socket.
    pub socket: CString,
    pub class: ClientClass,
    /// `HELLO_FLAG_*`.
    pub flags: u8,
    /// `/proc/self/exe`, at most `MAX_EXE_LEN` bytes.
    pub exe: Vec<u8>,
    /// This process's cgroup path, at most `MAX_CGROUP_LEN` bytes.
    pub cgroup: Vec<u8>,
}

/// What `TANDEM_CLASS` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassSetting {
    /// `off`: never connect.
    Off,
    Claim(ClientClass),
}

/// Parses a `TANDEM_CLASS` value; `None` when it names no class.
pub fn parse_class(value: &[u8]) -> Option<ClassSetting> {
    if value == b"off" {
        return Some(ClassSetting::Off);
    }
    ClientClass::from_env_value(value).map(ClassSetting::Claim)
}

/// Parses a `TANDEM_SHARE_WEIGHTS` or `TANDEM_FOLLOW` value; `None` when it is
/// neither on nor off.
pub fn parse_on_off(value: &[u8]) -> Option<bool> {
    match value {
        b"on" | b"1" => Some(true),
        b"off" | b"0" | b"" => Some(false),
        _ => None,
    }
}

/// The configuration from the environment, or `None` when the client must stay
/// passive (`TANDEM_CLASS=off`, or a socket path no `sockaddr_un` can hold;
/// both said once).
pub fn load() -> Option<Config> {
    let class = match crate::env::var(c"TANDEM_CLASS") {
        None => ClassSetting::Claim(ClientClass::Auto),
        Some(v) => match parse_class(v) {
            Some(c) => c,
            None => {
                crate::log!(
                    Warn,
                    "TANDEM_CLASS={:?} is not a class; use inference, training, auto or off (using auto)",
                    crate::log::String8(v)
                );
                ClassSetting::Claim(ClientClass::Auto)
            }
        },
    };
    let ClassSetting::Claim(class) = class else {
        crate::log!(Debug, "TANDEM_CLASS=off: not connecting to a coordinator");
        return None;
    };
    // Unset: the coordinator's config decides; on/off: the job decides.
    let share = on_off(c"TANDEM_SHARE_WEIGHTS");
    let follow = follow_enabled();
    let path = tandem_proto::paths::default_socket().into_os_string();
    let socket = match socket_path(path) {
        Ok(s) => s,
        Err(p) => {
            crate::log!(
                Warn,
                "coordinator socket path {:?} is not usable (empty, longer than {SUN_PATH_MAX} bytes, \
                 or containing NUL); set TANDEM_SOCKET to a shorter path. Running unscheduled.",
                crate::log::String8(&p)
            );
            return None;
        }
    };
    Some(Config {
        socket,
        class,
        flags: match share {
            None => 0,
            Some(true) => HELLO_FLAG_SHARE_WEIGHTS,
            Some(false) => HELLO_FLAG_NO_SHARE_WEIGHTS,
        } | if follow { HELLO_FLAG_FOLLOW } else { 0 },
        exe: exe_path(),
        cgroup: cgroup_path(),
    })
}

/// An on/off variable of the environment: `None` when unset; anything but on
/// or off is said and means off.
fn on_off(name: &core::ffi::CStr) -> Option<bool> {
    crate::env::var(name).map(|v| {
        parse_on_off(v).unwrap_or_else(|| {
            crate::log!(
                Warn,
                "{}={:?} is not on or off (using off)",
                name.to_string_lossy(),
                crate::log::String8(v)
            );
            false
        })
    })
}

/// Whether `TANDEM_FOLLOW=on` (follow mode, `crate::follow`); read once.
pub fn follow_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| on_off(c"TANDEM_FOLLOW").unwrap_or(false))
}

/// The socket path as a C string, or the bytes back when it cannot be one.
pub fn socket_path(path: OsString) -> Result<CString, Vec<u8>> {
    let bytes = path.into_vec();
    if bytes.is_empty() || bytes.len() > SUN_PATH_MAX {
        return Err(bytes);
    }
    CString::new(bytes).map_err(|e| e.into_vec())
}

fn exe_path() -> Vec<u8> {
    let mut v = std::fs::read_link("/proc/self/exe")
        .map(|p| p.into_os_string().into_vec())
        .unwrap_or_default();
    v.retain(|&b| b != 0);
    v.truncate(MAX_EXE_LEN);
    v
}

fn cgroup_path() -> Vec<u8> {
    let text = std::fs::read("/proc/self/cgroup").unwrap_or_default();
    let mut v = cgroup_from(&text).to_vec();
    v.retain(|&b| b != 0);
    v.truncate(MAX_CGROUP_LEN);
    v
}

/// The cgroup path from `/proc/self/cgroup`: the v2 line (`0::/path`), else the
/// first line's path.
pub fn cgroup_from(text: &[u8]) -> &[u8] {
    let mut first = None;
    for line in text.split(|&b| b == b'\n') {
        if let Some((v2, path)) = cgroup_line(line) {
            if v2 {
                return path;
            }
            first.get_or_insert(path);
        }
    }
    first.unwrap_or(b"")
}

/// `id:controllers:path` -> (is the v2 line, path).
fn cgroup_line(line: &[u8]) -> Option<(bool, &[u8])> {
    let mut parts = line.splitn(3, |&b| b == b':');
    let id = parts.next()?;
    let _controllers = parts.next()?;
    let path = parts.next()?;
    Some((id == b"0", path))
}

/// `name` as a number in `min..=max`, else `default` (warned about when set
/// to something else).
pub(crate) fn env_u64(name: &core::ffi::CStr, default: u64, min: u64, max: u64) -> u64 {
    let Some(v) = crate::env::var(name) else {
        return default;
    };
    match core::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(n) if (min..=max).contains(&n) => n,
        _ => {
            crate::log!(
                Warn,
                "{:?}={:?} is not a number in {min}..={max}; using {default}",
                name,
                crate::log::String8(v)
            );
            default
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_parse_and_off_is_off() {
        assert_eq!(parse_class(b"off"), Some(ClassSetting::Off));
        assert_eq!(
            parse_class(b"inference"),
            Some(ClassSetting::Claim(ClientClass::Inference))
        );
        assert_eq!(
            parse_class(b"training"),
            Some(ClassSetting::Claim(ClientClass::Training))
        );
        assert_eq!(
            parse_class(b"auto"),
            Some(ClassSetting::Claim(ClientClass::Auto))
        );
        assert_eq!(
            parse_class(b""),
            Some(ClassSetting::Claim(ClientClass::Auto))
        );
        assert_eq!(parse_class(b"Inference"), None);
        assert_eq!(parse_class(b"fast"), None);
    }

    #[test]
    fn share_weights_values() {
        assert_eq!(parse_on_off(b"on"), Some(true));
        assert_eq!(parse_on_off(b"off"), Some(false));
        assert_eq!(parse_on_off(b"yes"), None);
    }

    #[test]
    fn socket_paths_must_fit_sockaddr_un() {
        assert!(socket_path("/run/tandem/tandemd.sock".into()).is_ok());
        assert!(socket_path("".into()).is_err());
        assert!(socket_path("x".repeat(SUN_PATH_MAX).into()).is_ok());
        assert!(socket_path("x".repeat(SUN_PATH_MAX + 1).into()).is_err());
        assert!(socket_path(OsString::from_vec(b"/a\0b".to_vec())).is_err());
    }

    #[test]
    fn cgroup_v2_line_wins() {
        let text = b"12:cpu,cpuacct:/docker/abc\n0::/user.slice/session-3.scope\n";
        assert_eq!(cgroup_from(text), b"/user.slice/session-3.scope");
        assert_eq!(cgroup_from(b"3:memory:/k8s/pod1\n"), b"/k8s/pod1");
        assert_eq!(cgroup_from(b""), b"");
        assert_eq!(cgroup_from(b"garbage"), b"");
    }
}
