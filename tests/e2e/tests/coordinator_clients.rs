//! tandemd with many real clients (launcher hosts under the shim, fake driver):
//! exact per-client launch counts, reclaiming a killed client, and a
//! coordinator killed and restarted under running clients.

use std::collections::BTreeSet;

use serde_json::Value;
use tandem_e2e::coord::{
    client_by_pid, clients, kv, kv_u64, num, poll, ready_client_id, spawn_launchers, total, Proc,
    Tandemd, TestDir, EXIT, SETTLE,
};

/// Polls /stats until every launcher's pid is listed (registered), and
/// `extra(stats)` holds; returns that snapshot.
#[track_caller]
fn wait_listed(d: &Tandemd, ls: &[Proc], what: &str, extra: impl Fn(&Value) -> bool) -> Value {
    poll(SETTLE, what, || {
        let st = d.try_stats()?;
        for l in ls {
            if client_by_pid(&st, l.pid()).is_none() {
                return Err(format!("pid {} not listed: {st}", l.pid()));
            }
        }
        if !extra(&st) {
            return Err(format!("condition not met: {st}"));
        }
        Ok(st)
    })
}

/// Sends "stop" to a `--until-stdin --hold` launcher and returns its DONE line.
#[track_caller]
fn stop(l: &mut Proc) -> String {
    l.send_line("stop");
    l.wait_line("DONE ", EXIT)
}

/// Closes a held launcher's stdin and checks that it exits 0.
#[track_caller]
fn release(l: &mut Proc) {
    l.close_stdin();
    let st = l.wait_exit(EXIT);
    assert!(st.success(), "launcher failed: {l}");
}

/// Waits until the coordinator's launch count for each launcher equals what
/// the launcher printed (`launched - dropped`, its own count) and the records
/// it consumed equal the records the shim pushed (`tandem_records_pushed`
/// counts successful pushes only; drops are counted apart); returns the snapshot.
#[track_caller]
fn wait_counts_match(d: &Tandemd, ls: &[Proc], done: &[String]) -> Value {
    poll(
        SETTLE,
        "per-client counts to match the clients' own",
        || {
            let st = d.try_stats()?;
            for (l, line) in ls.iter().zip(done) {
                let want = kv_u64(line, "launched") - kv_u64(line, "dropped");
                let pushed = kv_u64(line, "pushed");
                let c = client_by_pid(&st, l.pid())
                    .ok_or_else(|| format!("pid {} not listed: {st}", l.pid()))?;
                let (got, records) = (num(c, "launches"), num(c, "records"));
                if got != want || records != pushed {
                    return Err(format!(
                        "pid {}: coordinator counted launches={got} records={records}, the client \
                     launched {want} and pushed {pushed} ({line}); client: {c}",
                        l.pid()
                    ));
                }
            }
            Ok(st)
        },
    )
}

