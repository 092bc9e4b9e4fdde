//! Control operations (tandemctl -> tandemd): who may, and the replies.

use crate::config::Config;

/// Whether `uid` may run control operations on a daemon running as
/// `daemon_euid`; `contained`: the peer runs in a container, whose root is
/// not the host's (contract 5): never.
#[must_use]
pub fn permitted(cfg: &Config, daemon_euid: u32, uid: u32, contained: bool) -> bool {
    !contained && (uid == 0 || uid == daemon_euid || cfg.admins.contains(&uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_self_and_admins() {
        let mut cfg = Config::default();
        assert!(permitted(&cfg, 500, 0, false));
        assert!(permitted(&cfg, 500, 500, false));
        assert!(!permitted(&cfg, 500, 65534, false));
        cfg.admins.push(65534);
        assert!(permitted(&cfg, 500, 65534, false));
        // In a container: not root, not tandemd's user, not an admin.
        for uid in [0, 500, 65534] {
            assert!(!permitted(&cfg, 500, uid, true), "uid {uid}");
        }
    }
}
