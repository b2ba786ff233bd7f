//! The cluster's admin actions, written once for the two places that offer them: the
//! Cluster gRPC service ([`crate::api`]) and the dashboard's buttons ([`crate::dashboard`]).
//!
//! Each action is one function here. It takes an [`Administrator`], which only
//! [`Admin::authorize`] makes (the admin role under the node's policy, every refusal
//! counted), so that no action runs unchecked; it checks what it is asked against this
//! node's view of the membership; and it calls the driver. What belongs to a port stays
//! there: the gRPC port's per-principal calls-per-second budget, and the dashboard's guard
//! against cross-site requests (its header, the page's origin, a bounded body).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::sm::{Command, MemberAddresses, Response};
use tenure_core::types::{Membership, NodeId};
use tenure_proto::v1;
use tenure_transport::HostPort;
use tokio_rustls::rustls::pki_types::CertificateDer;

use crate::auth::{Action, Denied, Policy, Principal};
use crate::config::{NodeAddrs, ServerConfig};
use crate::directory::Directory;
use crate::driver::{ApiError, DriverHandle};

/// The admin actions of one node.
#[derive(Clone)]
pub struct Admin {
    driver: DriverHandle,
    /// Where members are reached: an added member whose addresses are already known needs
    /// none given.
    directory: Directory,
    policy: Option<Arc<Policy>>,
    cluster_id: String,
    /// How long an action waits for the driver (`request_timeout_ms`).
    timeout: Duration,
}

/// A caller that the node's policy lets administer the cluster. Only [`Admin::authorize`]
/// makes one, and every action asks for one.
#[derive(Debug)]
pub struct Administrator {
    principal: Principal,
}

impl Administrator {
    /// Who the caller is (the gRPC port charges its calls to it).
    pub fn principal(&self) -> &Principal {
        &self.principal
    }
}

/// Why an admin action was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum AdminError {
    /// What was asked breaks a rule that this node checks before it asks the driver; the
    /// words say which.
    Invalid(String),
    /// The driver refused the action, or cannot say whether it took effect.
    Driver(ApiError),
}

impl From<ApiError> for AdminError {
    fn from(e: ApiError) -> AdminError {
        AdminError::Driver(e)
    }
}

impl From<AdminError> for ApiError {
    /// As the gRPC API reports it: a rule broken is an invalid argument.
    fn from(e: AdminError) -> ApiError {
        match e {
            AdminError::Invalid(why) => ApiError::Invalid(why),
            AdminError::Driver(e) => e,
        }
    }
}

impl Admin {
    /// The admin actions of a node with `config` and `policy` (none: everyone may act, as
    /// the server said at start), over its running driver.
    pub fn new(
        config: &ServerConfig,
        driver: DriverHandle,
        policy: Option<Arc<Policy>>,
        directory: Directory,
    ) -> Admin {
        Admin {
            driver,
            directory,
            policy,
            cluster_id: config.cluster_id.clone(),
            timeout: config.request_timeout(),
        }
    }

    /// Whether the client behind `authorization` (the header's bytes, if it sent one) and
    /// `leaf` (its client certificate, if any) may administer the cluster
    /// ([`Action::Admin`]); a refusal is counted in the metrics.
    pub fn authorize(
        &self,
        authorization: Option<&[u8]>,
        leaf: Option<&CertificateDer<'_>>,
    ) -> Result<Administrator, Denied> {
        crate::auth::authorize(
            self.policy.as_deref(),
            &self.cluster_id,
            authorization,
            leaf,
            &Action::Admin,
            &self.driver.metrics,
        )
        .map(|principal| Administrator { principal })
    }

    /// Hands Raft leadership to node `to` (0: the voter that is most caught up); answered
    /// once the transfer has started.
    pub async fn transfer_leadership(
        &self,
        _: &Administrator,
        to: NodeId,
    ) -> Result<(), AdminError> {
        Ok(self.driver.transfer_leadership(to, self.timeout).await?)
    }

