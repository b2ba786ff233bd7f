//! Scripted golden interaction tests, in the style of etcd raft's `testdata/*.txt`.
//!
//! Each file in `tests/testdata/` is a story told to a small cluster of real [`Node`]s, driven
//! by hand: who ticks, which messages are delivered, dropped or cut off by a partition. The
//! expected output under each command is what the nodes did, so the file reads as a trace of
//! Raft at work and any change in behaviour shows up as a diff of that trace.
//!
//! The file format is datadriven's: a command line, a `----` line, the output, a blank line.
//! Lines starting with `#` and blank lines between commands are comments, kept as they are.
//! A command written without `----` and output is filled in on the next rewrite, which is how
//! new stories are written.
//!
//! To regenerate every expected output after an intended change, run
//!
//! ```text
//! REWRITE=1 cargo test -p tenure-core --test interaction
//! ```
//!
//! (`UPDATE_EXPECT=1` works too) and then *read the diff*: a golden file that records wrong
//! behaviour is worse than none.
//!
//! # Commands
//!
//! ```text
//! cluster n=3 [prevote=false] [checkquorum=false] [snapshot=10] [election=15] [heartbeat=3]
//!         [checkpoint=5] [uncommitted=N] [fast=true] [show-ready=true]
//! add-node 4                       start node 4 with no membership: it waits to hear a leader
//! tick [n=1] [node=2 | nodes=1,2]  tick nodes (all live ones by default); nothing is delivered
//! tick until=campaign              tick all live nodes until one's election timer fires
//! campaign 1                       tick node 1 alone until its election timer fires
//! deliver [from=1] [to=2] [only=1->2,3->2] [drop=2->1]
//!                                  deliver the messages in flight when the command starts, in
//!                                  order; replies wait for the next deliver. `from`, `to` and
//!                                  `only` leave other messages in flight; `drop` loses them
//! stabilize                        deliver until the network is quiet
//! run n=60                         n times: tick every live node, then stabilize; prints only
//!                                  what the nodes did, each line prefixed with its round
//! propose 1 grant ttl=100          also: revoke session=S, campaign ELECTION session=S [value=V],
//!                                  resign ELECTION session=S, put KEY election=E token=T [value=V],
//!                                  get KEY, leader ELECTION
//! keepalive 1 session=S [tag=T] [stream=X seq=N]
//!                                  with `stream`: bind the session to stream X (fate-sharing)
//! stream-ended 1 stream=X by=client|server
//!                                  node 1's API layer saw stream X end, closed by the client
//!                                  or by the server itself
//! transfer 1 to=2
//! closed 2 peer=1                  node 2's transport saw its connection to node 1 end
//! refused 2 peer=1 [stale=true]    node 2's reconnect to node 1's peer port was refused (a
//!                                  stale one: the dial started before node 2's term or leader
//!                                  last changed)
//! members 1 voters=1,2,3,4 [learners=5]
//! partition 1 | 2 3                cut every link between the groups, both ways
//! isolate 2                        cut node 2 from everyone
//! heal                             restore every link
//! crash 2 / restart 2              stop node 2 (messages to it are lost); start it from its disk
//! show-ready true|false            print every Ready in full, in the order the driver handles it
//! status [1 2]                     role, term, vote, leader, commit, applied, last index, config
//! log 1                            node 1's snapshot point and log entries
//! session 1 S / election 1 E       node 1's view of a session or an election
//! ```
//!
//! # Output
//!
//! Entries and log positions are written `index@term`. A delivered message is one line,
//! `from->to Kind term=T ...`; what the receiver did in response is indented under it:
//! a line `N: field old->new ...` for every change of its role, term, vote, leader, commit,
//! applied or last index, configuration or transfer target, then the entries it applied
//! (`N applied i@t Command => Response`), leader changes of tenure elections and keepalive
//! acknowledgements, and the node's own account of what happened (`N event: …`, the
//! `Display` of each `AfterPersist::events` entry: elections started, pre-votes lost,
//! leadership won and given up and why, leaders learned of, membership changes), as etcd's testdata prints
//! its log lines. With `show-ready` on, each `Ready` is printed in full.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use common::Disk;
use tenure_core::config::Config;
use tenure_core::message::{Body, Message};
use tenure_core::node::{Bind, Node, Ready, Role, Status, StreamEnd};
use tenure_core::sm::{Command, LeaderChange, Response};
use tenure_core::types::{Entry, Membership, NodeId, Payload, Recovered};

// ----- the scripts ---------------------------------------------------------------------------

/// Every script in `tests/testdata`; `every_script_has_a_test` keeps this list complete.
const SCRIPTS: &[&str] = &[
    "check_quorum.txt",
    "elections.txt",
    "fast_election.txt",
    "fate_sharing.txt",
    "lease.txt",
    "membership.txt",
    "prevote.txt",
    "snapshot.txt",
    "split_vote.txt",
    "transfer.txt",
];

