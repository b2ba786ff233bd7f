//! Calls to the gRPC API: error assertions by documented reason, a [`Client`] that follows
//! the leader and retries as the library would, a [`Caller`] that does neither, keepalive
//! streams.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use tenure_proto::v1;
use tenure_proto::Reason;
use tonic::transport::Channel;
use tonic::Status;

use crate::{ms, secret, secs};

/// The `tenure-error` label of a status as it travels (raw, so that a test can show a
/// label this version does not know); [`Reason::of`] is the typed reading.
pub fn reason(s: &Status) -> Option<&str> {
    s.metadata()
        .get(tenure_proto::ERROR_KEY)
        .and_then(|v| v.to_str().ok())
}

/// A reason a test expects: a [`Reason`], or its name as it travels (`"not-leader"`),
/// which must be one of the documented reasons, so that a misspelt expectation fails
/// loudly instead of never matching.
pub trait ExpectedReason {
    /// The reason meant.
    fn reason(&self) -> Reason;
}

impl ExpectedReason for Reason {
    fn reason(&self) -> Reason {
        *self
    }
}

impl ExpectedReason for &str {
    #[track_caller]
    fn reason(&self) -> Reason {
        self.parse()
            .unwrap_or_else(|e| panic!("a test expects {e}; see tenure_proto::Reason"))
    }
}

/// Assert that `result` failed with `code` and `tenure-error` reason `why`.
#[track_caller]
pub fn assert_error<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: tonic::Code,
    why: impl ExpectedReason,
    what: &str,
) -> Status {
    let why = why.reason();
    match result {
        Ok(v) => panic!("{what}: expected {code:?}/{why}, got success {v:?}"),
        Err(s) => {
            assert_eq!(s.code(), code, "{what}: wrong code in {s:?}");
            assert_eq!(
                Reason::of(&s),
                Some(why),
                "{what}: wrong tenure-error reason in {s:?}"
            );
            s
        }
    }
}

enum Retry {
    /// An answer from the application: return it.
    No,
    /// The node does not lead; the named node might.
    Leader(Option<u64>),
    /// The node is down, slow or unsure: try another.
    Elsewhere,
}

fn classify(s: &Status) -> Retry {
    match Reason::of(s) {
        Some(Reason::NotLeader) => Retry::Leader(
            s.metadata()
                .get(tenure_proto::LEADER_ID_KEY)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
        ),
        Some(Reason::Unavailable) => Retry::Elsewhere,
        Some(_) => Retry::No,
        // A label this version does not know is still the application's answer.
        None if reason(s).is_some() => Retry::No,
        // No reason: transport errors, timeouts, a node that is down.
        None => Retry::Elsewhere,
    }
}

/// A client that finds the leader and retries on `not-leader`, `unavailable` and transport
/// errors, like a real client library would. Cheap to clone (channels are shared).
#[derive(Clone)]
pub struct Client {
    channels: BTreeMap<u64, Channel>,
    leader: Option<u64>,
    turn: usize,
}

impl Client {
    /// A client that follows the leader among the nodes of `channels`.
    pub fn new(channels: BTreeMap<u64, Channel>) -> Client {
        Client {
            channels,
            leader: None,
            turn: 0,
        }
    }

