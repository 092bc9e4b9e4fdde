//! The control block's gate and launch limit with the futex wake
//! (`proto/src/control.rs`) under loom, with a modelled futex whose waits
//! never time out (`tandem_models::sync`): a wake-up the protocol could lose
//! leaves the shim's thread asleep for ever, which loom reports as a
//! deadlock. The bounds given to the waits (an hour) never expire in a model.

mod common;

use std::time::Duration;

use common::{model, ring};
use loom::thread;
use tandem_models::control::GateWait;
use tandem_models::ring::{control_block, RingLayout};

const HOUR: Duration = Duration::from_secs(3600);

/// tandemd opens a closed gate while the shim's launching thread waits:
/// the thread always returns `Open`, however the two interleave. Guards the
/// order of the waiter's steps (read the gate word, check, then sleep only
/// while the word is unchanged) and the opener's (clear the bit, then wake).
#[test]
fn opening_the_gate_always_wakes_the_waiter() {
    model("opening_the_gate_always_wakes_the_waiter", || {
        let r = ring(16);
        let layout = RingLayout::new(16).expect("layout");
        let cb = control_block(&r.map, layout).expect("control block");
        cb.close_gate();
        let map = r.map.clone();
        let shim = thread::spawn(move || {
            let cb = control_block(&map, layout).expect("control block");
            cb.wait_open(HOUR, HOUR)
        });
        cb.open_gate().expect("wake");
        assert_eq!(shim.join().expect("shim"), GateWait::Open);
        assert!(cb.gate_is_open());
    });
}

/// tandemd raises the launch limit while the shim's thread waits at it (the
/// gate itself open): the thread always returns `Open`. Guards the advance
/// of the gate word's sequence on a raise, which is what makes the waiter's
/// futex wait return instead of sleeping on an unchanged word.
#[test]
fn raising_the_launch_limit_always_wakes_the_waiter() {
    model("raising_the_launch_limit_always_wakes_the_waiter", || {
        let r = ring(16);
        let layout = RingLayout::new(16).expect("layout");
        let cb = control_block(&r.map, layout).expect("control block");
        assert!(!cb.set_launch_limit(1).expect("limit"));
        assert!(cb.launch_allowed());
        cb.count_launch();
        let map = r.map.clone();
        let shim = thread::spawn(move || {
            let cb = control_block(&map, layout).expect("control block");
            let w = cb.wait_launch(HOUR, HOUR);
            (w, cb.launch_allowed())
        });
        assert!(cb.set_launch_limit(2).expect("limit"), "1 -> 2 is a raise");
        assert_eq!(shim.join().expect("shim"), (GateWait::Open, true));
    });
}