#[test]
fn check_quorum() {
    run_script("check_quorum.txt");
}

#[test]
fn elections() {
    run_script("elections.txt");
}

#[test]
fn fast_election() {
    run_script("fast_election.txt");
}

#[test]
fn lease() {
    run_script("lease.txt");
}

#[test]
fn fate_sharing() {
    run_script("fate_sharing.txt");
}

#[test]
fn membership() {
    run_script("membership.txt");
}

#[test]
fn prevote() {
    run_script("prevote.txt");
}

#[test]
fn snapshot() {
    run_script("snapshot.txt");
}

#[test]
fn split_vote() {
    run_script("split_vote.txt");
}

#[test]
fn transfer() {
    run_script("transfer.txt");
}

#[test]
fn every_script_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(testdata())
        .expect("tests/testdata exists")
        .map(|e| {
            e.expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".txt"))
        .collect();
    found.sort();
    assert_eq!(
        found, SCRIPTS,
        "add a #[test] and a SCRIPTS line for each new script"
    );
}

#[test]
fn the_script_parser_keeps_comments_and_fills_in_missing_output() {
    let script = "# A comment.\n\ncluster n=1\n\nstatus\n----\nstale output\n";
    let out = run_text(script);
    let expected = "# A comment.\n\ncluster n=1\n----\n\
                    1: Follower term=0 vote=- leader=- commit=0 applied=0 last=0 voters=(1)\n\n\
                    status\n----\n\
                    1: Follower term=0 vote=- leader=- commit=0 applied=0 last=0 voters=(1)\n";
    assert_eq!(out, expected);
}

fn testdata() -> PathBuf {
    Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests"),
    )
    .join("tests/testdata")
}

/// Run one script and compare the whole transcript with the file (or rewrite it).
fn run_script(name: &str) {
    let path = testdata().join(name);
    let text = std::fs::read_to_string(&path).expect("script exists");
    let transcript = run_text(&text);
    if std::env::var_os("REWRITE").is_some() {
        std::fs::write(&path, transcript).expect("rewrite script");
    } else {
        // expect-test prints both files whole; point at the first difference first.
        let first_difference = text
            .lines()
            .zip(transcript.lines())
            .position(|(a, b)| a != b)
            .or_else(|| (text.lines().count() != transcript.lines().count()).then_some(0));
        if let Some(k) = first_difference {
            eprintln!(
                "{name}:{}: expected {:?}\n{name}:{}:      got {:?}\n(rerun with REWRITE=1 to \
                 accept the new trace, then read the diff)",
                k + 1,
                text.lines().nth(k).unwrap_or(""),
                k + 1,
                transcript.lines().nth(k).unwrap_or("")
            );
        }
        expect_test::expect_file![path].assert_eq(&transcript);
    }
}

/// Run every command of a script and return the script with fresh outputs.
fn run_text(text: &str) -> String {
    let mut out = String::new();
    let mut h = Harness::default();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        // Skip the stale output: everything after `----` up to a blank line.
        if lines.peek() == Some(&"----") {
            lines.next();
            while lines.peek().is_some_and(|l| !l.trim().is_empty()) {
                lines.next();
            }
        }
        let result = h.run_command(line);
        out.push_str(line);
        out.push_str("\n----\n");
        for l in result.lines() {
            assert!(!l.trim().is_empty(), "{line}: output has a blank line");
            out.push_str(l);
            out.push('\n');
        }
        // Keep the blank line that ends the block, adding one if the file forgot it.
        match lines.peek() {
            Some(l) if l.trim().is_empty() => {}
            Some(_) => out.push('\n'),
            None => {}
        }
    }
    out
}

// ----- the command line ----------------------------------------------------------------------

/// A command line split into positional words and `key=value` arguments.
struct Args {
    line: String,
    positional: Vec<String>,
    named: BTreeMap<String, String>,
}

impl Args {
    fn parse(line: &str) -> (String, Args) {
        let mut words = line.split_whitespace();
        let name = words.next().expect("non-empty command").to_owned();
        let mut args = Args {
            line: line.to_owned(),
            positional: Vec::new(),
            named: BTreeMap::new(),
        };
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => {
                    let dup = args.named.insert(k.to_owned(), v.to_owned());
                    assert!(dup.is_none(), "{line}: {k} given twice");
                }
                None => args.positional.push(w.to_owned()),
            }
        }
        (name, args)
    }

    fn pos(&self, k: usize) -> &str {
        self.positional
            .get(k)
            .unwrap_or_else(|| panic!("{}: missing argument {}", self.line, k + 1))
    }

    fn node(&self, k: usize) -> NodeId {
        parse_num(self.pos(k), &self.line)
    }

    fn num(&self, key: &str) -> Option<u64> {
        self.named.get(key).map(|v| parse_num(v, &self.line))
    }

    fn req(&self, key: &str) -> u64 {
        self.num(key)
            .unwrap_or_else(|| panic!("{}: missing {key}=", self.line))
    }

    fn flag(&self, key: &str) -> Option<bool> {
        self.named.get(key).map(|v| match v.as_str() {
            "true" => true,
            "false" => false,
            _ => panic!("{}: {key} must be true or false", self.line),
        })
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.named.get(key).map(String::as_str)
    }

    fn ids(&self, key: &str) -> Option<BTreeSet<NodeId>> {
        self.named.get(key).map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| parse_num(s, &self.line))
                .collect()
        })
    }

    /// Links written `a->b`, comma separated.
    fn links(&self, key: &str) -> Option<BTreeSet<(NodeId, NodeId)>> {
        self.named.get(key).map(|v| {
            v.split(',')
                .map(|link| {
                    let (a, b) = link
                        .split_once("->")
                        .unwrap_or_else(|| panic!("{}: {link} is not a link a->b", self.line));
                    (parse_num(a, &self.line), parse_num(b, &self.line))
                })
                .collect()
        })
    }
}