    /// Run `call` against the leader until it gets an application answer or `within` ends.
    /// Returns the node that answered with the answer.
    pub async fn on_leader<T, F, Fut>(
        &mut self,
        within: Duration,
        mut call: F,
    ) -> Result<(u64, T), Status>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let deadline = Instant::now() + within;
        let ids: Vec<u64> = self.channels.keys().copied().collect();
        loop {
            let id = match self.leader {
                Some(l) if self.channels.contains_key(&l) => l,
                _ => {
                    self.turn += 1;
                    ids[self.turn % ids.len()]
                }
            };
            let status = match call(self.channels[&id].clone()).await {
                Ok(r) => {
                    self.leader = Some(id);
                    return Ok((id, r.into_inner()));
                }
                Err(s) => s,
            };
            match classify(&status) {
                Retry::No => return Err(status),
                Retry::Leader(Some(hint)) if hint != id && self.channels.contains_key(&hint) => {
                    self.leader = Some(hint);
                }
                Retry::Leader(_) | Retry::Elsewhere => {
                    self.leader = None;
                    tokio::time::sleep(ms(10)).await;
                }
            }
            if Instant::now() >= deadline {
                return Err(status);
            }
        }
    }

    pub fn leader_hint(&self) -> Option<u64> {
        self.leader
    }

    /// Send `request` to the leader, retried as [`Client::on_leader`] does, within `within`.
    pub async fn send<R: Call>(
        &mut self,
        request: R,
        within: Duration,
    ) -> Result<R::Answer, Status> {
        self.on_leader(within, |ch| {
            R::call(tonic::Request::new(request.clone()), ch)
        })
        .await
        .map(|(_, answer)| answer)
    }

    pub async fn grant(&mut self, ttl_ms: u64) -> Result<u64, Status> {
        let request = v1::GrantRequest {
            ttl_ms,
            session_secret: secret(),
            ..Default::default()
        };
        Ok(self.send(request, secs(10)).await?.session_id)
    }

    /// Campaign for an election nobody holds: returns at once with the token.
    pub async fn campaign_uncontested(
        &mut self,
        election: &str,
        session: u64,
    ) -> Result<u64, Status> {
        let request = v1::CampaignRequest {
            election: election.to_string(),
            session_id: session,
            value: b"test".to_vec(),
            session_secret: secret(),
            ..Default::default()
        };
        Ok(self.send(request, secs(10)).await?.token)
    }

    /// A holder (a session of `ttl_ms` leading `election`) and a second session of a minute
    /// to queue behind it: `(holder, its token, the second session)`.
    pub async fn holder_and_second(&mut self, election: &str, ttl_ms: u64) -> (u64, u64, u64) {
        let holder = self.grant(ttl_ms).await.expect("grant");
        let token = self
            .campaign_uncontested(election, holder)
            .await
            .expect("campaign");
        let second = self.grant(60_000).await.expect("grant");
        (holder, token, second)
    }

    /// A session with a long TTL leading `election`: `(session, token)` for fenced writes.
    pub async fn writer_token(&mut self, election: &str) -> (u64, u64) {
        let session = self.grant(600_000).await.expect("grant a session");
        let token = self
            .campaign_uncontested(election, session)
            .await
            .expect("campaign");
        (session, token)
    }

    /// [`Client::writer_token`] for `election`, and a first fenced Put of `value` at `key`
    /// with its token, which must be acknowledged within `within`: `(session, token)`.
    pub async fn first_write(
        &mut self,
        election: &str,
        key: &str,
        value: &[u8],
        within: Duration,
    ) -> (u64, u64) {
        let (session, token) = self.writer_token(election).await;
        self.put(key, value, election, token, within)
            .await
            .unwrap_or_else(|e| panic!("the first write, of {key} in {election}: {e:?}"));
        (session, token)
    }

    /// A fenced Put; `Ok` means acknowledged (committed and applied on the leader).
    pub async fn put(
        &mut self,
        key: &str,
        value: &[u8],
        election: &str,
        token: u64,
        within: Duration,
    ) -> Result<u64, Status> {
        let request = v1::PutRequest {
            key: key.to_string(),
            value: value.to_vec(),
            election: election.to_string(),
            token,
            ..Default::default()
        };
        Ok(self.send(request, within).await?.index)
    }

    /// A linearizable Get at the leader.
    pub async fn get(&mut self, key: &str) -> Result<Option<v1::FencedValue>, Status> {
        let request = v1::GetRequest {
            key: key.to_string(),
        };
        Ok(self.send(request, secs(10)).await?.value)
    }
}

/// What a [`Call`] returns: the gRPC call in flight.
pub type CallFuture<A> =
    std::pin::Pin<Box<dyn Future<Output = Result<tonic::Response<A>, Status>> + Send>>;

/// A request of the gRPC API with a unary answer, and the call that sends it: what
/// [`Client::send`] and [`Caller::send`] take.
pub trait Call: Clone + Send + 'static {
    /// The answer's message.
    type Answer;
    /// Send `request` on `ch`.
    fn call(request: tonic::Request<Self>, ch: Channel) -> CallFuture<Self::Answer>;
}

