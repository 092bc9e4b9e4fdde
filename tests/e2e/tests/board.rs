//! The GPU board as tandemd shows it (`/stats` `gpus[].board_*`) and
//! repairs it: when a client leaves, tandemd uncounts on the board the
//! explicit requests it left open, and only those its shim counted there.
//! A training job may call `tandem_request_begin` too (its shim has a
//! read-only board and counts nothing); when it dies mid-request, the
//! inference job's open request must stay counted, or training beside it
//! would fall back to the idle budget while inference still runs.

use serde_json::Value;
use std::os::unix::process::CommandExt;

use tandem_e2e::coord::{
    client_by_pid, client_env, default_config, host_command, poll, spawn_host, tandemctl_ok, Proc,
    Tandemd, TestDir, EXIT, SETTLE,
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

    // The inference job's own departure mid-request is repaired; as the
    // GPU's last client, it also frees the GPU's slot (no count shown).
    infer.kill9();
    poll(SETTLE, "the dead inference job's request uncounted", || {
        let g = the_gpu(&d.try_stats()?)?;
        match g["board_requests_open"].as_u64() {
            Some(0) | None if g["clients"].as_array().is_some_and(Vec::is_empty) => Ok(()),
            _ => Err(g.to_string()),
        }
    });
}

/// A job refused the inference class at registration (its uid is not
/// allowed to claim it) gets a read-only board and announces nothing; once a
/// reloaded configuration allows its uid, tandemd sends it a writable board
/// and its shim announces its requests from then on, without reconnecting.
#[test]
fn a_job_made_inference_by_a_reload_announces_itself_on_the_board() {
    const NOBODY: u32 = 65534;
    let dir = TestDir::new("board-reload");
    let d = Tandemd::start_with_config(&dir, default_config());
    let mut cmd = host_command(
        "infer",
        &["--explicit", "--closed", "--seconds", "20"],
        &client_env(d.socket()).var("TANDEM_CLASS", "inference"),
    );
    cmd.uid(NOBODY).gid(NOBODY);
    let mut infer = Proc::spawn("infer", cmd);
    let pid = infer.pid();
    let (id, before) = poll(SETTLE, "the job's requests, as training", || {
        let st = d.try_stats()?;
        let c = client_by_pid(&st, pid).ok_or("not registered yet")?;
        let g = the_gpu(&st)?;
        match (c["class"].as_str(), c["launches"].as_u64()) {
            (Some("training"), Some(n)) if n >= 50 => Ok((c["id"].as_u64(), g)),
            _ => Err(format!("{c}\n{g}")),
        }
    });
    assert_eq!(
        before["board_announcements"].as_u64(),
        Some(0),
        "a read-only board: nothing announced: {before}"
    );
    let allowed = default_config().replacen("\nuids = []\n", &format!("\nuids = [{NOBODY}]\n"), 1);
    assert_ne!(
        allowed,
        default_config(),
        "[policy.inference] has uids = []"
    );
    std::fs::write(d.config_path(), allowed).expect("write the config");
    tandemctl_ok(d.socket(), &["reload"]);
    poll(SETTLE, "the job's announcements on the board", || {
        let st = d.try_stats()?;
        let c = client_by_pid(&st, pid).ok_or("gone")?;
        let g = the_gpu(&st)?;
        match (
            c["id"].as_u64() == id,
            c["class"].as_str(),
            g["board_announcements"].as_u64(),
        ) {
            (true, Some("inference"), Some(n)) if n > 0 => Ok(()),
            _ => Err(format!("{c}\n{g}")),
        }
    });
    infer.kill9();
}

/// An inference job that is waiting in a sync has work on the GPU: its
/// shim holds the board open through the wait, so the training shims count
/// the GPU inference-active for a GPU-bound request's whole length, not
/// only for the hold after its last launch (a request of one 400 ms kernel
/// here, launched once and then waited for). It is uncounted when the wait
/// returns, and nothing is left open when the job ends.
#[test]
fn an_inference_job_waiting_in_a_sync_holds_the_board_open() {
    let dir = TestDir::new("board-sync");
    let d = Tandemd::start_with_config(&dir, default_config());
    let mut infer = spawn_host(
        "infer",
        &[
            "--closed",
            "--seconds",
            "2",
            "--kernels",
            "1",
            "--kernel-us",
            "400000",
        ],
        &client_env(d.socket()).var("TANDEM_CLASS", "inference"),
    );
    poll(SETTLE, "the sync's wait counted open on the board", || {
        let g = the_gpu(&d.try_stats()?)?;
        match g["board_requests_open"].as_u64() {
            Some(1) => Ok(()),
            _ => Err(g.to_string()),
        }
    });
    assert!(infer.wait_exit(EXIT).success(), "{infer}");
    // The sync ended before the job did; once tandemd has seen the job go,
    // its GPU has no client and no board slot (no count shown).
    let g = the_gpu(&d.stats()).unwrap();
    assert!(
        matches!(g["board_requests_open"].as_u64(), Some(0) | None),
        "{g}"
    );
}

/// An inference job that waits for its work by polling (`cuStreamQuery`
/// until it answers done, as TensorFlow's event manager does) has work on
/// the GPU too: each query that finds it still running announces activity on
/// the board, as a launch does (at most every quarter of the hold), so the
/// GPU stays inference-active through a GPU-bound request's whole length.
/// Here one 400 ms kernel a request: before queries counted, the board saw
/// at most one announcement a launch.
#[test]
fn an_inference_job_polling_for_its_work_announces_itself_while_it_runs() {
    let dir = TestDir::new("board-poll");
    let d = Tandemd::start_with_config(&dir, default_config());
    let mut infer = spawn_host(
        "infer",
        &[
            "--closed",
            "--seconds",
            "3",
            "--kernels",
            "1",
            "--kernel-us",
            "400000",
            "--poll",
            "stream",
        ],
        &client_env(d.socket()).var("TANDEM_CLASS", "inference"),
    );
    let pid = infer.pid();
    // Once a request has been polled to its end (its second launch seen).
    let (launches, announced) = poll(SETTLE, "the job's second request", || {
        let st = d.try_stats()?;
        let c = client_by_pid(&st, pid).ok_or("not registered yet")?;
        let g = the_gpu(&st)?;
        match (c["launches"].as_u64(), g["board_announcements"].as_u64()) {
            (Some(l), Some(a)) if l >= 2 => Ok((l, a)),
            _ => Err(format!("{c}\n{g}")),
        }
    });
    assert!(
        announced > 10 * launches,
        "{announced} announcements for {launches} launches"
    );
    // Polling counts nothing open: the board's count is for requests and syncs.
    let g = the_gpu(&d.stats()).unwrap();
    assert_eq!(g["board_requests_open"].as_u64(), Some(0), "{g}");
    assert!(infer.wait_exit(EXIT).success(), "{infer}");
}