    /// Adds node `r.id` as a voter or a learner (`r.voter`). Its addresses, when given (all
    /// three), go into the replicated member directory first, so that every node (and every
    /// later leader) can reach the member before it is one; without them, the node's
    /// addresses must be known already.
    pub async fn add_member(
        &self,
        _: &Administrator,
        r: &v1::MemberRequest,
    ) -> Result<Membership, AdminError> {
        if r.id == 0 {
            return Err(AdminError::Invalid("node id 0 is not a node".into()));
        }
        let given = [&r.peer_addr, &r.client_addr, &r.http_addr]
            .iter()
            .any(|a| !a.is_empty());
        if given {
            let (entry, addrs) = member_addresses(r)?;
            // Already recorded: adding it again changes nothing there.
            if self.directory.addrs(r.id) != Some(addrs) {
                let set = Command::SetMember {
                    node: r.id,
                    addresses: entry,
                };
                if let (_, Response::Rejected(e)) =
                    self.driver.propose(None, set, self.timeout).await?
                {
                    return Err(ApiError::Rejected(e).into());
                }
            }
        } else if self.directory.addrs(r.id).is_none() {
            return Err(AdminError::Invalid(format!(
                "node {} has no known addresses: give them (peer, client, HTTP), as in \
                 `tenure members add {}=PEER,CLIENT,HTTP`",
                r.id, r.id
            )));
        }
        let m = self.membership();
        let (mut voters, mut learners) = (m.voters, m.learners);
        voters.remove(&r.id);
        learners.remove(&r.id);
        if r.voter {
            voters.insert(r.id);
        } else {
            learners.insert(r.id);
        }
        self.change_membership(voters, learners).await
    }

    /// Removes node `id`, a voter or a learner; refused for a node that is not a member.
    pub async fn remove_member(
        &self,
        _: &Administrator,
        id: NodeId,
    ) -> Result<Membership, AdminError> {
        let m = self.membership();
        if !m.all_nodes().contains(&id) {
            return Err(AdminError::Invalid(format!("node {id} is not a member")));
        }
        let (mut voters, mut learners) = (m.voters, m.learners);
        voters.remove(&id);
        learners.remove(&id);
        self.change_membership(voters, learners).await
    }

    /// Makes learner `id` a voter; refused for a node that is not a learner.
    pub async fn promote_member(
        &self,
        _: &Administrator,
        id: NodeId,
    ) -> Result<Membership, AdminError> {
        let m = self.membership();
        if !m.learners.contains(&id) {
            return Err(AdminError::Invalid(format!(
                "node {id} is not a learner of the current membership; add it first (`tenure members add`)"
            )));
        }
        let (mut voters, mut learners) = (m.voters, m.learners);
        learners.remove(&id);
        voters.insert(id);
        self.change_membership(voters, learners).await
    }

    /// This node's current membership, as the driver last published it.
    fn membership(&self) -> Membership {
        self.driver.published.borrow().status.membership.clone()
    }

    /// The membership change, answered once it is in effect
    /// ([`DriverHandle::change_membership`]).
    async fn change_membership(
        &self,
        voters: BTreeSet<NodeId>,
        learners: BTreeSet<NodeId>,
    ) -> Result<Membership, AdminError> {
        Ok(self
            .driver
            .change_membership(voters, learners, self.timeout)
            .await?)
    }
}

/// The addresses of an `AddMember` request, parsed: what goes into the directory, and the
/// same as the server's address type. All three are required.
fn member_addresses(r: &v1::MemberRequest) -> Result<(MemberAddresses, NodeAddrs), AdminError> {
    let parse = |what: &str, text: &str| -> Result<HostPort, AdminError> {
        if text.is_empty() {
            return Err(AdminError::Invalid(format!(
                "node {}: the {what} address is missing (give peer, client and HTTP addresses)",
                r.id
            )));
        }
        if text.len() > MemberAddresses::BYTES_MAX {
            return Err(AdminError::Invalid(format!(
                "node {}: the {what} address is {} bytes; at most {} are allowed",
                r.id,
                text.len(),
                MemberAddresses::BYTES_MAX
            )));
        }
        text.parse()
            .map_err(|e| AdminError::Invalid(format!("node {}: {what} address: {e}", r.id)))
    };
    let addrs = NodeAddrs {
        peer: parse("peer", &r.peer_addr)?,
        client: parse("client", &r.client_addr)?,
        http: parse("HTTP", &r.http_addr)?,
    };
    let distinct: BTreeSet<_> = [&addrs.peer, &addrs.client, &addrs.http]
        .into_iter()
        .collect();
    if distinct.len() < 3 {
        return Err(AdminError::Invalid(format!(
            "node {}: the peer, client and HTTP addresses must differ",
            r.id
        )));
    }
    Ok((
        MemberAddresses {
            peer: addrs.peer.to_string(),
            client: addrs.client.to_string(),
            http: addrs.http.to_string(),
        },
        addrs,
    ))
}