/// One [`Call`] for each request: its answer, and the client and method that send it.
macro_rules! calls {
    ($($request:ident => $answer:ident by $module:ident::$client:ident::$method:ident;)*) => {$(
        impl Call for v1::$request {
            type Answer = v1::$answer;
            fn call(request: tonic::Request<Self>, ch: Channel) -> CallFuture<v1::$answer> {
                Box::pin(async move { v1::$module::$client::new(ch).$method(request).await })
            }
        }
    )*};
}

calls! {
    GrantRequest => GrantResponse by sessions_client::SessionsClient::grant;
    RevokeRequest => RevokeResponse by sessions_client::SessionsClient::revoke;
    CampaignRequest => CampaignResponse by elections_client::ElectionsClient::campaign;
    ResignRequest => ResignResponse by elections_client::ElectionsClient::resign;
    TransferRequest => TransferResponse by elections_client::ElectionsClient::transfer;
    LeaderRequest => LeaderResponse by elections_client::ElectionsClient::leader;
    PutRequest => PutResponse by fenced_keys_client::FencedKeysClient::put;
    GetRequest => GetResponse by fenced_keys_client::FencedKeysClient::get;
    DeleteKeyRequest => DeleteKeyResponse by fenced_keys_client::FencedKeysClient::delete;
    DeleteElectionRequest => DeleteElectionResponse
        by elections_client::ElectionsClient::delete;
    StatusRequest => StatusResponse by cluster_client::ClusterClient::status;
    MembersRequest => MembersResponse by cluster_client::ClusterClient::members;
    TransferLeadershipRequest => TransferLeadershipResponse
        by cluster_client::ClusterClient::transfer_leadership;
}

/// `session` (granted with the harness's secret) campaigns in `election` through `ch`, in a
/// task: the Campaign call answers once the session leads (or fails).
pub fn campaign_in_background(
    ch: Channel,
    election: &str,
    session: u64,
) -> tokio::task::JoinHandle<Result<v1::CampaignResponse, Status>> {
    let candidate = Caller::new(ch);
    let campaign = v1::CampaignRequest {
        election: election.into(),
        session_id: session,
        session_secret: secret(),
        ..Default::default()
    };
    tokio::spawn(async move { candidate.send(campaign).await })
}

/// Who leads `election`, as `(session, token)`, read at the node `caller` reaches.
pub async fn who_leads(caller: &Caller, election: &str) -> Option<(u64, u64)> {
    caller
        .send(v1::LeaderRequest {
            election: election.into(),
        })
        .await
        .expect("leader")
        .leader
        .map(|l| (l.session_id, l.token))
}

/// Calls to one node on one channel, with the channel's credentials or as the bearer of a
/// token; no retries, no leader following.
#[derive(Clone)]
pub struct Caller {
    ch: Channel,
    bearer: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl Caller {
    pub fn new(ch: Channel) -> Caller {
        Caller { ch, bearer: None }
    }

    /// Every call with `authorization: Bearer <token>`.
    pub fn bearer(ch: Channel, token: &str) -> Caller {
        let header = format!("Bearer {token}").parse().expect("an ASCII header");
        Caller {
            ch,
            bearer: Some(header),
        }
    }

    /// Send `request`: the answer.
    pub async fn send<R: Call>(&self, request: R) -> Result<R::Answer, Status> {
        let mut request = tonic::Request::new(request);
        if let Some(header) = &self.bearer {
            request
                .metadata_mut()
                .insert("authorization", header.clone());
        }
        Ok(R::call(request, self.ch.clone()).await?.into_inner())
    }
}

/// A KeepAlive stream: keepalives go in, answers come out.
pub struct KeepAlives {
    tx: tokio::sync::mpsc::Sender<v1::KeepAliveRequest>,
    answers: tonic::Streaming<v1::KeepAliveResponse>,
}

/// The keepalives a [`KeepAlives`] sends, as the request stream of the call.
struct Outgoing(tokio::sync::mpsc::Receiver<v1::KeepAliveRequest>);

impl tonic::codegen::tokio_stream::Stream for Outgoing {
    type Item = v1::KeepAliveRequest;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<v1::KeepAliveRequest>> {
        self.0.poll_recv(cx)
    }
}

impl KeepAlives {
    /// Open one on `ch`.
    pub async fn open(ch: Channel) -> Result<KeepAlives, Status> {
        KeepAlives::open_as(ch, None).await
    }

