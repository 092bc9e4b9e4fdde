//! `tandemd.toml` parsing, validation and error messages.

use super::*;

fn parse(s: &str) -> Result<Config, ConfigError> {
    Config::parse(s, Path::new("/etc/tandem/tandemd.toml"))
}

#[test]
fn documented_defaults_are_the_defaults() {
    assert_eq!(parse(DEFAULT_CONFIG_TOML).unwrap(), Config::default());
    assert_eq!(parse("").unwrap(), Config::default());
}

#[test]
fn missing_file_gives_defaults() {
    let (c, src) = Config::load(Path::new("/nonexistent/tandem/x.toml")).unwrap();
    assert_eq!(src, Source::MissingFile);
    assert_eq!(c, Config::default());
}

#[test]
fn unknown_key_is_named_with_file_and_line() {
    let e = parse("log_level = \"info\"\nring_capacty = 64\n").unwrap_err();
    let s = e.to_string();
    assert!(s.contains("/etc/tandem/tandemd.toml"), "{s}");
    assert!(s.contains("ring_capacty"), "{s}");
    assert_eq!(e.location.map(|l| l.0), Some(2), "{s}");
    let e = parse("[policy.inference]\nanyone = true\nuid = [1]\n").unwrap_err();
    let s = e.to_string();
    assert!(s.contains("policy.inference.uid"), "{s}");
}

#[test]
fn wrong_type_names_the_key() {
    let e = parse("[policy]\nauto_class = \"fast\"\n").unwrap_err();
    let s = e.to_string();
    assert_eq!(e.key.as_deref(), Some("policy.auto_class"), "{s}");
    assert!(s.contains("fast"), "{s}");
    let e = parse("heartbeat_interval_ms = \"often\"\n").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("heartbeat_interval_ms"), "{e}");
}

#[test]
fn validation_names_the_key() {
    for (text, key) in [
        ("ring_capacity = 1000", "ring_capacity"),
        ("heartbeat_interval_ms = 0", "heartbeat_interval_ms"),
        ("log_level = \"loud\"", "log_level"),
        ("[stats]\ntcp_listen = \"localhost\"", "stats.tcp_listen"),
        ("max_clients = 0", "max_clients"),
        (
            "[[policy.override]]\nexe = \"/a\"\nuid = 3\nclass = \"inference\"",
            "policy.override[0]",
        ),
        (
            "[scheduler]\nidle_budget_ns = 0",
            "scheduler.idle_budget_ns",
        ),
        (
            "[scheduler]\nactive_budget_ns = 5000000",
            "scheduler.active_budget_ns",
        ),
        (
            "[[scheduler.slo]]\np99_ms = 50.0\n[[scheduler.slo]]\np99_ms = -1.0",
            "scheduler.slo[1].p99_ms",
        ),
        (
            "[[scheduler.slo]]\np99_ms = 5.0\ncgroups = [\"serving\"]",
            "scheduler.slo[0].cgroups",
        ),
        (
            "[scheduler]\nmark_every_ns = 1000",
            "scheduler.mark_every_ns",
        ),
    ] {
        let e = parse(text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{text}: {e}");
    }
}

#[test]
fn full_config_parses() {
    let c = parse(
        r#"
            log_level = "debug"
            ring_capacity = 64
            admins = [1000]
            [stats]
            tcp_listen = "127.0.0.1:9464"
            [policy]
            auto_class = "inference"
            [policy.inference]
            uids = [5]
            cgroups = ["/serving.slice"]
            [[policy.override]]
            uid = 7
            class = "training"
            [scheduler]
            enabled = false
            idle_budget_ns = 8000000
            mark_every_ns = 0
            "#,
    )
    .unwrap();
    assert!(!c.scheduler.enabled);
    assert_eq!(c.scheduler.mark_every_ns, 0, "0 (no marks) is valid");
    assert_eq!(c.scheduler.idle_budget_ns, 8_000_000);
    assert_eq!(
        c.scheduler.active_budget_ns,
        SchedConfig::default().active_budget_ns
    );
    assert_eq!(c.ring_capacity, 64);
    assert_eq!(c.policy.overrides.len(), 1);
    assert_eq!(c.policy.auto_class, AutoClass::Inference);
    assert!(c.stats_tcp().is_some());
    assert_eq!(c.level(), tracing::Level::DEBUG);
}