fn parse_num(s: &str, line: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| panic!("{line}: {s:?} is not a number"))
}

// ----- the harness ---------------------------------------------------------------------------

/// A cluster driven by hand. Every node's `Ready` is handled as soon as an input produced it
/// (persist, advance, queue the messages), so a node's disk is always up to date and what
/// the script controls is only time and the network.
#[derive(Default)]
struct Harness {
    /// `None` while the node is down.
    nodes: BTreeMap<NodeId, Option<Node>>,
    disks: BTreeMap<NodeId, Disk>,
    configs: BTreeMap<NodeId, Config>,
    /// Sent and not yet delivered, in send order.
    inflight: VecDeque<Message>,
    /// Links (from, to) that lose every message.
    cut: BTreeSet<(NodeId, NodeId)>,
    show_ready: bool,
    /// Inside `run`: deliveries print only their effects, not the messages.
    quiet: bool,
    /// Template for nodes added later, so that they share the cluster's timing.
    template: Option<Config>,
}

impl Harness {
    fn run_command(&mut self, line: &str) -> String {
        let (name, a) = Args::parse(line);
        let mut out = String::new();
        match name.as_str() {
            "cluster" => self.cmd_cluster(&a, &mut out),
            "add-node" => self.cmd_add_node(&a, &mut out),
            "tick" => self.cmd_tick(&a, &mut out),
            "campaign" => self.cmd_campaign(&a, &mut out),
            "deliver" => self.cmd_deliver(&a, &mut out),
            "stabilize" => self.cmd_stabilize(&mut out),
            "run" => self.cmd_run(&a, &mut out),
            "propose" => self.cmd_propose(&a, &mut out),
            "keepalive" => {
                let id = a.node(0);
                let session = a.req("session");
                let tag = a.num("tag").unwrap_or(0);
                let bind = a.num("stream").map(|stream| Bind {
                    stream,
                    seq: a.num("seq").unwrap_or(tag),
                });
                self.input(id, &mut out, "", |n| {
                    n.keepalive_bound(session, tag, None, bind)
                });
            }
            "stream-ended" => {
                let stream = a.req("stream");
                let end = match a.str("by") {
                    Some("client") => StreamEnd::Client,
                    Some("server") => StreamEnd::Server,
                    other => panic!("stream-ended needs by=client|server, got {other:?}"),
                };
                self.input(a.node(0), &mut out, "", |n| {
                    n.stream_ended(stream, end);
                    Ok::<(), String>(())
                });
            }
            "closed" => {
                let peer = a.req("peer");
                self.input(a.node(0), &mut out, "", |n| {
                    n.peer_connection_closed(peer);
                    Ok::<(), String>(())
                });
            }
            "refused" => {
                let peer = a.req("peer");
                // `stale=true`: the dial started before the node's (term, leader) last changed.
                let stale = a.flag("stale").unwrap_or(false);
                self.input(a.node(0), &mut out, "", |n| {
                    let epoch = n.follow_epoch() - u64::from(stale);
                    n.peer_reconnect_refused(peer, epoch);
                    Ok::<(), String>(())
                });
            }
            "transfer" => {
                let to = a.req("to");
                self.input(a.node(0), &mut out, "", |n| n.transfer_leadership(to));
            }
            "members" => {
                let voters = a.ids("voters").expect("members needs voters=");
                let learners = a.ids("learners").unwrap_or_default();
                self.input(a.node(0), &mut out, "", |n| {
                    n.change_membership(voters, learners)
                        .map(|p| format!("proposed {}@{}", p.index, p.term))
                });
            }
            "partition" => {
                let mut groups: Vec<Vec<NodeId>> = vec![Vec::new()];
                for w in &a.positional {
                    if w == "|" {
                        groups.push(Vec::new());
                    } else {
                        groups
                            .last_mut()
                            .expect("one group at least")
                            .push(parse_num(w, line));
                    }
                }
                for (i, g) in groups.iter().enumerate() {
                    for h in &groups[i + 1..] {
                        for x in g {
                            for y in h {
                                self.cut.insert((*x, *y));
                                self.cut.insert((*y, *x));
                            }
                        }
                    }
                }
            }
            "isolate" => {
                let id = a.node(0);
                for other in self.nodes.keys().copied().filter(|o| *o != id) {
                    self.cut.insert((id, other));
                    self.cut.insert((other, id));
                }
            }
            "heal" => self.cut.clear(),
            "crash" => {
                let id = a.node(0);
                self.nodes.insert(id, None);
            }
            "restart" => {
                let id = a.node(0);
                let recovered = self.disks[&id].recovered.clone();
                let node =
                    Node::new(self.configs[&id].clone(), recovered).expect("restart from own disk");
                self.nodes.insert(id, Some(node));
                self.settle(id, &mut out, "");
                self.write_status(id, &mut out);
            }
            "show-ready" => self.show_ready = a.pos(0) == "true",
            "status" => {
                let ids: Vec<NodeId> = if a.positional.is_empty() {
                    self.nodes.keys().copied().collect()
                } else {
                    (0..a.positional.len()).map(|k| a.node(k)).collect()
                };
                for id in ids {
                    self.write_status(id, &mut out);
                }
            }
            "log" => self.cmd_log(&a, &mut out),
            "session" => {
                let n = self.live(a.node(0));
                let s = parse_num(a.pos(1), line);
                match n.state_machine().session(s) {
                    Some(info) => writeln!(
                        out,
                        "session {s}: ttl={} remaining={} recorded_at={}",
                        info.ttl_ticks, info.remaining_ticks, info.recorded_index
                    ),
                    None => writeln!(out, "session {s}: none"),
                }
                .expect("write to string");
            }
            "election" => {
                let n = self.live(a.node(0));
                let e = a.pos(1);
                let sm = n.state_machine();
                let leader = sm
                    .leader(e)
                    .map_or("none".to_owned(), |l| format!("session {}", l.session));
                writeln!(
                    out,
                    "election {e}: leader={leader} token={} candidates={:?}",
                    sm.token(e),
                    sm.candidates(e)
                )
                .expect("write to string");
            }
            other => panic!("unknown command {other:?} in {line:?}"),
        }
        out
    }