    /// Open one on `ch` with `authorization: Bearer <token>` when a token is given.
    pub async fn open_as(ch: Channel, token: Option<&str>) -> Result<KeepAlives, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let mut request = tonic::Request::new(Outgoing(rx));
        if let Some(token) = token {
            let header = format!("Bearer {token}").parse().expect("an ASCII header");
            request.metadata_mut().insert("authorization", header);
        }
        let answers = v1::sessions_client::SessionsClient::new(ch)
            .keep_alive(request)
            .await?
            .into_inner();
        Ok(KeepAlives { tx, answers })
    }

    /// Where keepalives go in, for a task that sends them on its own.
    pub fn sender(&self) -> tokio::sync::mpsc::Sender<v1::KeepAliveRequest> {
        self.tx.clone()
    }

    /// The next answer: an acknowledgement or the error that ends the stream. Panics when
    /// none comes within `within` or the stream ends without one.
    pub async fn answer(&mut self, within: Duration) -> Result<v1::KeepAliveResponse, Status> {
        tokio::time::timeout(within, self.answers.message())
            .await
            .unwrap_or_else(|_| panic!("no keepalive answer within {within:?}"))
            .map(|a| a.expect("the keepalive stream ended without an answer"))
    }

    /// Keepalive `seq` of `session` (with the harness's secret), and its answer (within 5 s).
    pub async fn renew(&mut self, session: u64, seq: u64) -> Result<v1::KeepAliveResponse, Status> {
        let request = v1::KeepAliveRequest {
            session_id: session,
            seq,
            session_secret: secret(),
            bind: false,
        };
        self.tx
            .send(request)
            .await
            .expect("the keepalive stream is open");
        self.answer(secs(5)).await
    }
}

/// Check that every `(key, value)` is stored, with many Gets in flight. Returns the keys
/// that are missing or hold another value.
pub async fn missing_keys(client: &Client, expected: &[(String, Vec<u8>)]) -> Vec<String> {
    const IN_FLIGHT: usize = 16;
    let mut missing = Vec::new();
    let per_task = expected.len().div_ceil(IN_FLIGHT).max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in expected.chunks(per_task) {
        let chunk = chunk.to_vec();
        let mut client = client.clone();
        tasks.spawn(async move {
            let mut missing = Vec::new();
            for (key, value) in chunk {
                match client.get(&key).await {
                    Ok(Some(v)) if v.value == value => {}
                    Ok(other) => missing.push(format!("{key} (found {other:?})")),
                    Err(e) => panic!("Get {key}: {e:?}"),
                }
            }
            missing
        });
    }
    while let Some(r) = tasks.join_next().await {
        missing.extend(r.expect("a Get task panicked"));
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expected_reason_is_a_documented_one() {
        let s = Reason::NotLeader.label(Status::failed_precondition("elsewhere"));
        assert_error::<()>(
            Err(s.clone()),
            tonic::Code::FailedPrecondition,
            "not-leader",
            "str",
        );
        assert_error::<()>(
            Err(s),
            tonic::Code::FailedPrecondition,
            Reason::NotLeader,
            "typed",
        );
        // A misspelt expectation cannot pass by never matching: it panics on its own.
        let typo = std::panic::catch_unwind(|| "not-the-leader".reason());
        assert!(typo.is_err());
    }

    #[test]
    fn only_unlabelled_and_redirecting_answers_are_retried_elsewhere() {
        let labelled = |r: Reason| r.label(Status::failed_precondition("x"));
        assert!(matches!(
            classify(&labelled(Reason::NotLeader)),
            Retry::Leader(None)
        ));
        assert!(matches!(
            classify(&labelled(Reason::Unavailable)),
            Retry::Elsewhere
        ));
        assert!(matches!(classify(&labelled(Reason::StaleToken)), Retry::No));
        assert!(matches!(
            classify(&Status::unavailable("refused")),
            Retry::Elsewhere
        ));
        let mut unknown = Status::failed_precondition("x");
        unknown.metadata_mut().insert(
            tenure_proto::ERROR_KEY,
            "from-a-newer-server".parse().expect("ascii"),
        );
        assert!(matches!(classify(&unknown), Retry::No));
    }
}
