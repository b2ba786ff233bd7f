//! What a client makes of replies and leadership news: completing operations, renewing its
//! lease from keepalive acks, and starting or stopping to believe it leads.

use tenure_core::drift::{holder_margin_us, DriftPpm};
use tenure_core::sm::{Command, Response, SessionId, SmError};
use tenure_core::types::Index;

use super::{Belief, Client, ClientAction, ClientEnv, ClientTimer, OpKind, Session};
use crate::observe::Observation;
use crate::protocol::ClientReply;
use crate::time::{fmt_time, TICK_NOMINAL_US};
use crate::trace::TraceKind;

impl Client {
    pub(super) fn on_reply(&mut self, reply: ClientReply, env: &mut ClientEnv<'_>) {
        match reply {
            ClientReply::Applied {
                req_id,
                index,
                response,
            } => self.on_applied(req_id, index, response, env),
            // Definitely lost, or unknown: either way the same request id goes out again,
            // and the cluster applies it at most once.
            ClientReply::Retry { req_id } | ClientReply::Indeterminate { req_id } => {
                if self.is_latest_attempt(req_id) {
                    self.send_attempt(env);
                }
            }
            ClientReply::NotLeader { req_id, hint } => {
                if self.is_latest_attempt(req_id) {
                    self.retarget(hint, env);
                    self.backoff(env);
                }
            }
            ClientReply::Busy { req_id } => {
                if self.is_latest_attempt(req_id) {
                    self.backoff(env);
                }
            }
            ClientReply::SessionUnknown { req_id, session } => {
                let ours = self
                    .op
                    .as_ref()
                    .is_some_and(|o| o.attempts.iter().any(|a| a.req_id == req_id));
                if ours {
                    let op = self.op.take().expect("checked above");
                    env.obs.push(Observation::OpCompleted {
                        op: op.id,
                        client: self.id,
                        position: None,
                        response: None,
                    });
                    if self.session.is_some_and(|s| s.id == session) {
                        self.session_ended("the leader does not know its session", env);
                    }
                }
            }
            ClientReply::KeepaliveAck { tag, session, .. } => {
                self.on_keepalive_ack(tag, session, env)
            }
            ClientReply::KeepaliveRefused {
                tag,
                session,
                unknown_session,
                hint,
            } => {
                self.keepalives.remove(&tag);
                if self.session.is_some_and(|s| s.id == session) {
                    if unknown_session {
                        self.session_ended("a keepalive found its session gone", env);
                    } else {
                        self.retarget(hint, env);
                    }
                }
            }
            ClientReply::LeaderChanged(change) => {
                let leader = change.leader.as_ref().map(|l| (l.session, l.token));
                self.observe_leadership(&change.election, change.index, leader, env);
            }
            ClientReply::StreamEnded { stream } => self.stream_ended(stream),
        }
    }