/// 16 client processes stream launches concurrently (through four different
/// driver resolution paths); the coordinator's per-client counts equal each
/// client's own count, nothing is dropped at this rate, every client is
/// listed once with its own id, pid and exe, and all 16 are reclaimed when
/// they exit.
#[test]
fn sixteen_clients_counts_match_each_clients_own_count() {
    const N: usize = 16;
    const COUNT: u64 = 6000; // < the default ring capacity (32768): no drop is possible
    let dir = TestDir::new("sixteen");
    let d = Tandemd::start(&dir);
    let count = COUNT.to_string();
    let mut ls = spawn_launchers(
        d.socket(),
        N,
        &["--rate", "3000", "--count", &count, "--hold"],
    );
    let ids: Vec<u64> = ls.iter_mut().map(ready_client_id).collect();
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), N, "client ids are not unique: {ids:?}");

    // All 16 listed while they stream.
    let st = wait_listed(&d, &ls, "16 clients listed", |_| true);
    assert_eq!(clients(&st).len(), N, "{st}");
    assert_eq!(total(&st, "clients"), N as u64, "{st}");

    let done: Vec<String> = ls.iter_mut().map(|l| l.wait_line("DONE ", EXIT)).collect();
    for (l, line) in ls.iter().zip(&done) {
        assert_eq!(kv_u64(line, "launched"), COUNT, "{l}");
        assert_eq!(kv_u64(line, "dropped"), 0, "records dropped at 3k/s: {l}");
    }
    let st = wait_counts_match(&d, &ls, &done);
    let my_uid = u64::from(
        // SAFETY: getuid has no preconditions and cannot fail.
        unsafe { libc::getuid() },
    );
    let mut sum = 0;
    for ((l, line), id) in ls.iter().zip(&done).zip(&ids) {
        let c = client_by_pid(&st, l.pid()).expect("listed");
        assert_eq!(num(c, "id"), *id, "id in /stats vs tandem_client_id(): {c}");
        assert_eq!(kv_u64(line, "client_id"), *id, "{l}");
        assert_eq!(num(c, "uid"), my_uid, "{c}");
        assert_eq!(num(c, "dropped"), 0, "{c}");
        assert_eq!(num(c, "bad_records"), 0, "{c}");
        assert_eq!(num(c, "launches_ex"), 0, "{c}");
        assert_eq!(num(c, "graph_launches"), 0, "{c}");
        let exe = c["exe"].as_str().unwrap_or_default();
        assert!(
            exe.ends_with("/launcher"),
            "exe {exe:?} is not the launcher: {c}"
        );
        sum += num(c, "launches");
    }
    assert_eq!(total(&st, "launches"), sum, "totals vs per-client: {st}");
    assert_eq!(total(&st, "dropped"), 0, "{st}");
    let reclaimed_before = total(&st, "clients_reclaimed");

    for l in &mut ls {
        release(l);
    }
    poll(SETTLE, "all 16 clients reclaimed after exiting", || {
        let st = d.try_stats()?;
        let r = total(&st, "clients_reclaimed");
        if clients(&st).is_empty() && r == reclaimed_before + N as u64 {
            Ok(())
        } else {
            Err(format!("clients_reclaimed={r}: {st}"))
        }
    });
}

/// kill -9 of one client: it is reclaimed (gone from /stats, clients_reclaimed
/// +1) while the others keep streaming and are counted exactly.
#[test]
fn killed_client_is_reclaimed_and_the_others_keep_counting() {
    let dir = TestDir::new("killclient");
    let d = Tandemd::start(&dir);
    let mut ls = spawn_launchers(
        d.socket(),
        4,
        &["--rate", "2000", "--until-stdin", "--hold"],
    );
    for l in &mut ls {
        ready_client_id(l);
    }
    let st = wait_listed(&d, &ls, "4 streaming clients", |st| {
        clients(st).iter().all(|c| num(c, "launches") > 0)
    });
    let reclaimed = total(&st, "clients_reclaimed");
    let victim = ls[0].pid();
    ls[0].kill9();

    let st = poll(SETTLE, "the killed client to be reclaimed", || {
        let st = d.try_stats()?;
        let r = total(&st, "clients_reclaimed");
        if client_by_pid(&st, victim).is_none() && r == reclaimed + 1 && clients(&st).len() == 3 {
            Ok(st)
        } else {
            Err(format!("clients_reclaimed={r}: {st}"))
        }
    });
    // The survivors keep counting after the reclaim.
    let before: Vec<u64> = ls[1..]
        .iter()
        .map(|l| num(client_by_pid(&st, l.pid()).expect("listed"), "launches"))
        .collect();
    poll(SETTLE, "the other clients to keep counting", || {
        let st = d.try_stats()?;
        for (l, b) in ls[1..].iter().zip(&before) {
            let c = client_by_pid(&st, l.pid()).ok_or("survivor vanished")?;
            if num(c, "launches") <= *b {
                return Err(format!("pid {} stuck at {b}: {st}", l.pid()));
            }
        }
        Ok(())
    });
    let done: Vec<String> = ls[1..].iter_mut().map(stop).collect();
    wait_counts_match(&d, &ls[1..], &done);
    for l in &mut ls[1..] {
        release(l);
    }
}

