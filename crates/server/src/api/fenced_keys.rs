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
        self.unary(
            req,
            |r| Action::Write {
                key: &r.key,
                election: &r.election,
            },
            |r| {
                let put = Command::FencedPut {
                    key: r.key,
                    value: r.value,
                    election: r.election,
                    token: r.token,
                };
                Proposal::change(
                    on_session(r.session_id, r.request_seq),
                    r.session_secret,
                    put,
                )
            },
            |reply| match reply {
                (index, Response::Put) => Ok(v1::PutResponse { index }),
                (_, r) => Err(unexpected(r)),
            },
        )
        .await
    }

    async fn delete(
        &self,
        req: Request<v1::DeleteKeyRequest>,
    ) -> Result<tonic::Response<v1::DeleteKeyResponse>, Status> {
        self.unary(
            req,
            |r| Action::Write {
                key: &r.key,
                election: &r.election,
            },
            |r| {
                let delete = Command::DeleteKey {
                    key: r.key,
                    election: r.election,
                    token: r.token,
                };
                Proposal::change(
                    on_session(r.session_id, r.request_seq),
                    r.session_secret,
                    delete,
                )
            },
            |reply| match reply {
                (index, Response::Deleted { existed }) => {
                    Ok(v1::DeleteKeyResponse { index, existed })
                }
                (_, r) => Err(unexpected(r)),
            },
        )
        .await
    }
}