    fn cmd_cluster(&mut self, a: &Args, out: &mut String) {
        // A script may tell several stories; each `cluster` starts from nothing.
        *self = Harness::default();
        let n = a.req("n");
        let ids: Vec<NodeId> = (1..=n).collect();
        let mut template = Config::new(1, ids.clone());
        if let Some(v) = a.flag("prevote") {
            template.pre_vote = v;
        }
        if let Some(v) = a.flag("checkquorum") {
            template.check_quorum = v;
        }
        if let Some(v) = a.flag("fast") {
            template.fast_election = v;
        }
        if let Some(v) = a.num("snapshot") {
            template.snapshot_threshold_entries = v;
        }
        if let Some(v) = a.num("election") {
            template.election_timeout_ticks = v;
        }
        if let Some(v) = a.num("heartbeat") {
            template.heartbeat_ticks = v;
        }
        if let Some(v) = a.num("checkpoint") {
            template.lease_checkpoint_ticks = v;
        }
        if let Some(v) = a.num("uncommitted") {
            template.uncommitted_entries_max = v;
        }
        self.show_ready = a.flag("show-ready").unwrap_or(false);
        self.template = Some(template.clone());
        for id in ids {
            let mut cfg = template.clone();
            cfg.id = id;
            cfg.seed = id;
            self.start(cfg);
            self.write_status(id, out);
        }
    }

    fn cmd_add_node(&mut self, a: &Args, out: &mut String) {
        let id = a.node(0);
        let mut cfg = self.template.clone().expect("cluster first");
        cfg.id = id;
        cfg.seed = id;
        cfg.initial_voters = Vec::new();
        self.start(cfg);
        self.write_status(id, out);
    }

    fn start(&mut self, cfg: Config) {
        let id = cfg.id;
        let node = Node::new(cfg.clone(), Recovered::default()).expect("valid config");
        self.nodes.insert(id, Some(node));
        self.disks.insert(id, Disk::default());
        self.configs.insert(id, cfg);
    }

    fn cmd_tick(&mut self, a: &Args, out: &mut String) {
        let ids: Vec<NodeId> = match (a.num("node"), a.ids("nodes")) {
            (Some(id), _) => vec![id],
            (None, Some(ids)) => ids.into_iter().collect(),
            (None, None) => self.live_ids(),
        };
        if let Some(until) = a.str("until") {
            assert_eq!(until, "campaign", "{}: only until=campaign", a.line);
            return self.tick_until_campaign(&ids, out);
        }
        for _ in 0..a.num("n").unwrap_or(1) {
            for id in &ids {
                self.input(*id, out, "", |n| {
                    n.tick();
                    Ok::<(), std::convert::Infallible>(())
                });
            }
        }
    }

