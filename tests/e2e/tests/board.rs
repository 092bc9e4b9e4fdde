//! The GPU board as tandemd shows it (`/stats` `gpus[].board_*`) and
//! repairs it: when a client leaves, tandemd uncounts on the board the
//! explicit requests it left open, and only those its shim counted there.
//! A training job may call `tandem_request_begin` too (its shim has a
//! read-only board and counts nothing); when it dies mid-request, the
//! inference job's open request must stay counted, or training beside it
//! would fall back to the idle budget while inference still runs.

use serde_json::Value;
use tandem_e2e::coord::{
    client_by_pid, client_env, default_config, poll, spawn_host, Tandemd, TestDir, EXIT, SETTLE,
};

fn the_gpu(st: &Value) -> Result<Value, String> {
    match st["gpus"].as_array().map(Vec::as_slice) {
        Some([g]) => Ok(g.clone()),
        other => Err(format!("want one GPU: {other:?}")),
    }
}

#[test]
fn a_job_that_counted_no_request_uncounts_none_when_it_dies_mid_request() {
    let dir = TestDir::new("board");
    let d = Tandemd::start_with_config(&dir, default_config());
    let args = |leave_open: &'static str| {
        [
            "--explicit",
            "--rate",
            "100",
            "--seconds",
            "0.2",
            "--leave-open",
            leave_open,
        ]
    };
    // Inference: a few requests, then one left open for 30 s.
    let mut infer = spawn_host(
        "infer",
        &args("30"),
        &client_env(d.socket()).var("TANDEM_CLASS", "inference"),
    );
    infer.wait_line("OPEN", EXIT);
    let before = poll(SETTLE, "the open request on the board", || {
        let g = the_gpu(&d.try_stats()?)?;
        match g["board_requests_open"].as_u64() {
            Some(1) => Ok(g),
            _ => Err(g.to_string()),
        }
    });

    // Training, with explicit requests too: it dies with one open.
    let mut train = spawn_host(
        "infer",
        &args("0"),
        &client_env(d.socket()).var("TANDEM_CLASS", "training"),
    );
    let pid = train.pid();
    train.wait_line("OPEN", EXIT);
    assert!(train.wait_exit(EXIT).success(), "{train}");
    poll(SETTLE, "tandemd to reclaim the training job", || {
        let st = d.try_stats()?;
        match client_by_pid(&st, pid) {
            None => Ok(()),
            Some(c) => Err(c.to_string()),
        }
    });
    let g = the_gpu(&d.stats()).unwrap();
    assert_eq!(
        g["board_requests_open"].as_u64(),
        Some(1),
        "the inference job's request is still open: {g}\n(before the training job: {before})"
    );

    // The inference job's own departure mid-request is repaired.
    infer.kill9();
    poll(SETTLE, "the dead inference job's request uncounted", || {
        let g = the_gpu(&d.try_stats()?)?;
        match g["board_requests_open"].as_u64() {
            Some(0) => Ok(()),
            _ => Err(g.to_string()),
        }
    });
}