    pub(super) fn on_applied(
        &mut self,
        req_id: u64,
        index: Index,
        response: Response,
        env: &mut ClientEnv<'_>,
    ) {
        let attempt = self
            .op
            .as_ref()
            .and_then(|o| o.attempts.iter().find(|a| a.req_id == req_id).copied());
        let Some(attempt) = attempt else { return };
        let op = self.op.take().expect("an attempt was found");
        // The lease of a granted session counts from the send time of the op's *first*
        // attempt: a retry may be answered with the result of an earlier attempt, applied
        // (and timed by the leader) before the retry was sent.
        let first_sent_local_us = op
            .attempts
            .first()
            .map_or(attempt.sent_local_us, |a| a.sent_local_us);
        env.stats.client_ops_completed += 1;
        env.trace.event(
            TraceKind::ClientOp,
            env.now_us,
            &[self.id, op.id, index, crate::hash::of_response(&response)],
        );
        env.obs.push(Observation::OpCompleted {
            op: op.id,
            client: self.id,
            position: Some(index),
            response: Some(response.clone()),
        });
        if let Response::Rejected(
            SmError::UnknownSession(s) | SmError::SessionEnded { session: s, .. },
        ) = &response
        {
            if self.session.is_some_and(|own| own.id == *s) && op.kind != OpKind::Revoke {
                self.session_ended("an operation found its session gone", env);
                return;
            }
        }
        match op.kind {
            OpKind::Grant => {
                if let Response::Granted { session, ttl_ticks } = response {
                    let bound = match env.fate {
                        Some(fate) => env.rng.chance(fate.bound_share),
                        None => false,
                    };
                    self.session = Some(Session {
                        id: session,
                        ttl_ticks,
                        lease_base_local_us: first_sent_local_us,
                        bound,
                    });
                    self.keepalives.clear();
                    self.keepalive_gen += 1;
                    let interval = (ttl_ticks * TICK_NOMINAL_US / 3).max(TICK_NOMINAL_US);
                    env.timer_local(
                        &self.clock,
                        interval,
                        ClientTimer::Keepalive {
                            generation: self.keepalive_gen,
                        },
                    );
                }
            }
            OpKind::Campaign => match (response, self.campaign.as_mut(), self.session) {
                (Response::Campaigned { leader_token, .. }, Some(campaign), Some(session)) => {
                    campaign.index = Some(index);
                    let election = campaign.election.clone();
                    env.out.push(ClientAction::Campaigning(Some((
                        election.clone(),
                        session.id,
                    ))));
                    let leader = leader_token.map(|t| (session.id, t));
                    // A campaign answered "you lead" is leadership information at its index;
                    // "queued" says nothing about who leads, so it is not taken as such.
                    if leader.is_some() {
                        self.observe_leadership(&election, index, leader, env);
                    }
                }
                _ => {
                    self.campaign = None;
                    env.out.push(ClientAction::Campaigning(None));
                }
            },
            OpKind::Resign | OpKind::Transfer => {
                self.campaign = None;
                env.out.push(ClientAction::Campaigning(None));
                self.retire = self.session.map(|s| s.id);
            }
            OpKind::Revoke => {
                // Nobody believes in a session being revoked (it resigned or transferred
                // first): its streams may close.
                self.close_streams_below(u64::MAX, env);
                self.retire = None;
                self.session = None;
                self.keepalives.clear();
                self.keepalive_gen += 1;
            }
            OpKind::Put { stale } => match response {
                Response::Rejected(
                    SmError::StaleToken { token, current }
                    | SmError::TokenSuperseded { token, current, .. },
                ) => {
                    if stale {
                        env.stats.stale_writes_rejected += 1;
                        env.trace.log(env.now_us, || {
                            format!("client {}'s stale write with token {token} rejected (key at {current})", self.id)
                        });
                    } else {
                        self.stop_belief("a fenced write was rejected as stale", env);
                    }
                }
                Response::Put if stale => {
                    env.trace.log(env.now_us, || {
                        format!(
                            "client {}'s late write accepted: no newer write yet",
                            self.id
                        )
                    });
                }
                _ => {}
            },
            OpKind::LeaderRead => {
                if let (Response::LeaderIs(info), Command::Leader { election }) =
                    (response, &op.command)
                {
                    let leader = info.map(|l| (l.session, l.token));
                    self.observe_leadership(election, index, leader, env);
                }
            }
            OpKind::Get | OpKind::DeleteElection => {}
        }
    }

    pub(super) fn on_keepalive_ack(
        &mut self,
        tag: u64,
        session: SessionId,
        env: &mut ClientEnv<'_>,
    ) {
        let Some((sent_session, sent_local_us, stream)) = self.keepalives.remove(&tag) else {
            return;
        };
        let now_local = self.now_local(env);
        if self.session.is_none_or(|own| own.id != session) || sent_session != session {
            return;
        }
        if let Some(stream) = stream {
            self.bound_keepalive_acked(stream, env);
        }
        let Some(own) = self.session.as_mut() else {
            return;
        };
        // DESIGN rule 4: the lease counts from the *send* time of the acknowledged keepalive.
        // The injected bug counts from the receipt of the ack instead.
        let base = if env.lease_from_receive {
            now_local
        } else {
            sent_local_us
        };
        env.trace.detail(env.now_us, || {
            format!(
                "client {} keepalive {tag:#x} acked: sent {} us ago (local), ttl {} ticks",
                self.id,
                now_local - sent_local_us,
                own.ttl_ticks
            )
        });
        if base > own.lease_base_local_us {
            own.lease_base_local_us = base;
            self.renew(env);
        }
    }

    /// Takes in who leads `election` as of log index `index`.
    pub(super) fn observe_leadership(
        &mut self,
        election: &str,
        index: Index,
        leader: Option<(SessionId, u64)>,
        env: &mut ClientEnv<'_>,
    ) {
        let Some(campaign) = self.campaign.as_ref() else {
            return;
        };
        if campaign.election != election || campaign.leaving {
            return;
        }
        // Information older than the campaign is about someone else's tenure or an earlier
        // campaign, and information older than what was already seen is stale.
        let Some(campaign_index) = campaign.index else {
            return;
        };
        if index < campaign_index {
            return;
        }
        let seen = self
            .leadership_seen
            .entry(election.to_string())
            .or_insert(0);
        if index <= *seen {
            return;
        }
        *seen = index;
        let own = self.session.map(|s| s.id);
        match leader {
            Some((session, token)) if Some(session) == own => self.believe(election, token, env),
            _ => self.stop_belief("another candidate leads", env),
        }
    }