    /// Tick every given node, round by round, until one of them starts an election.
    fn tick_until_campaign(&mut self, ids: &[NodeId], out: &mut String) {
        let t = ids
            .iter()
            .map(|id| self.configs[id].election_timeout_ticks)
            .max()
            .expect("some node");
        let mut reactions = String::new();
        for k in 1..=2 * t {
            for id in ids {
                self.input(*id, &mut reactions, "", |n| {
                    n.tick();
                    Ok::<(), std::convert::Infallible>(())
                });
            }
            let campaigning = ids.iter().any(|id| {
                matches!(
                    self.live(*id).status().role,
                    Role::PreCandidate | Role::Candidate
                )
            });
            if campaigning {
                writeln!(out, "election timeout after {k} ticks").expect("write");
                out.push_str(&reactions);
                return;
            }
        }
        panic!("tick until=campaign: no election within 2T ticks");
    }

    /// Tick every live node and deliver until quiet, `n` times, printing only what the
    /// nodes did (no messages), each line prefixed with the round.
    fn cmd_run(&mut self, a: &Args, out: &mut String) {
        for k in 1..=a.req("n") {
            let mut round = String::new();
            for id in self.live_ids() {
                self.input(id, &mut round, "", |n| {
                    n.tick();
                    Ok::<(), std::convert::Infallible>(())
                });
            }
            self.quiet = true;
            self.cmd_stabilize(&mut round);
            self.quiet = false;
            for line in round.lines() {
                writeln!(out, "[{k}] {line}").expect("write");
            }
        }
    }

    /// Tick one node until its election timer fires: it sends a (pre-)vote request, or wins
    /// at once as the only voter. A leader's timer never fires.
    fn cmd_campaign(&mut self, a: &Args, out: &mut String) {
        let id = a.node(0);
        let t = self.configs[&id].election_timeout_ticks;
        let role_before = self.live(id).status().role;
        for k in 1..=2 * t {
            let sent_before = self.inflight.len();
            let mut reactions = String::new();
            self.input(id, &mut reactions, "", |n| {
                n.tick();
                Ok::<(), std::convert::Infallible>(())
            });
            let asked = self.inflight.iter().skip(sent_before).any(|m| {
                m.from == id && matches!(m.body, Body::PreVote { .. } | Body::RequestVote { .. })
            });
            if asked || self.live(id).status().role != role_before {
                writeln!(out, "{id}: election timeout after {k} ticks").expect("write");
                out.push_str(&reactions);
                return;
            }
        }
        panic!("campaign {id}: no election within 2T ticks");
    }

    fn cmd_deliver(&mut self, a: &Args, out: &mut String) {
        let from = a.num("from");
        let to = a.num("to");
        let only = a.links("only");
        let drop = a.links("drop").unwrap_or_default();
        let round: Vec<Message> = self.inflight.drain(..).collect();
        for m in round {
            let selected = from.is_none_or(|f| m.from == f)
                && to.is_none_or(|t| m.to == t)
                && only.as_ref().is_none_or(|o| o.contains(&(m.from, m.to)));
            if !selected {
                self.inflight.push_back(m);
                continue;
            }
            if drop.contains(&(m.from, m.to)) {
                writeln!(out, "{} (dropped)", fmt_message(&m)).expect("write");
                continue;
            }
            self.deliver_one(m, out);
        }
    }

    fn cmd_stabilize(&mut self, out: &mut String) {
        for _ in 0..100 {
            if self.inflight.is_empty() {
                return;
            }
            let round: Vec<Message> = self.inflight.drain(..).collect();
            for m in round {
                self.deliver_one(m, out);
            }
        }
        panic!("stabilize: the network never went quiet:\n{out}");
    }

    fn deliver_one(&mut self, m: Message, out: &mut String) {
        let line = fmt_message(&m);
        let quiet = self.quiet;
        if self.cut.contains(&(m.from, m.to)) {
            if !quiet {
                writeln!(out, "{line} (dropped: partition)").expect("write");
            }
            return;
        }
        if !matches!(self.nodes.get(&m.to), Some(Some(_))) {
            if !quiet {
                writeln!(out, "{line} (dropped: {} is down)", m.to).expect("write");
            }
            return;
        }
        if !quiet {
            writeln!(out, "{line}").expect("write");
        }
        let to = m.to;
        self.input(to, out, if quiet { "" } else { "  " }, |n| n.step(m));
    }

