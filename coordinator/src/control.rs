//! Control operations (tandemctl -> tandemd): who may, and the replies.

use crate::config::Config;

/// Whether `uid` may run control operations on a daemon running as `daemon_euid`.
#[must_use]
pub fn permitted(cfg: &Config, daemon_euid: u32, uid: u32) -> bool {
    uid == 0 || uid == daemon_euid || cfg.admins.contains(&uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_self_and_admins() {
        let mut cfg = Config::default();
        assert!(permitted(&cfg, 500, 0));
        assert!(permitted(&cfg, 500, 500));
        assert!(!permitted(&cfg, 500, 65534));
        cfg.admins.push(65534);
        assert!(permitted(&cfg, 500, 65534));
    }
}
