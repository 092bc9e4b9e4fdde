//! The steps of the conversation: one handler per message the shim sends,
//! and the transitions they share (publish, offer, close).

use std::collections::{BTreeMap, BTreeSet};

use tandem_proto::dedup::{Dedup, DedupOp, DedupStatus, WithdrawReason};

use super::entries::{msg, Granule, Key, SharedCopy};
use super::index::Index;
use super::outcome::{Action, Refusal};

impl Index {
    /// CANDIDATE: track the granule; offer the key's copy at once if there is
    /// one, else wait (and publish when a second candidate matches).
    pub(super) fn candidate(
        &mut self,
        now: u64,
        client: u64,
        m: &Dedup,
        out: &mut Vec<Action>,
    ) -> Result<(), Refusal> {
        if m.len != self.cfg.granule_len {
            return Err(Refusal::WrongLen(m.len));
        }
        let max = self.cfg.max_entries_per_client;
        let Some(c) = self.clients.get_mut(&client) else {
            return Err(Refusal::NotSharing);
        };
        let Some(gpu) = c.gpu else {
            return Err(Refusal::NoDevice);
        };
        let g = m.granule;
        if c.granules.contains_key(&g) {
            return Err(Refusal::AlreadyTracked(g));
        }
        if c.refused.contains(&(g, m.hash)) {
            return Err(Refusal::RefusedContent(g));
        }
        if c.tracked() >= max {
            return Err(Refusal::Limit);
        }
        let key = Key {
            group: c.group,
            gpu,
            len: m.len,
            hash: m.hash,
        };
        let e = self.keys.entry(key).or_default();
        if let Some(s) = e.shared {
            self.offer(now, client, g, s, out);
        } else {
            let seq = self.next_seq;
            self.next_seq += 1;
            e.pending.insert(seq, (client, g));
            c.set(g, Granule::Pending { key, seq });
            self.maybe_publish(now, key, out);
        }
        Ok(())
    }

    /// PUBLISHED: keep the copy (OK with an fd) and offer it to every waiting
    /// candidate of its key; anything else fails the publish.
    pub(super) fn published(
        &mut self,
        now: u64,
        client: u64,
        m: &Dedup,
        fd: bool,
        out: &mut Vec<Action>,
    ) -> Result<(), Refusal> {
        let s = m.shared_id;
        let not_asked = Refusal::NotAsked {
            op: m.op,
            granule: m.granule,
            shared: s,
        };
        let Some(sc) = self.shared.get_mut(&s) else {
            if !self.is_dead(s) {
                return Err(Refusal::UnknownShared(s));
            }
            let expected = self
                .clients
                .get_mut(&client)
                .is_some_and(|c| c.expired.remove(&(m.granule, s)));
            // Given up on: the publisher froze and exported its granule for
            // a copy that will never exist; it takes the granule back.
            if expected && m.status == DedupStatus::OK.0 {
                let mut f = Dedup::new(DedupOp::Forget, m.granule, m.len);
                f.shared_id = s;
                out.push(Action::SendForget { client, msg: f });
            }
            return Err(Refusal::Late {
                op: m.op,
                shared: s,
            });
        };
        if sc.published || sc.publisher.0 != client {
            return Err(not_asked);
        }
        if sc.publisher.1 != m.granule {
            // The publisher answered for another granule: its publish failed.
            self.publish_failed(now, s, true, out);
            return Err(not_asked);
        }
        if m.status != DedupStatus::OK.0 || !fd {
            self.publish_failed(now, s, true, out);
            return Ok(());
        }
        out.push(Action::AdoptFd { shared_id: s });
        sc.published = true;
        let key = sc.key;
        let g = m.granule;
        let c = self.gpu_counters(key.gpu);
        c.shared_copies += 1;
        c.shared_bytes += key.len;
        if let Some(c) = self.clients.get_mut(&client) {
            if let Some(Granule::Publishing { deadline, .. }) = c.granules.get(&g).copied() {
                self.timers.remove(&(deadline, client, g));
            }
        }
        self.hold(client, g, s, key.len);
        let waiting = match self.keys.get_mut(&key) {
            Some(e) => {
                e.publishing = None;
                e.shared = Some(s);
                std::mem::take(&mut e.pending)
            }
            None => BTreeMap::new(),
        };
        for (c2, g2) in waiting.into_values() {
            self.offer(now, c2, g2, s, out);
        }
        Ok(())
    }

