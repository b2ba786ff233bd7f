//! `tenure://` with one node's address is enough: the client follows `not-leader` hints to
//! addresses its URL does not name (host names too), learns the other members from the
//! cluster so that it survives the death of the one node it was given, and still works
//! against a server without the `Members` call.
//!
//! The clusters come from the workspace's harness (`tenure-testkit`, TLS and client
//! authentication on); the older server is a stub served here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure::{CampaignOptions, Client};
use tenure_proto::v1;
use tenure_testkit::{secs, Cluster, Options};
use tonic::{Request, Response, Status};

fn opts() -> CampaignOptions {
    CampaignOptions {
        ttl: Duration::from_secs(5),
        ..Default::default()
    }
}

/// A `tenure://` URL naming only `hosts`, with the cluster's TLS files.
fn url_for(c: &Cluster, hosts: &[String]) -> String {
    let query = c
        .url()
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    format!("tenure://{}{query}", hosts.join(","))
}

/// Node 1, named `localhost` in the URL, is a follower: the client goes where its hint
/// points (an address the URL does not name), campaigns and reads the leader there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_naming_one_follower_by_host_name_follows_the_hint_to_the_leader() {
    let mut c = Cluster::start(Options::nodes(3));
    c.move_leadership(2, secs(20)).await;
    let url = url_for(&c, &[format!("localhost:{}", c.addrs(1).client.port())]);
    let client = Client::connect(&url).await.expect("connect");
    let leadership = client
        .campaign("hinted", b"v", opts())
        .await
        .expect("a campaign through a follower reaches the leader");
    let info = client
        .leader("hinted")
        .await
        .expect("leader through a follower")
        .expect("someone leads");
    assert_eq!(
        (info.token, info.value.as_slice()),
        (leadership.token(), &b"v"[..])
    );
    leadership.resign().await.expect("resign");
}

/// The URL names only the Raft leader. After the first request the client knows the other
/// members (from the `Members` call); when that one node dies, the client finds the new
/// leader among nodes its URL never named, with no hint from anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_naming_only_the_leader_finds_the_others_when_it_dies() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(20)).await;
    let url = url_for(&c, &[c.addrs(leader).client.to_string()]);
    let client = Client::connect(&url).await.expect("connect");
    client
        .campaign("learned", b"before", opts())
        .await
        .expect("a campaign at the one node given")
        .resign()
        .await
        .expect("resign");

    c.kill(leader);
    let others = c.others(&[leader]);
    c.wait_for_leader(&others, secs(20)).await;
    let leadership = client
        .campaign("learned", b"after", opts())
        .await
        .expect("a campaign after the only node in the URL died");
    let info = client
        .leader("learned")
        .await
        .expect("leader")
        .expect("someone leads");
    assert_eq!(info.token, leadership.token());
    leadership.resign().await.expect("resign");
}

/// A server from before `Members`: it answers `Leader` and refuses `Members` UNIMPLEMENTED
/// (counted here). The client asks once, takes the refusal as "nothing to learn", and serves
/// every request.
#[tokio::test]
async fn a_server_without_members_is_asked_once_and_still_serves() {
    let asked = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = tonic::transport::Server::builder()
        .add_service(v1::elections_server::ElectionsServer::new(OldServer))
        .add_service(v1::cluster_server::ClusterServer::new(OldCluster(
            asked.clone(),
        )))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    let server = tokio::spawn(server);

    let client = Client::connect(&format!("tenure://{addr}"))
        .await
        .expect("connect");
    for _ in 0..20 {
        let info = client
            .leader("old")
            .await
            .expect("an older server still answers")
            .expect("its stub always has a leader");
        assert_eq!((info.session, info.token), (7, 42));
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1, "Members asked once");
    server.abort();
}

fn gone<T>() -> Result<T, Status> {
    Err(Status::unimplemented("not in this stub"))
}

struct OldServer;

#[tonic::async_trait]
impl v1::elections_server::Elections for OldServer {
    async fn campaign(
        &self,
        _: Request<v1::CampaignRequest>,
    ) -> Result<Response<v1::CampaignResponse>, Status> {
        gone()
    }
    async fn resign(
        &self,
        _: Request<v1::ResignRequest>,
    ) -> Result<Response<v1::ResignResponse>, Status> {
        gone()
    }
    async fn transfer(
        &self,
        _: Request<v1::TransferRequest>,
    ) -> Result<Response<v1::TransferResponse>, Status> {
        gone()
    }
    async fn leader(
        &self,
        _: Request<v1::LeaderRequest>,
    ) -> Result<Response<v1::LeaderResponse>, Status> {
        Ok(Response::new(v1::LeaderResponse {
            leader: Some(v1::LeaderInfo {
                session_id: 7,
                value: b"old".to_vec(),
                token: 42,
            }),
        }))
    }
    type ObserveStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::LeaderEvent, Status>> + Send>>;
    async fn observe(
        &self,
        _: Request<v1::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        gone()
    }
    async fn delete(
        &self,
        _: Request<v1::DeleteElectionRequest>,
    ) -> Result<Response<v1::DeleteElectionResponse>, Status> {
        gone()
    }
}

/// The cluster service of the older server: `Members` is what it does not have.
struct OldCluster(Arc<AtomicUsize>);

#[tonic::async_trait]
impl v1::cluster_server::Cluster for OldCluster {
    type BackupStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<v1::BackupChunk, Status>> + Send + 'static>,
    >;
    async fn backup(
        &self,
        _: Request<v1::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        gone()
    }
    async fn status(
        &self,
        _: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusResponse>, Status> {
        gone()
    }
    async fn add_member(
        &self,
        _: Request<v1::MemberRequest>,
    ) -> Result<Response<v1::MembersResponse>, Status> {
        gone()
    }
    async fn remove_member(
        &self,
        _: Request<v1::MemberRequest>,
    ) -> Result<Response<v1::MembersResponse>, Status> {
        gone()
    }
    async fn transfer_leadership(
        &self,
        _: Request<v1::TransferLeadershipRequest>,
    ) -> Result<Response<v1::TransferLeadershipResponse>, Status> {
        gone()
    }
    async fn promote_member(
        &self,
        _: Request<v1::PromoteMemberRequest>,
    ) -> Result<Response<v1::MembersResponse>, Status> {
        gone()
    }
    async fn list_elections(
        &self,
        _: Request<v1::ListElectionsRequest>,
    ) -> Result<Response<v1::ListElectionsResponse>, Status> {
        gone()
    }
    async fn list_sessions(
        &self,
        _: Request<v1::ListSessionsRequest>,
    ) -> Result<Response<v1::ListSessionsResponse>, Status> {
        gone()
    }
    async fn members(
        &self,
        _: Request<v1::MembersRequest>,
    ) -> Result<Response<v1::MembersResponse>, Status> {
        self.0.fetch_add(1, Ordering::SeqCst);
        gone()
    }
}
