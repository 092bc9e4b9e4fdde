//! Requests: implicit and explicit boundaries, abandoned requests (`scheduler.rs`, `client.rs`).

use super::*;

// ---- requests ----

#[test]
fn an_idle_gap_begins_a_request_and_the_next_sync_ends_it() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 0);
    h.launch(T0, 1, 1);
    assert!(h.client(1).request_active);
    h.launch(T0 + 10 * US, 1, 2);
    h.sync(T0 + 20 * US, T0 + 700 * US, 1);
    let c = h.client(1);
    assert!(!c.request_active);
    assert_eq!(c.requests, 1);
    assert_eq!(c.p50_ns, Some(700 * US));
    // A launch 1 ms after the sync (< 2 ms gap) is no new request...
    h.launch(T0 + 1_700 * US, 1, 1);
    assert!(!h.client(1).request_active);
    h.sync(T0 + 1_710 * US, T0 + 1_800 * US, 1);
    assert_eq!(h.client(1).requests, 1);
    // ... one 2 ms after the last activity is.
    h.launch(T0 + 3_800 * US, 1, 1);
    assert!(h.client(1).request_active);
    h.sync(T0 + 3_810 * US, T0 + 4_000 * US, 1);
    let c = h.client(1);
    assert_eq!(c.requests, 2);
    assert_eq!(c.p99_ns, Some(700 * US));
    assert_eq!(c.p50_ns, Some(200 * US));
}

#[test]
fn a_sync_counts_as_activity_for_the_gap() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 0);
    h.launch(T0, 1, 1);
    h.sync(T0 + US, T0 + 100 * US, 1);
    // A long sync with no launches (e.g. of a copy) keeps the client busy.
    h.sync(T0 + 1_500 * US, T0 + 3 * MS, 1);
    h.launch(T0 + 4 * MS, 1, 1);
    assert!(!h.client(1).request_active, "1 ms after a sync is not idle");
}

#[test]
fn explicit_boundaries_define_requests_and_turn_off_detection() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 0);
    h.input(
        T0,
        Input::RequestBegin {
            client: 1,
            ts_ns: T0,
        },
    );
    assert!(h.client(1).request_active);
    h.launch(T0 + 100 * US, 1, 1);
    // Syncs inside an explicit request do not end it.
    h.sync(T0 + 200 * US, T0 + 300 * US, 1);
    assert!(h.client(1).request_active);
    h.launch(T0 + 400 * US, 1, 1);
    h.sync(T0 + 500 * US, T0 + 600 * US, 1);
    h.input(
        T0 + 900 * US,
        Input::RequestEnd {
            client: 1,
            ts_ns: T0 + 900 * US,
        },
    );
    let c = h.client(1);
    assert_eq!(
        (c.requests, c.p50_ns, c.request_active),
        (1, Some(900 * US), false)
    );
    // A launch after a long gap no longer begins a request by itself.
    h.launch(T0 + 100 * MS, 1, 1);
    assert!(!h.client(1).request_active);
}

#[test]
fn an_abandoned_request_is_dropped_uncounted() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 0);
    h.reg(T0, 2, Class::Training, 0);
    h.launch(T0, 1, 1);
    assert!(h.gpu(0).inference_active);
    // No sync ever comes; after the idle gap the request is gone.
    h.tick(T0 + 2 * MS);
    let c = h.client(1);
    assert!(!c.request_active);
    assert_eq!(c.requests, 0);
    assert!(!h.gpu(0).inference_active);
    // With a sync outstanding it stays open (the GPU may still be working)...
    h.launch(T0 + 10 * MS, 1, 1);
    h.input(
        T0 + 10 * MS,
        Input::SyncBegin {
            client: 1,
            ts_ns: T0 + 10 * MS,
        },
    );
    h.tick(T0 + 100 * MS);
    assert!(h.client(1).request_active);
    // ... but not for ever.
    h.tick(T0 + 10 * MS + MAX_REQUEST_NS);
    assert!(!h.client(1).request_active);
}
