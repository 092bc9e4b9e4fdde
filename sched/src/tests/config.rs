//! The configuration: defaults, validation naming the bad field, and the SLO rules (`config.rs`).

use super::*;

// ---- configuration ----

#[test]
fn defaults_are_the_documented_ones_and_valid() {
    let c = SchedConfig::default();
    assert!(c.enabled);
    assert_eq!(c.idle_budget_ns, 4 * MS);
    assert_eq!(c.active_budget_ns, 500 * US);
    assert_eq!(
        (c.min_active_budget_ns, c.max_active_budget_ns),
        (100 * US, 4 * MS)
    );
    assert_eq!(c.request_idle_gap_ns, 2 * MS);
    assert_eq!(c.request_hold_ns, MS);
    assert_eq!(c.default_kernel_ns, 50 * US);
    assert_eq!(c.mark_every_ns, 500 * US);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn validate_names_the_bad_field() {
    let bad = |f: fn(&mut SchedConfig)| {
        let mut c = SchedConfig::default();
        f(&mut c);
        c.validate().unwrap_err()
    };
    assert_eq!(bad(|c| c.idle_budget_ns = 0).field, "idle_budget_ns");
    assert_eq!(bad(|c| c.default_kernel_ns = 0).field, "default_kernel_ns");
    assert_eq!(
        bad(|c| c.request_idle_gap_ns = MAX_PARAM_NS + 1).field,
        "request_idle_gap_ns"
    );
    assert_eq!(
        bad(|c| c.active_budget_ns = 50 * US).field,
        "active_budget_ns"
    );
    let e = bad(|c| c.min_active_budget_ns = 5 * MS);
    assert_eq!(e.field, "min_active_budget_ns");
    assert!(
        e.to_string()
            .starts_with("scheduler.min_active_budget_ns: "),
        "{e}"
    );
    // A hold of 0 is allowed (no hold).
    let c = SchedConfig {
        request_hold_ns: 0,
        ..SchedConfig::default()
    };
    assert_eq!(c.validate(), Ok(()));
    let small_idle = SchedConfig {
        idle_budget_ns: 1,
        ..SchedConfig::default()
    };
    assert_eq!(
        small_idle.validate().unwrap_err().field,
        "idle_budget_ns",
        "idle room smaller than the largest active room"
    );
    // Marks: 0 (none) or MIN_MARK_EVERY_NS..=MAX_PARAM_NS.
    for ok in [0, MIN_MARK_EVERY_NS, MAX_PARAM_NS] {
        let c = SchedConfig {
            mark_every_ns: ok,
            ..SchedConfig::default()
        };
        assert_eq!(c.validate(), Ok(()), "{ok}");
    }
    for no in [1, MIN_MARK_EVERY_NS - 1, MAX_PARAM_NS + 1] {
        let c = SchedConfig {
            mark_every_ns: no,
            ..SchedConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "mark_every_ns", "{no}");
        assert!(e.problem.contains("use 0"), "{e}");
    }
}

#[test]
fn config_embeds_as_a_toml_table_with_defaults_and_rejects_unknown_keys() {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        scheduler: SchedConfig,
    }
    let f: File = toml::from_str("[scheduler]\nidle_budget_ns = 1000000\n").unwrap();
    assert_eq!(f.scheduler.idle_budget_ns, MS);
    assert_eq!(f.scheduler.active_budget_ns, 500 * US);
    let f: File = toml::from_str("").unwrap();
    assert_eq!(f.scheduler, SchedConfig::default());
    let e = toml::from_str::<File>("[scheduler]\nidle_budget = 1\n")
        .err()
        .expect("unknown key rejected");
    assert!(e.to_string().contains("idle_budget"), "{e}");
}

// ---- SLO targets from the configuration ----

#[test]
fn slo_rules_first_match_wins_and_every_named_criterion_must_match() {
    #[derive(serde::Deserialize)]
    struct File {
        scheduler: SchedConfig,
    }
    let f: File = toml::from_str(
        r#"
        [[scheduler.slo]]
        p99_ms = 20.0
        executables = ["/opt/serve"]
        uids = [1000, 1001]

        [[scheduler.slo]]
        p99_ms = 50.5
        cgroups = ["/serving.slice"]

        [[scheduler.slo]]
        p99_ms = 200.0
        "#,
    )
    .unwrap();
    let c = f.scheduler;
    assert_eq!(c.validate(), Ok(()));
    let rule = |uid, exe, cg| c.slo_for(uid, exe, cg).map(|m| (m.rule, m.p99_ns));
    // Both criteria of the first entry.
    assert_eq!(rule(1001, Some("/opt/serve"), None), Some((0, 20 * MS)));
    // Only one of them: falls through to the cgroup entry, then the default.
    assert_eq!(
        rule(7, Some("/opt/serve"), Some("/serving.slice/a.scope")),
        Some((1, 50_500_000))
    );
    assert_eq!(
        rule(1000, Some("/opt/other"), Some("/serving.sliced")),
        Some((2, 200 * MS))
    );
    // Unknown exe and cgroup never match a criterion that names them.
    assert_eq!(rule(1000, None, None), Some((2, 200 * MS)));
    // No entries: no target.
    assert_eq!(
        SchedConfig::default().slo_for(0, Some("/x"), Some("/")),
        None
    );
}