    fn cmd_propose(&mut self, a: &Args, out: &mut String) {
        let id = a.node(0);
        let election = || a.pos(2).to_owned();
        let value = || a.str("value").unwrap_or("").as_bytes().to_vec();
        let command = match a.pos(1) {
            "grant" => Command::Grant {
                ttl_ticks: a.req("ttl"),
            },
            "revoke" => Command::Revoke {
                session: a.req("session"),
            },
            "campaign" => Command::Campaign {
                election: election(),
                session: a.req("session"),
                value: value(),
            },
            "resign" => Command::Resign {
                election: election(),
                session: a.req("session"),
            },
            "put" => Command::FencedPut {
                key: a.pos(2).to_owned(),
                value: value(),
                election: a.str("election").expect("put needs election=").to_owned(),
                token: a.req("token"),
            },
            "get" => Command::Get {
                key: a.pos(2).to_owned(),
            },
            "leader" => Command::Leader {
                election: election(),
            },
            other => panic!("{}: unknown command {other}", a.line),
        };
        self.input(id, out, "", |n| {
            n.propose(command)
                .map(|p| format!("proposed {}@{}", p.index, p.term))
        });
    }

    fn cmd_log(&mut self, a: &Args, out: &mut String) {
        let n = self.live(a.node(0));
        let (si, st) = n.snapshot_meta();
        if si > 0 {
            writeln!(out, "snapshot {si}@{st}").expect("write");
        }
        for e in n.log_entries() {
            writeln!(out, "{}", fmt_entry(e)).expect("write");
        }
        if si == 0 && n.log_entries().is_empty() {
            writeln!(out, "(empty)").expect("write");
        }
    }

    // ----- driving one node ------------------------------------------------------------------

    fn live(&self, id: NodeId) -> &Node {
        self.nodes
            .get(&id)
            .and_then(Option::as_ref)
            .unwrap_or_else(|| panic!("node {id} is not running"))
    }

