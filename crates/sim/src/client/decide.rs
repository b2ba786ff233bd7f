//! A client's decisions: what to do next, as a candidate, a leader, or neither; and the
//! faults it commits on purpose (freezing past its TTL, going silent).

use tenure_core::sm::{Command, SessionId};

use super::{
    key_of, Belief, Campaign, Client, ClientAction, ClientEnv, ClientTimer, Frozen, OpKind,
    Session, ELECTIONS, FREEZE_TTL_PERMILLE, THINK_LOCAL_US, TTL_TICKS,
};
use crate::time::US_PER_MS;

impl Client {
    pub(super) fn think(&mut self, env: &mut ClientEnv<'_>) {
        let delay = env.rng.between(THINK_LOCAL_US.0, THINK_LOCAL_US.1);
        env.timer_local(
            &self.clock,
            delay,
            ClientTimer::Think {
                generation: self.think_gen,
            },
        );
        if self.op.is_some() || env.quiesced || env.hush {
            return;
        }
        if let Some(session) = self.retire {
            self.start_op(OpKind::Revoke, Command::Revoke { session }, env);
            return;
        }
        let Some(session) = self.session else {
            let ttl_ticks = env.rng.between(TTL_TICKS.0, TTL_TICKS.1);
            self.start_op(OpKind::Grant, Command::Grant { ttl_ticks }, env);
            return;
        };
        let now_local = self.now_local(env);
        if self.silent && now_local > session.lease_base_local_us + session.ttl_local_us() * 3 / 2 {
            // It stopped keepaliving long ago: the session has expired or is about to, so
            // start over with a new one.
            self.session_ended("it stopped keepaliving and let the session expire", env);
            return;
        }
        match (self.campaign.clone(), self.belief.clone()) {
            (None, _) => {
                if let Some(tenancy) = env.tenancy {
                    if env.rng.chance(tenancy.delete) {
                        let election = env
                            .rng
                            .pick(&ELECTIONS)
                            .expect("elections exist")
                            .to_string();
                        let command = Command::DeleteElection { election };
                        self.start_op(OpKind::DeleteElection, command, env);
                        return;
                    }
                }
                let r = env.rng.unit();
                if r < 0.4 {
                    let election = env
                        .rng
                        .pick(&ELECTIONS)
                        .expect("elections exist")
                        .to_string();
                    self.campaign = Some(Campaign {
                        election: election.clone(),
                        index: None,
                        leaving: false,
                    });
                    let value = format!("client-{}", self.id).into_bytes();
                    self.start_op(
                        OpKind::Campaign,
                        Command::Campaign {
                            election,
                            session: session.id,
                            value,
                        },
                        env,
                    );
                } else if r < 0.6 {
                    let election = env.rng.pick(&ELECTIONS).expect("elections exist");
                    self.start_op(
                        OpKind::Get,
                        Command::Get {
                            key: key_of(election),
                        },
                        env,
                    );
                } else if r < 0.7 {
                    let election = env
                        .rng
                        .pick(&ELECTIONS)
                        .expect("elections exist")
                        .to_string();
                    self.start_op(OpKind::LeaderRead, Command::Leader { election }, env);
                }
            }
            (Some(_), Some(belief)) => self.think_as_leader(session, belief, env),
            (Some(campaign), None) => {
                if campaign.index.is_none() {
                    return;
                }
                if self.verify || env.rng.chance(0.15) {
                    self.verify = false;
                    self.start_op(
                        OpKind::LeaderRead,
                        Command::Leader {
                            election: campaign.election,
                        },
                        env,
                    );
                } else if env.rng.chance(env.mix.resign / 2.0) {
                    self.mark_leaving();
                    let command = Command::Resign {
                        election: campaign.election,
                        session: session.id,
                    };
                    self.start_op(OpKind::Resign, command, env);
                }
            }
        }
    }

