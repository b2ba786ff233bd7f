//! tenure-server: the pure core on real IO.
//!
//! `main` parses arguments and calls [`run`] with bound listeners and a shutdown future
//! (the mini-redis shape); `server.rs` puts the parts together. The crate is laid out by
//! what it serves, each module depending only on those below it (`tests/layout.rs` fails on
//! an import cycle, and on a driver that reaches anything above it):
//!
//! - [`api`]: the gRPC client API (`tenure.v1`), one module per service (sessions,
//!   elections, fenced keys, cluster), every unary call through one shape (authorize, build,
//!   send to the driver, answer), and the port's header-time authentication;
//! - [`http`]: the HTTP port's `/metrics`, `/health` and `/status`, its state and read check,
//!   and test-only fault injection; the live [`dashboard`] at `/` builds on it (the port does
//!   not know the dashboard);
//! - [`admin`]: the admin actions (membership, leadership), one function each, shared by the
//!   Cluster service and the dashboard;
//! - [`conn`]: the client and HTTP ports' connection gates, which only report facts (room
//!   left, who ended a connection); the leadership policy that acts on a full port is the
//!   hand-over rule (`handover.rs`), as election retention is `retention.rs`;
//! - [`directory`]: where each member is reached; [`auth`] and the quotas: who may do what;
//! - [`driver`]: the one thread that owns the core's `Node` and the write-ahead log and
//!   handles each `Ready` as persist (fsync) → advance → send → answer; it imports only
//!   [`metrics`], and publishes through its traits (peer messages to an `Outbox`, events to
//!   an `EventSink`, which the dashboard's journal implements);
//! - [`config`], [`metrics`], [`shared_port`] (several protocols on one port), TLS, and
//!   [`embed`] (the same server inside an application). The peer transport is the crate
//!   `tenure-transport`.
#![deny(missing_docs)]

pub mod admin;
pub mod api;
pub mod auth;
pub mod config;
pub mod conn;
pub mod dashboard;
pub mod directory;
pub mod driver;
pub mod embed;
pub mod flags;
mod handover;
pub mod http;
pub mod metrics;
mod quota;
pub mod restore;
mod retention;
pub(crate) mod server;
pub mod shared_port;
mod tls;

pub use config::{NodeAddrs, ServerConfig, TlsPaths};
pub use server::{check_identity, run, Listeners, ServerError, IDENTITY_FILE, INJECT_BUG_ENV};
