//! The FencedKeys service: get a key, and put or delete it under an election's token (a
//! write with a token below the highest accepted for the key is refused).

use tenure_core::sm::{Command, Response};
use tenure_proto::v1;
use tonic::{Request, Status};

use super::{on_session, unexpected, Api, Proposal};
use crate::auth::Action;

#[tonic::async_trait]
impl v1::fenced_keys_server::FencedKeys for Api {
    async fn get(
        &self,
        req: Request<v1::GetRequest>,
    ) -> Result<tonic::Response<v1::GetResponse>, Status> {
        self.unary(
            req,
            |r| Action::Read(&r.key),
            |r| Proposal::read(Command::Get { key: r.key }),
            |reply| match reply {
                (_, Response::Value(v)) => Ok(v1::GetResponse {
                    value: v.map(|v| v1::FencedValue {
                        value: v.value,
                        election: v.election,
                        token: v.token,
                        index: v.index,
                    }),
                }),
                (_, r) => Err(unexpected(r)),
            },
        )
        .await
    }

    async fn put(
        &self,
        req: Request<v1::PutRequest>,
    ) -> Result<tonic::Response<v1::PutResponse>, Status> {
        self.fenced_write(req, |reply| match reply {
            (index, Response::Put) => Ok(v1::PutResponse { index }),
            (_, r) => Err(unexpected(r)),
        })
        .await
    }

    async fn delete(
        &self,
        req: Request<v1::DeleteKeyRequest>,
    ) -> Result<tonic::Response<v1::DeleteKeyResponse>, Status> {
        self.fenced_write(req, |reply| match reply {
            (index, Response::Deleted { existed }) => Ok(v1::DeleteKeyResponse { index, existed }),
            (_, r) => Err(unexpected(r)),
        })
        .await
    }
}

impl Api {
    /// A put or a delete: authorized as a write of its key under its election, proposed as
    /// its session's own (with the request id, applied once) when it names a session.
    async fn fenced_write<W: FencedWrite, R>(
        &self,
        req: Request<W>,
        answer: impl FnOnce((u64, Response)) -> Result<R, Status>,
    ) -> Result<tonic::Response<R>, Status> {
        self.unary(
            req,
            |w| Action::Write {
                key: w.key(),
                election: w.election(),
            },
            |w| {
                let (session, seq, secret, command) = w.into_parts();
                Proposal::change(on_session(session, seq), secret, command)
            },
            answer,
        )
        .await
    }
}

/// The requests of a fenced write: the key and election it is authorized by, the session
/// it acts for, and the command it proposes.
trait FencedWrite {
    fn key(&self) -> &str;
    fn election(&self) -> &str;
    /// Session id, request sequence number, session secret and the command.
    fn into_parts(self) -> (u64, u64, Vec<u8>, Command);
}

impl FencedWrite for v1::PutRequest {
    fn key(&self) -> &str {
        &self.key
    }
    fn election(&self) -> &str {
        &self.election
    }
    fn into_parts(self) -> (u64, u64, Vec<u8>, Command) {
        let put = Command::FencedPut {
            key: self.key,
            value: self.value,
            election: self.election,
            token: self.token,
        };
        (self.session_id, self.request_seq, self.session_secret, put)
    }
}

impl FencedWrite for v1::DeleteKeyRequest {
    fn key(&self) -> &str {
        &self.key
    }
    fn election(&self) -> &str {
        &self.election
    }
    fn into_parts(self) -> (u64, u64, Vec<u8>, Command) {
        let delete = Command::DeleteKey {
            key: self.key,
            election: self.election,
            token: self.token,
        };
        (
            self.session_id,
            self.request_seq,
            self.session_secret,
            delete,
        )
    }
}