    /// RESULT: the offered granule merged (a holder now), or is dropped; an
    /// answer to an offer given up is late.
    pub(super) fn result(
        &mut self,
        now: u64,
        client: u64,
        m: &Dedup,
        out: &mut Vec<Action>,
    ) -> Result<(), Refusal> {
        let (s, g) = (m.shared_id, m.granule);
        let dead = self.is_dead(s);
        let Some(c) = self.clients.get_mut(&client) else {
            return Err(Refusal::NotSharing);
        };
        let Some(sc) = self.shared.get(&s) else {
            return Err(if dead {
                c.expired.remove(&(g, s));
                Refusal::Late {
                    op: m.op,
                    shared: s,
                }
            } else {
                Refusal::UnknownShared(s)
            });
        };
        let (key, ok) = (sc.key, m.status == DedupStatus::OK.0);
        match c.granules.get(&g).copied() {
            Some(Granule::Offered {
                shared,
                deadline,
                sent_at,
            }) if shared == s => {
                self.timers.remove(&(deadline, client, g));
                if let Some(sc) = self.shared.get_mut(&s) {
                    sc.offers.remove(&(client, g));
                }
                if ok {
                    self.hold(client, g, s, key.len);
                    let k = self.gpu_counters(key.gpu);
                    k.merges += 1;
                    k.record_latency(now.saturating_sub(sent_at));
                } else {
                    c.remove(g);
                    let k = self.gpus.entry(key.gpu).or_default();
                    if m.status == DedupStatus::MISMATCH.0 {
                        c.refused.insert((g, key.hash));
                        k.mismatches += 1;
                    } else {
                        k.offer_failures += 1;
                    }
                    self.maybe_close(s, out);
                }
                Ok(())
            }
            st if c.expired.remove(&(g, s)) => {
                // An answer to an offer given up; the copy is still alive.
                if st.is_none() && ok {
                    self.hold(client, g, s, key.len);
                    let k = self.gpu_counters(key.gpu);
                    k.merges += 1;
                    k.late_replies += 1;
                    return Ok(());
                }
                if st.is_none() && m.status == DedupStatus::MISMATCH.0 {
                    c.refused.insert((g, key.hash));
                }
                Err(Refusal::Late {
                    op: m.op,
                    shared: s,
                })
            }
            _ => Err(Refusal::NotAsked {
                op: m.op,
                granule: g,
                shared: s,
            }),
        }
    }

    /// WITHDRAW: a candidate leaves (shared id 0), or a holder unmaps its copy.
    pub(super) fn withdraw(
        &mut self,
        now: u64,
        client: u64,
        m: &Dedup,
        out: &mut Vec<Action>,
    ) -> Result<(), Refusal> {
        let (s, g) = (m.shared_id, m.granule);
        let freed = m.status == WithdrawReason::FREED.0;
        let dead = self.is_dead(s);
        let Some(c) = self.clients.get_mut(&client) else {
            return Err(Refusal::NotSharing);
        };
        let st = c.granules.get(&g).copied();
        if s != 0 {
            return match st {
                Some(Granule::Holder { shared, .. }) if shared == s => {
                    c.remove(g);
                    if freed {
                        c.forget_refused(g);
                    }
                    self.remove_holder(s, client, g);
                    if m.status == WithdrawReason::COPY_ON_WRITE.0 {
                        if let Some(key) = self.shared.get(&s).map(|sc| sc.key) {
                            self.gpu_counters(key.gpu).cow_breaks += 1;
                        }
                    }
                    self.maybe_close(s, out);
                    Ok(())
                }
                _ if dead => Err(Refusal::Late {
                    op: m.op,
                    shared: s,
                }),
                _ => Err(Refusal::NotAsked {
                    op: m.op,
                    granule: g,
                    shared: s,
                }),
            };
        }
        if let Some(Granule::Holder { .. }) = st {
            return Err(Refusal::HeldWithoutShared(g));
        }
        // A granule tandemd stopped tracking on its side (a refused content,
        // a request given up) is still known to the client: not an error.
        let known_before = c.forget_expired(g) | c.has_refused(g);
        if st.is_none() && !known_before {
            return Err(Refusal::UnknownGranule(g));
        }
        if freed {
            c.forget_refused(g);
        }
        match st {
            Some(Granule::Pending { key, seq }) => {
                c.remove(g);
                if let Some(e) = self.keys.get_mut(&key) {
                    e.pending.remove(&seq);
                }
                self.cleanup_key(&key);
            }
            Some(Granule::Publishing { shared, .. }) => {
                self.publish_failed(now, shared, false, out)
            }
            // Not a failed offer: the client withdrew first (and may still
            // answer the offer, late).
            Some(Granule::Offered { .. }) => self.drop_offer(client, g, true, false, out),
            _ => {}
        }
        Ok(())
    }

    /// Start a publish on `key` if two candidates wait and nothing is
    /// published or publishing: the oldest candidate publishes.
    pub(super) fn maybe_publish(&mut self, now: u64, key: Key, out: &mut Vec<Action>) {
        let Some(e) = self.keys.get_mut(&key) else {
            return;
        };
        if e.publishing.is_some() || e.shared.is_some() || e.pending.len() < 2 {
            return;
        }
        let Some((_, (client, g))) = e.pending.pop_first() else {
            return;
        };
        let s = self.next_shared;
        self.next_shared += 1;
        e.publishing = Some(s);
        let deadline = now.saturating_add(self.cfg.timeout_ns);
        if let Some(c) = self.clients.get_mut(&client) {
            c.set(
                g,
                Granule::Publishing {
                    key,
                    shared: s,
                    deadline,
                },
            );
        }
        self.timers.insert((deadline, client, g));
        self.shared.insert(
            s,
            SharedCopy {
                key,
                publisher: (client, g),
                published: false,
                holders: BTreeSet::new(),
                offers: BTreeSet::new(),
            },
        );
        out.push(Action::SendPublish {
            client,
            msg: msg(DedupOp::Publish, g, s, &key),
        });
    }