/// `IDCHANGE` lines of a launcher as (from, to, launched).
fn id_changes(l: &Proc) -> Vec<(u64, u64, u64)> {
    l.lines("IDCHANGE ")
        .iter()
        .map(|line| {
            (
                kv_u64(line, "from"),
                kv_u64(line, "to"),
                kv_u64(line, "launched"),
            )
        })
        .collect()
}

/// kill -9 of the coordinator under 4 streaming clients, then a new
/// coordinator on the same (now stale) socket: no client fails or hangs,
/// each sees its session end (tandem_client_id() 0) and re-registers with
/// the new coordinator, and the new coordinator counts exactly the launches
/// made after the client saw its new id.
#[test]
fn coordinator_killed_and_restarted_mid_run() {
    let dir = TestDir::new("restart");
    let mut d = Tandemd::start(&dir);
    let mut ls = spawn_launchers(
        d.socket(),
        4,
        &["--rate", "2000", "--until-stdin", "--hold"],
    );
    let first: Vec<u64> = ls.iter_mut().map(ready_client_id).collect();
    wait_listed(&d, &ls, "4 streaming clients", |st| {
        clients(st).iter().all(|c| num(c, "launches") > 0)
    });

    d.kill9();
    assert!(
        dir.socket().exists(),
        "kill -9 cannot have removed the socket file"
    );
    for l in &mut ls {
        l.wait_stdout(
            "the client noticing the dead coordinator (IDCHANGE to=0)",
            SETTLE,
            |out| {
                out.lines()
                    .any(|x| x.starts_with("IDCHANGE ") && kv(x)["to"] == "0")
            },
        );
    }
    let d2 = Tandemd::start(&dir);
    for l in &mut ls {
        l.wait_stdout("re-registration (a second IDCHANGE)", SETTLE, |out| {
            out.lines().filter(|x| x.starts_with("IDCHANGE ")).count() >= 2
        });
    }
    wait_listed(&d2, &ls, "4 clients re-registered and counting", |st| {
        clients(st).iter().all(|c| num(c, "launches") > 0)
    });

    let done: Vec<String> = ls.iter_mut().map(stop).collect();
    let st = poll(SETTLE, "new coordinator's counts to settle", || {
        let st = d2.try_stats()?;
        for (l, line) in ls.iter().zip(&done) {
            let ch = id_changes(l);
            let (_, new_id, at) = *ch.last().expect("IDCHANGE lines");
            let total_launched = kv_u64(line, "launched");
            // Launches at + 1 .. total ran with the new id; launch `at` may
            // have raced with the new session's publication. Less the new
            // session's drops: a push that raced with the old session's
            // retirement is counted dropped too, and with completion marks
            // on (the capture's, for these inference clients) that can be
            // a launch and its MARK.
            let dropped = if kv(line)["session_exact"] == "1" {
                kv_u64(line, "session_dropped")
            } else {
                kv_u64(line, "dropped")
            };
            let lo = total_launched - at - dropped;
            let c = client_by_pid(&st, l.pid()).ok_or_else(|| format!("pid {}", l.pid()))?;
            let got = num(c, "launches");
            if got != lo && got != lo + 1 {
                return Err(format!(
                    "pid {} (id {new_id}): new coordinator counted {got}, want {lo} or {} ({line}): {c}",
                    l.pid(),
                    lo + 1
                ));
            }
        }
        Ok(st)
    });
    for ((l, line), old) in ls.iter().zip(&done).zip(&first) {
        let ch = id_changes(l);
        assert_eq!(
            ch.len(),
            2,
            "want exactly: old id -> 0 (coordinator died) -> new id: {l}"
        );
        assert_eq!(ch[0].0, *old, "{l}");
        assert_eq!(ch[0].1, 0, "{l}");
        assert_eq!(ch[1].0, 0, "{l}");
        let new_id = ch[1].1;
        assert_ne!(new_id, 0, "{l}");
        assert_eq!(kv_u64(line, "client_id"), new_id, "{l}");
        let c = client_by_pid(&st, l.pid()).expect("listed");
        assert_eq!(num(c, "id"), new_id, "{c}");
    }
    for l in &mut ls {
        release(l);
    }
}
