//! `[follow]` in tandemd.toml: whether follow mode is offered at all, and how
//! many regions one client may share. Who may follow whom is the trust group
//! of `[[dedup.group]]` (the same rule as weight sharing).

use serde::{Deserialize, Serialize};
use tandem_proto::wire::{HELLO_FLAG_FOLLOW, WELCOME_FLAG_FOLLOW};

/// Default `[follow] max_regions_per_client`.
pub const DEFAULT_MAX_REGIONS: u32 = 16;
/// Largest `[follow] max_regions_per_client`.
pub const MAX_MAX_REGIONS: u32 = 1024;

/// `[follow]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FollowConfig {
    /// Master switch: when false no client is told it may use follow mode,
    /// and SHARE / MAP are refused (NOT_PERMITTED).
    pub enabled: bool,
    /// Regions one client may share at once. It also bounds the mappings
    /// tandemd records for one client from HELD (a follower reporting, after
    /// a restart, what it still maps): a HELD is refused (LIMIT, counted)
    /// while the client has `4 * max_regions_per_client` mappings or more.
    /// A MAP needs a live region, so it is bounded by the shares already.
    pub max_regions_per_client: u32,
}

impl Default for FollowConfig {
    fn default() -> Self {
        FollowConfig {
            enabled: true,
            max_regions_per_client: DEFAULT_MAX_REGIONS,
        }
    }
}

/// What the region registry needs of `[follow]` (applied again at reload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowLimits {
    /// `[follow] enabled`.
    pub enabled: bool,
    /// `[follow] max_regions_per_client` (times 4: the bound on a client's
    /// mappings for a HELD to be recorded).
    pub max_regions_per_client: usize,
}

impl Default for FollowLimits {
    fn default() -> Self {
        FollowConfig::default().limits()
    }
}

impl FollowConfig {
    /// Checks serde cannot express. Returns (key, problem).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.max_regions_per_client == 0 || self.max_regions_per_client > MAX_MAX_REGIONS {
            return Err((
                "follow.max_regions_per_client".into(),
                format!(
                    "{} is out of range: use 1 to {MAX_MAX_REGIONS}",
                    self.max_regions_per_client
                ),
            ));
        }
        Ok(())
    }

    /// Whether a client whose Hello carries `hello_flags` is granted follow
    /// mode: it asked (`TANDEM_FOLLOW=on`) and follow mode is enabled.
    #[must_use]
    pub fn grants(&self, hello_flags: u8) -> bool {
        self.enabled && hello_flags & HELLO_FLAG_FOLLOW != 0
    }

    /// The Welcome flags for [`grants`](Self::grants): never set for a client
    /// that did not ask (an older shim rejects Welcome bits it does not know).
    #[must_use]
    pub fn welcome_flags(&self, hello_flags: u8) -> u8 {
        if self.grants(hello_flags) {
            WELCOME_FLAG_FOLLOW
        } else {
            0
        }
    }

    /// The registry's limits under this configuration.
    #[must_use]
    pub fn limits(&self) -> FollowLimits {
        FollowLimits {
            enabled: self.enabled,
            max_regions_per_client: self.max_regions_per_client as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::wire::HELLO_FLAG_SHARE_WEIGHTS;

    fn parse(text: &str) -> Result<crate::config::Config, crate::config::ConfigError> {
        crate::config::Config::parse(text, std::path::Path::new("/etc/tandem/tandemd.toml"))
    }

    #[test]
    fn defaults() {
        let f = crate::config::Config::default().follow;
        assert_eq!(
            f,
            FollowConfig {
                enabled: true,
                max_regions_per_client: 16
            }
        );
        assert_eq!(parse("[follow]\n").unwrap().follow, f);
        assert_eq!(
            f.limits(),
            FollowLimits {
                enabled: true,
                max_regions_per_client: 16
            }
        );
    }

    #[test]
    fn values_and_bounds() {
        let c = parse("[follow]\nenabled = false\nmax_regions_per_client = 1024\n").unwrap();
        assert!(!c.follow.enabled);
        assert_eq!(c.follow.max_regions_per_client, 1024);
        assert_eq!(
            parse("[follow]\nmax_regions_per_client = 1\n")
                .unwrap()
                .follow
                .max_regions_per_client,
            1
        );
        for bad in [0, 1025] {
            let e = parse(&format!("[follow]\nmax_regions_per_client = {bad}\n")).unwrap_err();
            assert_eq!(
                e.key.as_deref(),
                Some("follow.max_regions_per_client"),
                "{e}"
            );
            assert!(e.to_string().contains("use 1 to 1024"), "{e}");
        }
        let e = parse("[follow]\nmax_regions_per_client = -1\n").unwrap_err();
        assert_eq!(
            e.key.as_deref(),
            Some("follow.max_regions_per_client"),
            "{e}"
        );
    }

    #[test]
    fn unknown_key_is_refused() {
        let e = parse("[follow]\nenabled = true\nmax_regions = 4\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("follow.max_regions"), "{e}");
        assert!(e.to_string().contains("max_regions"), "{e}");
        let e = parse("[follow]\nenabled = \"yes\"\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("follow.enabled"), "{e}");
    }

    #[test]
    fn the_welcome_flag_only_answers_the_hello_flag() {
        let on = FollowConfig::default();
        assert_eq!(on.welcome_flags(HELLO_FLAG_FOLLOW), WELCOME_FLAG_FOLLOW);
        assert_eq!(
            on.welcome_flags(HELLO_FLAG_FOLLOW | HELLO_FLAG_SHARE_WEIGHTS),
            WELCOME_FLAG_FOLLOW
        );
        assert_eq!(on.welcome_flags(0), 0);
        assert_eq!(on.welcome_flags(HELLO_FLAG_SHARE_WEIGHTS), 0);
        let off = FollowConfig {
            enabled: false,
            ..FollowConfig::default()
        };
        assert!(!off.grants(HELLO_FLAG_FOLLOW));
        assert_eq!(off.welcome_flags(HELLO_FLAG_FOLLOW), 0);
    }
}
