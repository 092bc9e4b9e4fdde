//! `sd_notify`: one datagram to `$NOTIFY_SOCKET` (a leading `@` names an
//! abstract socket). A no-op when not started by systemd.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Send `state` (e.g. `"READY=1"`); `Ok(false)` when `$NOTIFY_SOCKET` is unset.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let path = path.to_string_lossy().into_owned();
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None if path.starts_with('/') => SocketAddr::from_pathname(&path)?,
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("NOTIFY_SOCKET={path:?} is neither a path nor @abstract"),
            ))
        }
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("tandem-notify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let p = dir.join("n.sock");
        let _ = std::fs::remove_file(&p);
        let rx = UnixDatagram::bind(&p).unwrap();
        // Only this test touches NOTIFY_SOCKET in this process.
        std::env::set_var("NOTIFY_SOCKET", &p);
        assert!(notify("READY=1").unwrap());
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        assert!(!notify("READY=1").unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