    /// Publish `s` failed or was abandoned: drop it and its publisher's
    /// candidate, and let the next candidate publish.
    pub(super) fn publish_failed(&mut self, now: u64, s: u64, count: bool, out: &mut Vec<Action>) {
        let Some(sc) = self.shared.remove(&s) else {
            return;
        };
        let (client, g) = sc.publisher;
        if let Some(c) = self.clients.get_mut(&client) {
            if let Some(Granule::Publishing {
                shared, deadline, ..
            }) = c.granules.get(&g).copied()
            {
                if shared == s {
                    self.timers.remove(&(deadline, client, g));
                    c.remove(g);
                }
            }
        }
        if count {
            self.gpu_counters(sc.key.gpu).publish_failures += 1;
        }
        if let Some(e) = self.keys.get_mut(&sc.key) {
            if e.publishing == Some(s) {
                e.publishing = None;
            }
        }
        self.maybe_publish(now, sc.key, out);
        self.cleanup_key(&sc.key);
    }

    /// Send an OFFER of published copy `s` to `client`'s granule `g`.
    pub(super) fn offer(&mut self, now: u64, client: u64, g: u64, s: u64, out: &mut Vec<Action>) {
        let (Some(sc), Some(c)) = (self.shared.get_mut(&s), self.clients.get_mut(&client)) else {
            return;
        };
        let deadline = now.saturating_add(self.cfg.timeout_ns);
        sc.offers.insert((client, g));
        c.set(
            g,
            Granule::Offered {
                shared: s,
                deadline,
                sent_at: now,
            },
        );
        self.timers.insert((deadline, client, g));
        out.push(Action::SendOffer {
            client,
            msg: msg(DedupOp::Offer, g, s, &sc.key),
        });
    }

    /// Drop the offer to `client`'s granule `g`; `expired`: the client may
    /// still answer it (late); `failed`: count it as a failed offer.
    pub(super) fn drop_offer(
        &mut self,
        client: u64,
        g: u64,
        expired: bool,
        failed: bool,
        out: &mut Vec<Action>,
    ) {
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        let Some(Granule::Offered {
            shared, deadline, ..
        }) = c.granules.get(&g).copied()
        else {
            return;
        };
        c.remove(g);
        if expired {
            c.expired.insert((g, shared));
        }
        self.timers.remove(&(deadline, client, g));
        if let Some(sc) = self.shared.get_mut(&shared) {
            sc.offers.remove(&(client, g));
            let gpu = sc.key.gpu;
            if failed {
                self.gpu_counters(gpu).offer_failures += 1;
            }
        }
        self.maybe_close(shared, out);
    }

    /// `client`'s granule `g` now maps shared copy `s` (`len` bytes): its
    /// state becomes Holder, and the copy counts it among its holders.
    fn hold(&mut self, client: u64, g: u64, s: u64, len: u64) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.set(g, Granule::Holder { shared: s, len });
        }
        self.add_holder(s, client, g);
    }

    pub(super) fn add_holder(&mut self, s: u64, client: u64, g: u64) {
        let Some(sc) = self.shared.get_mut(&s) else {
            return;
        };
        let had = !sc.holders.is_empty();
        if sc.holders.insert((client, g)) && had {
            let (gpu, len) = (sc.key.gpu, sc.key.len);
            self.gpu_counters(gpu).saved_bytes += len;
        }
    }

    pub(super) fn remove_holder(&mut self, s: u64, client: u64, g: u64) {
        let Some(sc) = self.shared.get_mut(&s) else {
            return;
        };
        if sc.holders.remove(&(client, g)) && !sc.holders.is_empty() {
            let (gpu, len) = (sc.key.gpu, sc.key.len);
            self.gpu_counters(gpu).saved_bytes -= len;
        }
    }

    /// Close `s` if it is published, unmapped and not offered.
    pub(super) fn maybe_close(&mut self, s: u64, out: &mut Vec<Action>) {
        match self.shared.get(&s) {
            Some(sc) if sc.published && sc.holders.is_empty() && sc.offers.is_empty() => {}
            _ => return,
        }
        let Some(sc) = self.shared.remove(&s) else {
            return;
        };
        let c = self.gpu_counters(sc.key.gpu);
        c.shared_copies -= 1;
        c.shared_bytes -= sc.key.len;
        if let Some(e) = self.keys.get_mut(&sc.key) {
            if e.shared == Some(s) {
                e.shared = None;
            }
        }
        self.cleanup_key(&sc.key);
        out.push(Action::CloseShared { shared_id: s });
    }

    pub(super) fn cleanup_key(&mut self, key: &Key) {
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.pending.is_empty() && e.publishing.is_none() && e.shared.is_none())
        {
            self.keys.remove(key);
        }
    }
}