#[test]
fn slo_errors_name_the_entry_and_the_key() {
    let with = |r: SloRule| SchedConfig {
        slo: vec![
            SloRule {
                p99_ms: 10.0,
                uids: vec![],
                executables: vec![],
                cgroups: vec![],
            },
            r,
        ],
        ..SchedConfig::default()
    };
    let ok = SloRule {
        p99_ms: 10.0,
        uids: vec![3],
        executables: vec!["/bin/x".into()],
        cgroups: vec!["/a".into()],
    };
    assert_eq!(with(ok.clone()).validate(), Ok(()));
    for (r, field) in [
        (
            SloRule {
                p99_ms: 0.0,
                ..ok.clone()
            },
            "slo[1].p99_ms",
        ),
        (
            SloRule {
                p99_ms: f64::NAN,
                ..ok.clone()
            },
            "slo[1].p99_ms",
        ),
        (
            SloRule {
                p99_ms: MAX_SLO_P99_MS * 2.0,
                ..ok.clone()
            },
            "slo[1].p99_ms",
        ),
        (
            SloRule {
                executables: vec!["server".into()],
                ..ok.clone()
            },
            "slo[1].executables",
        ),
        (
            SloRule {
                cgroups: vec!["serving.slice".into()],
                ..ok.clone()
            },
            "slo[1].cgroups",
        ),
    ] {
        let e = with(r).validate().unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(
            e.to_string().starts_with(&format!("scheduler.{field}: ")),
            "{e}"
        );
    }
    // Unknown keys in an entry are rejected by name.
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct File {
        scheduler: SchedConfig,
    }
    let e =
        toml::from_str::<File>("[[scheduler.slo]]\np99_ms = 1.0\nusers = [\"a\"]\n").unwrap_err();
    assert!(e.to_string().contains("users"), "{e}");
}

#[test]
fn an_slo_target_reaches_the_adaptation_and_the_snapshot() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.input(
        T0,
        Input::Register {
            client: 2,
            class: Class::Inference,
            gpu: 0,
            slo_p99_ns: Some(2 * MS),
        },
    );
    assert_eq!(h.client(2).slo_p99_ns, Some(2 * MS));
    // Requests of 10 ms against a 2 ms target: the active budget shrinks.
    let before = h.gpu(0).active_budget_ns;
    requests(&mut h, T0 + MS, SLO_EVAL_EVERY, 10 * MS);
    assert!(h.gpu(0).active_budget_ns < before);
    // A reload without the target: registered again with none.
    h.input(
        T0 + 10_000 * MS,
        Input::Register {
            client: 2,
            class: Class::Inference,
            gpu: 0,
            slo_p99_ns: None,
        },
    );
    assert_eq!(h.client(2).slo_p99_ns, None);
}

#[test]
fn the_sm_reservation_is_off_by_default_and_its_share_is_bounded() {
    let d = SchedConfig::default();
    assert_eq!(d.spatial, crate::SpatialMode::Off);
    assert!(d.validate().is_ok());
    #[derive(Debug, serde::Deserialize)]
    struct File {
        scheduler: SchedConfig,
    }
    let f: File = toml::from_str("[scheduler]\nspatial = \"auto\"\n").unwrap();
    assert_eq!(f.scheduler.spatial, crate::SpatialMode::Auto);
    assert!(toml::from_str::<File>("[scheduler]\nspatial = \"on\"\n").is_err());
    for (share, ok) in [
        (0.0, false),
        (0.01, true),
        (0.5, true),
        (0.51, false),
        (f64::NAN, false),
    ] {
        let c = SchedConfig {
            spatial_reserve: share,
            ..SchedConfig::default()
        };
        assert_eq!(c.validate().is_ok(), ok, "{share}");
        if !ok {
            assert_eq!(c.validate().unwrap_err().field, "spatial_reserve");
        }
    }
    let c = SchedConfig {
        spatial_min_kernel_ns: MAX_PARAM_NS + 1,
        ..SchedConfig::default()
    };
    assert_eq!(c.validate().unwrap_err().field, "spatial_min_kernel_ns");
    let c = SchedConfig {
        spatial_standing_kernel_ns: MAX_PARAM_NS + 1,
        ..SchedConfig::default()
    };
    assert_eq!(
        c.validate().unwrap_err().field,
        "spatial_standing_kernel_ns"
    );
}
