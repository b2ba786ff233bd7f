//! Replays a scenario and prints its ballot log:
//! `cargo run -p tenure-ballot --example replay -- N SEED STEPS [START]` (START: `fresh`,
//! the default, or `term41`).
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let seed = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(7);
    let steps = args.get(3).cloned().unwrap_or_default();
    let start = match args.get(4).map_or(Ok(Default::default()), |s| s.parse()) {
        Ok(start) => start,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    match tenure_ballot::engine::Engine::replay_from(n, seed, start, &steps) {
        Ok(engine) => {
            for line in engine.log() {
                println!("{line}");
            }
            let view = engine.view();
            for node in &view.nodes {
                println!(
                    "node {} {} {} term {} vote {:?} app {:?}",
                    node.id, node.state, node.role, node.term, node.vote, node.app
                );
            }
            for t in &view.terms {
                println!("term {}: {}", t.term, t.outcome);
            }
            for m in &view.in_flight {
                println!("in flight #{}: {}", m.id, m.text);
            }
            println!("bully coordinators: {:?}", view.bully_coordinators);
            println!("fence: {:?}", view.fence);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
