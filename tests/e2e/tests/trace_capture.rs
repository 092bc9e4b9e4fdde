//! The round trip of `tandemctl trace` (issue 25): a job replays a known
//! synthetic trace through the shim (the `replay` host; the fake driver's
//! kernel durations are the trace's), tandemd captures it, and the trace
//! `tandemctl trace` writes has the source's kernels per request or step
//! exactly and its kernel time within 5%. Also its errors: an unknown id
//! (404) and a client with no whole request yet (409). The predictions made
//! from captured traces are compared with the sources' in
//! `trace_roundtrip_predict.rs`.

use std::time::Duration;

use tandem_e2e::coord::{client_env, output_of_failing, spawn_host, tandemctl, Tandemd, TestDir};
use tandem_gpusim::params::Params;
use tandem_gpusim::synthetic;
use tandem_gpusim::trace::Trace;

mod replay_trace;
use replay_trace::{round_trip, with_inference_marks};

fn check(source: &Trace, captured: &Trace) {
    let (src_n, cap_n) = (source.kernels().count(), captured.kernels().count());
    let (src_ns, cap_ns) = (source.kernel_ns() as f64, captured.kernel_ns() as f64);
    eprintln!(
        "{}: source {src_n} kernels {:.3} ms, captured {cap_n} kernels {:.3} ms ({:+.1}%); notes: {}",
        source.job,
        src_ns / 1e6,
        cap_ns / 1e6,
        (cap_ns / src_ns - 1.0) * 100.0,
        captured.notes
    );
    assert_eq!(cap_n, src_n, "kernels per {:?}", source.class);
    assert_eq!(captured.class, source.class);
    assert!(
        (cap_ns / src_ns - 1.0).abs() <= 0.05,
        "{}: kernel time {:.3} ms captured, {:.3} ms in the source",
        source.job,
        cap_ns / 1e6,
        src_ns / 1e6
    );
    let names = |t: &Trace| t.kernels().map(|k| k.name.clone()).collect::<Vec<_>>();
    let mut a = names(source);
    let mut b = names(captured);
    a.sort();
    b.sort();
    assert_eq!(a, b, "the captured kernels are the source's, by name");
}

#[test]
fn a_replayed_training_step_is_captured_with_its_kernels_and_kernel_time() {
    let dir = TestDir::new("trace-train");
    let d = Tandemd::start(&dir);
    let source = synthetic::resnet50_training(&Params::calibrated());
    let captured = round_trip(
        &dir,
        &d,
        &source,
        "training",
        "0",
        "4",
        Duration::from_secs(3),
    );
    check(&source, &captured);
}

#[test]
fn a_replayed_inference_request_is_captured_with_its_kernels_and_kernel_time() {
    let dir = TestDir::new("trace-infer");
    let d = Tandemd::start_with_config(&dir, &with_inference_marks(32_768));
    // BERT on ONNX Runtime on the A100: GPU-bound (its kernels queue back to
    // back), as the marks can measure (the module docs of tandemd's capture
    // say why a launch-bound job's short kernels are not).
    let source = tandem_gpusim::synthetic_a100::bert_ort(&Params::a100());
    let captured = round_trip(
        &dir,
        &d,
        &source,
        "inference",
        "5000",
        "4",
        Duration::from_secs(3),
    );
    check(&source, &captured);
}

#[test]
fn trace_errors_name_the_unknown_id_and_what_is_missing() {
    let dir = TestDir::new("trace-errors");
    let d = Tandemd::start(&dir);
    let out = output_of_failing(&mut tandemctl(d.socket(), &["trace", "77"]), "trace 77");
    assert!(out.contains("no live client with id 77"), "{out}");
    // A client that launched nothing yet: 409 with what is missing.
    let file = dir.path().join("idle.replay");
    std::fs::write(&file, "kernel k 1000\nS 0\n").expect("write");
    let env = client_env(d.socket()).var("TANDEM_CLASS", "inference");
    let mut host = spawn_host(
        "replay",
        &[
            file.to_str().expect("UTF-8"),
            "--seconds",
            "3",
            "--quiet-us",
            "1000",
        ],
        &env,
    );
    let ready = host.wait_line("READY", Duration::from_secs(30));
    let id = tandem_e2e::coord::kv_u64(&ready, "client_id");
    let r = d
        .get(&format!("/trace?id={id}&seconds=5"))
        .expect("GET /trace");
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(
        r.body.trim(),
        format!("client {id} has reported no kernel launch in the last 5 s")
    );
    let r = d.get("/trace?seconds=5").expect("GET /trace");
    assert_eq!(r.status, 400, "{}", r.body);
    host.wait_exit(Duration::from_secs(30));
}