    fn live_ids(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// Feed one input to a node, handle its Ready, and describe what changed. An input the
    /// node refuses prints `error: …` and must change nothing observable.
    fn input<R, E>(
        &mut self,
        id: NodeId,
        out: &mut String,
        indent: &str,
        f: impl FnOnce(&mut Node) -> Result<R, E>,
    ) where
        R: ToReport,
        E: std::fmt::Display,
    {
        let node = self
            .nodes
            .get_mut(&id)
            .and_then(Option::as_mut)
            .unwrap_or_else(|| panic!("node {id} is not running"));
        let before = (node.status(), node.snapshot_meta());
        match f(node) {
            Ok(r) => {
                if let Some(report) = r.report() {
                    writeln!(out, "{indent}{report}").expect("write");
                }
            }
            Err(e) => {
                writeln!(out, "{indent}error: {e}").expect("write");
                let after = (node.status(), node.snapshot_meta());
                assert_eq!(before, after, "node {id}: a refused input changed the node");
                assert!(
                    !node.has_ready(),
                    "node {id}: a refused input produced a Ready"
                );
                return;
            }
        }
        node.check_invariants();
        let mut effects = String::new();
        self.handle_ready(id, &mut effects, indent);
        let node = self.live(id);
        if let Some(diff) = fmt_diff(&before, &(node.status(), node.snapshot_meta())) {
            writeln!(out, "{indent}{id}: {diff}").expect("write");
        }
        out.push_str(&effects);
    }

    /// Handle Ready without an input (after a restart).
    fn settle(&mut self, id: NodeId, out: &mut String, indent: &str) {
        self.handle_ready(id, out, indent);
    }

    /// The driver's loop: persist, advance, send, then hand results to clients.
    fn handle_ready(&mut self, id: NodeId, out: &mut String, indent: &str) {
        loop {
            let node = self
                .nodes
                .get_mut(&id)
                .and_then(Option::as_mut)
                .expect("running");
            if !node.has_ready() {
                return;
            }
            let ready = node.ready();
            self.disks
                .get_mut(&id)
                .expect("every node has a disk")
                .persist(&ready.persist);
            node.advance();
            node.check_invariants();
            if self.show_ready {
                write_ready(out, indent, id, &ready);
            } else {
                write_client_effects(out, indent, id, &ready);
            }
            self.inflight.extend(ready.then.messages);
        }
    }

    fn write_status(&self, id: NodeId, out: &mut String) {
        match self.nodes.get(&id) {
            Some(Some(n)) => {
                writeln!(out, "{}", fmt_status(&n.status(), n.snapshot_meta().0)).expect("write")
            }
            Some(None) => writeln!(out, "{id}: down").expect("write"),
            None => panic!("no node {id}"),
        }
    }
}

/// What a successful input reports on its own line.
trait ToReport {
    fn report(self) -> Option<String>;
}

impl ToReport for () {
    fn report(self) -> Option<String> {
        None
    }
}

impl ToReport for String {
    fn report(self) -> Option<String> {
        Some(self)
    }
}

// ----- formatting ----------------------------------------------------------------------------

fn write_ready(out: &mut String, indent: &str, id: NodeId, r: &Ready) {
    writeln!(out, "{indent}{id} ready:").expect("write");
    let i = format!("{indent}  ");
    if let Some(hs) = r.persist.hard_state {
        let vote = hs.vote.map_or("-".to_owned(), |v| v.to_string());
        writeln!(
            out,
            "{i}persist hard_state term={} vote={vote} commit={}",
            hs.term, hs.commit
        )
        .expect("write");
    }
    if let Some(s) = &r.persist.snapshot {
        writeln!(
            out,
            "{i}persist snapshot {}@{} {}",
            s.index,
            s.term,
            fmt_membership(&s.membership)
        )
        .expect("write");
    }
    if !r.persist.entries.is_empty() {
        writeln!(
            out,
            "{i}persist entries {}",
            fmt_entries(&r.persist.entries)
        )
        .expect("write");
    }
    for m in &r.then.messages {
        writeln!(out, "{i}send {}", fmt_message(m)).expect("write");
    }
    write_client_effects(out, &i, id, r);
}

fn write_client_effects(out: &mut String, indent: &str, id: NodeId, r: &Ready) {
    for e in &r.then.events {
        writeln!(out, "{indent}{id} event: {e}").expect("write");
    }
    for a in &r.then.applied {
        writeln!(
            out,
            "{indent}{id} applied {}@{} {} => {}",
            a.index,
            a.term,
            fmt_command(&a.command),
            fmt_response(&a.response)
        )
        .expect("write");
    }
    for c in &r.then.leader_changes {
        writeln!(out, "{indent}{id} {}", fmt_leader_change(c)).expect("write");
    }
    for k in &r.then.keepalive_acks {
        writeln!(
            out,
            "{indent}{id} acknowledges keepalive session={} tag={} ttl={}",
            k.session, k.tag, k.ttl_ticks
        )
        .expect("write");
    }
}

fn fmt_status(s: &Status, snapshot_index: u64) -> String {
    let mut line = format!(
        "{}: {:?} term={} vote={} leader={} commit={} applied={} last={}",
        s.id,
        s.role,
        s.term,
        opt(s.vote),
        opt(s.leader),
        s.commit,
        s.applied,
        s.last_index
    );
    if snapshot_index > 0 {
        write!(line, " snapshot={snapshot_index}").expect("write");
    }
    write!(line, " {}", fmt_membership(&s.membership)).expect("write");
    if let Some(t) = s.transferring_to {
        write!(line, " transferring_to={t}").expect("write");
    }
    if let Some(until) = s.lease_until_tick {
        let left = until.saturating_sub(s.now_tick);
        write!(line, " lease_ticks_left={left}").expect("write");
    }
    line
}

fn opt(v: Option<NodeId>) -> String {
    v.map_or("-".to_owned(), |v| v.to_string())
}

fn none(v: Option<NodeId>) -> String {
    v.map_or("none".to_owned(), |v| v.to_string())
}

fn fmt_ids(ids: &BTreeSet<NodeId>) -> String {
    let v: Vec<String> = ids.iter().map(u64::to_string).collect();
    format!("({})", v.join(","))
}

fn fmt_membership(m: &Membership) -> String {
    let mut s = format!("voters={}", fmt_ids(&m.voters));
    if m.is_joint() {
        write!(s, " outgoing={}", fmt_ids(&m.voters_outgoing)).expect("write");
    }
    if !m.learners.is_empty() {
        write!(s, " learners={}", fmt_ids(&m.learners)).expect("write");
    }
    s
}

/// The fields that changed between two observations of a node, or `None`.
fn fmt_diff(before: &(Status, (u64, u64)), after: &(Status, (u64, u64))) -> Option<String> {
    let ((b, bs), (a, as_)) = (before, after);
    let mut parts = Vec::new();
    if b.role != a.role {
        parts.push(format!("{:?}->{:?}", b.role, a.role));
    }
    if b.term != a.term {
        parts.push(format!("term {}->{}", b.term, a.term));
    }
    if b.vote != a.vote {
        parts.push(format!("vote {}->{}", none(b.vote), none(a.vote)));
    }
    if b.leader != a.leader {
        parts.push(format!("leader {}->{}", none(b.leader), none(a.leader)));
    }
    if b.last_index != a.last_index {
        parts.push(format!("last {}->{}", b.last_index, a.last_index));
    }
    if b.commit != a.commit {
        parts.push(format!("commit {}->{}", b.commit, a.commit));
    }
    if b.applied != a.applied {
        parts.push(format!("applied {}->{}", b.applied, a.applied));
    }
    if bs != as_ {
        parts.push(format!("snapshot {}@{}->{}@{}", bs.0, bs.1, as_.0, as_.1));
    }
    if b.membership != a.membership {
        parts.push(format!(
            "config {} -> {}",
            fmt_membership(&b.membership),
            fmt_membership(&a.membership)
        ));
    }
    if b.transferring_to != a.transferring_to {
        parts.push(format!(
            "transferring_to {}->{}",
            none(b.transferring_to),
            none(a.transferring_to)
        ));
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

fn fmt_message(m: &Message) -> String {
    let head = format!("{}->{} {} term={}", m.from, m.to, m.body.kind(), m.term);
    let tail = match &m.body {
        Body::PreVote {
            last_log_index,
            last_log_term,
        } => format!(" last={last_log_index}@{last_log_term}"),
        Body::RequestVote {
            last_log_index,
            last_log_term,
            transfer,
        } => format!(
            " last={last_log_index}@{last_log_term}{}",
            if *transfer { " transfer" } else { "" }
        ),
        Body::PreVoteResponse { granted } | Body::RequestVoteResponse { granted } => {
            if *granted { " granted" } else { " rejected" }.to_owned()
        }
        Body::AppendEntries {
            prev_log_index,
            prev_log_term,
            entries,
            leader_commit,
            ..
        } => {
            let mut s = format!(" prev={prev_log_index}@{prev_log_term}");
            if !entries.is_empty() {
                write!(s, " entries={}", fmt_entries(entries)).expect("write");
            }
            write!(s, " commit={leader_commit}").expect("write");
            s
        }
        Body::AppendEntriesResponse {
            success,
            match_index,
            hint,
            ..
        } => match (success, hint) {
            (true, _) => format!(" ok match={match_index}"),
            (false, None) => " rejected".to_owned(),
            (false, Some(h)) => match h.conflict_term {
                Some(t) => format!(
                    " rejected conflict_term={t} conflict_index={}",
                    h.conflict_index
                ),
                None => format!(" rejected conflict_index={}", h.conflict_index),
            },
        },
        Body::InstallSnapshot { snapshot, .. } => format!(
            " snapshot={}@{} {}",
            snapshot.index,
            snapshot.term,
            fmt_membership(&snapshot.membership)
        ),
        Body::TimeoutNow => String::new(),
    };
    head + &tail
}

fn fmt_entries(entries: &[Entry]) -> String {
    let v: Vec<String> = entries.iter().map(fmt_entry).collect();
    format!("[{}]", v.join(", "))
}

fn fmt_entry(e: &Entry) -> String {
    let what = match &e.payload {
        Payload::Noop => "Noop".to_owned(),
        Payload::Command(c) => fmt_command(c),
        Payload::Membership(m) => format!("Config({})", fmt_membership(m)),
        Payload::Request { id, command } => format!("{id:?} {}", fmt_command(command)),
    };
    format!("{}@{} {what}", e.index, e.term)
}

fn fmt_command(c: &Command) -> String {
    match c {
        Command::Sealed { command, .. } => format!("Sealed({})", fmt_command(command)),
        Command::Charged {
            principal, command, ..
        } => format!("Charged({principal}, {})", fmt_command(command)),
        Command::DeleteElection { election } => format!("DeleteElection({election})"),
        Command::DeleteKey {
            key,
            election,
            token,
        } => format!("DeleteKey({key}, {election}, {token})"),
        Command::Grant { ttl_ticks } => format!("Grant(ttl={ttl_ticks})"),
        Command::Revoke { session } => format!("Revoke({session})"),
        Command::Expire { session } => format!("Expire({session})"),
        Command::Release { session } => format!("Release({session})"),
        Command::Checkpoint { remaining } => {
            let v: Vec<String> = remaining.iter().map(|(s, r)| format!("{s}:{r}")).collect();
            format!("Checkpoint({})", v.join(","))
        }
        Command::Campaign {
            election,
            session,
            value,
        } => format!(
            "Campaign({election} session={session} value={})",
            String::from_utf8_lossy(value)
        ),
        Command::Resign { election, session } => format!("Resign({election} session={session})"),
        Command::Transfer { election, from, to } => {
            format!("Transfer({election} {from}->{to})")
        }
        Command::FencedPut {
            key,
            value,
            election,
            token,
        } => format!(
            "Put({key}={} {election} token={token})",
            String::from_utf8_lossy(value)
        ),
        Command::Get { key } => format!("Get({key})"),
        Command::Leader { election } => format!("Leader({election})"),
        Command::SetMember { node, addresses } => format!(
            "SetMember({node} peer={} client={} http={})",
            addresses.peer, addresses.client, addresses.http
        ),
    }
}

fn fmt_response(r: &Response) -> String {
    match r {
        Response::Granted { session, ttl_ticks } => {
            format!("Granted(session={session} ttl={ttl_ticks})")
        }
        Response::Ended { session } => format!("Ended({session})"),
        Response::Campaigned {
            leader_token,
            position,
        } => match leader_token {
            Some(t) => format!("Campaigned(leader token={t})"),
            None => format!("Campaigned(position={position})"),
        },
        Response::Rejected(e) => format!("Rejected({e})"),
        other => format!("{other:?}"),
    }
}

fn fmt_leader_change(c: &LeaderChange) -> String {
    match &c.leader {
        Some(l) => format!(
            "election {} led by session {} token={} (at {})",
            c.election, l.session, l.token, c.index
        ),
        None => format!("election {} has no leader (at {})", c.election, c.index),
    }
}