    pub(super) fn think_as_leader(
        &mut self,
        session: Session,
        belief: Belief,
        env: &mut ClientEnv<'_>,
    ) {
        if env.faults_on && env.rng.chance(env.mix.client_freeze) {
            self.freeze(session, belief, env);
            return;
        }
        if let Some(fate) = env.fate {
            if env.faults_on && env.rng.chance(fate.crash) {
                self.crash(env);
                return;
            }
        }
        if env.faults_on && !self.silent && env.rng.chance(env.mix.client_silent) {
            self.silent = true;
            env.stats.fault("client-silent");
            env.trace.log(env.now_us, || {
                format!("fault: client {} stops sending keepalives", self.id)
            });
        }
        let election = belief.election.clone();
        if env.rng.chance(env.mix.resign) {
            self.stop_belief("it resigns", env);
            self.mark_leaving();
            self.start_op(
                OpKind::Resign,
                Command::Resign {
                    election,
                    session: session.id,
                },
                env,
            );
            return;
        }
        if env.rng.chance(env.mix.election_transfer) {
            let targets: Vec<SessionId> = env
                .campaigners
                .iter()
                .filter(|(c, (e, s))| **c != self.id && *e == election && *s != session.id)
                .map(|(_, (_, s))| *s)
                .collect();
            if let Some(to) = env.rng.pick(&targets).copied() {
                self.stop_belief("it transfers the election", env);
                self.mark_leaving();
                self.start_op(
                    OpKind::Transfer,
                    Command::Transfer {
                        election,
                        from: session.id,
                        to,
                    },
                    env,
                );
                return;
            }
        }
        if let Some(tenancy) = env.tenancy {
            if env.rng.chance(tenancy.delete) {
                let command = Command::DeleteKey {
                    key: key_of(&election),
                    election,
                    token: belief.token,
                };
                self.start_op(OpKind::Put { stale: false }, command, env);
                return;
            }
        }
        if env.rng.chance(0.85) {
            let value = format!("client-{}-{}", self.id, self.next_seq).into_bytes();
            let command = Command::FencedPut {
                key: key_of(&election),
                value,
                election,
                token: belief.token,
            };
            self.start_op(OpKind::Put { stale: false }, command, env);
        } else {
            self.start_op(OpKind::LeaderRead, Command::Leader { election }, env);
        }
    }

    pub(super) fn freeze(&mut self, session: Session, belief: Belief, env: &mut ClientEnv<'_>) {
        let ttl_true_us = self.clock.true_duration(session.ttl_local_us());
        let permille = env
            .rng
            .between(FREEZE_TTL_PERMILLE.0, FREEZE_TTL_PERMILLE.1);
        let duration_us = ttl_true_us * permille / 1_000;
        self.freeze_gen += 1;
        self.frozen = Some(Frozen {
            stale_write: Some((belief.election.clone(), belief.token)),
        });
        env.stats.fault("client-freeze");
        env.trace.log(env.now_us, || {
            format!(
                "fault: client {} freezes for {} ms about to write with token {} of {}",
                self.id,
                duration_us / US_PER_MS,
                belief.token,
                belief.election
            )
        });
        env.out.push(ClientAction::Timer {
            at_us: env.now_us + duration_us,
            timer: ClientTimer::Wake {
                generation: self.freeze_gen,
            },
        });
    }

    pub(super) fn mark_leaving(&mut self) {
        if let Some(campaign) = self.campaign.as_mut() {
            campaign.leaving = true;
        }
    }
}

impl Client {
    /// Stops sending keepalives from now on, as the `client-silent` fault does; used by the
    /// world's lease-handover shape right after the client's keepalive is acknowledged.
    pub fn go_silent(&mut self, env: &mut ClientEnv<'_>) {
        if self.silent || self.session.is_none() {
            return;
        }
        self.silent = true;
        env.stats.fault("client-silent");
        env.trace.log(env.now_us, || {
            format!(
                "fault: client {} stops sending keepalives right after an acknowledgement",
                self.id
            )
        });
    }
}