    /// DESIGN rule 4 on the client's own clock: the lease base (the send time of its last
    /// acknowledged keepalive) plus the TTL, minus the holder's margin, whose fixed part is
    /// one nominal tick (the TTL is counted in the nodes' ticks).
    pub(super) fn lease_deadline_local(&self, session: &Session, drift_max: DriftPpm) -> u64 {
        let ttl_us = session.ttl_local_us();
        let margin_us = holder_margin_us(ttl_us, drift_max, TICK_NOMINAL_US);
        (session.lease_base_local_us + ttl_us).saturating_sub(margin_us)
    }

    pub(super) fn believe(&mut self, election: &str, token: u64, env: &mut ClientEnv<'_>) {
        if self
            .belief
            .as_ref()
            .is_some_and(|b| b.election == election && b.token == token)
        {
            return;
        }
        let Some(session) = self.session else { return };
        let until_local_us = self.lease_deadline_local(&session, env.drift_max);
        if until_local_us <= self.now_local(env) {
            // Its lease is already too old to act on; a fresh keepalive and a leader read
            // will tell it again.
            self.verify = true;
            return;
        }
        self.belief = Some(Belief {
            election: election.to_string(),
            token,
            until_local_us,
        });
        let until_us = self.believe_until(env, election.to_string(), token, until_local_us);
        env.stats.election_leaderships += 1;
        env.trace.log(env.now_us, || {
            format!(
                "client {} leads {election} with token {token} until {}",
                self.id,
                fmt_time(until_us)
            )
        });
    }

    pub(super) fn renew(&mut self, env: &mut ClientEnv<'_>) {
        let Some(session) = self.session else { return };
        let until_local_us = self.lease_deadline_local(&session, env.drift_max);
        let Some(belief) = self.belief.as_mut() else {
            return;
        };
        if until_local_us <= belief.until_local_us {
            return;
        }
        belief.until_local_us = until_local_us;
        let (election, token) = (belief.election.clone(), belief.token);
        self.believe_until(env, election, token, until_local_us);
    }

    /// Records that this client believes it leads `election` with `token` until
    /// `until_local_us` on its own clock, and sets the timer at which it stops; returns that
    /// moment in true time.
    fn believe_until(
        &mut self,
        env: &mut ClientEnv<'_>,
        election: String,
        token: u64,
        until_local_us: u64,
    ) -> u64 {
        self.lapse_gen += 1;
        env.timer_at_local(
            &self.clock,
            until_local_us,
            ClientTimer::Lapse {
                generation: self.lapse_gen,
            },
        );
        let until_us = self.clock.true_at(until_local_us);
        env.obs.push(Observation::Belief {
            client: self.id,
            session: self.session.map_or(0, |s| s.id),
            election,
            token,
            until_us: Some(until_us),
        });
        until_us
    }

    pub(super) fn check_lapse(&mut self, env: &mut ClientEnv<'_>) {
        let now_local = self.now_local(env);
        if self
            .belief
            .as_ref()
            .is_some_and(|b| now_local >= b.until_local_us)
        {
            self.stop_belief("its lease ran out", env);
            self.verify = true;
        }
    }

    pub(super) fn stop_belief(&mut self, reason: &str, env: &mut ClientEnv<'_>) {
        if let Some(belief) = self.belief.take() {
            env.trace.log(env.now_us, || {
                format!(
                    "client {} stops leading {} (token {}): {reason}",
                    self.id, belief.election, belief.token
                )
            });
            env.obs.push(Observation::Belief {
                client: self.id,
                session: self.session.map_or(0, |s| s.id),
                election: belief.election,
                token: 0,
                until_us: None,
            });
        }
    }

    pub(super) fn session_ended(&mut self, reason: &str, env: &mut ClientEnv<'_>) {
        // Belief first, then the streams (the fate-sharing promise).
        self.stop_belief(reason, env);
        self.close_streams_below(u64::MAX, env);
        if self.campaign.take().is_some() {
            env.out.push(ClientAction::Campaigning(None));
        }
        self.session = None;
        self.retire = None;
        self.silent = false;
        self.keepalives.clear();
        self.keepalive_gen += 1;
    }
}
