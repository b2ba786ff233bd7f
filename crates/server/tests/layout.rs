//! The crate's layout is its architecture (`src/lib.rs`), and this test keeps it so: it
//! reads every file under `src/`, collects the crate modules each top-level module refers
//! to (`use crate::x::…`, `crate::x::…` in code; comments are not dependencies), and fails
//!
//! - if a reference names something at the crate root instead of the module that holds it
//!   (`crate::run` instead of `crate::server::run`): the root only declares and re-exports,
//!   and an edge through it would hide a dependency from this test;
//! - if the module graph has a cycle (each module depends only on modules below it);
//! - if the driver, the thread that owns the core, reaches a module above it: the gRPC API,
//!   HTTP, the dashboard or the connection layer, directly or through another module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules the driver must not reach, directly or not.
const ABOVE_THE_DRIVER: [&str; 4] = ["api", "http", "dashboard", "conn"];

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = module_graph(&src());
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "the modules of crates/server import each other in a circle: {}\n\nthe whole \
             graph:\n{}",
            cycle.join(" -> "),
            show(&graph)
        );
    }
}

#[test]
fn the_driver_imports_nothing_above_it() {
    let graph = module_graph(&src());
    assert!(
        graph.contains_key("driver"),
        "no driver module in {graph:?}"
    );
    let reached = reachable(&graph, "driver");
    let above: Vec<&str> = ABOVE_THE_DRIVER
        .into_iter()
        .filter(|m| reached.contains(*m))
        .collect();
    assert!(
        above.is_empty(),
        "the driver reaches {above:?} (it reaches {reached:?}); it may depend on leaf \
         modules such as metrics only, and publish through its traits (Outbox, EventSink)"
    );
}

/// The checks above see what they must: a cycle, and a path from the driver upwards.
#[test]
fn the_checks_catch_a_cycle_and_an_upward_import() {
    let graph: Graph = [
        ("driver", &["metrics"][..]),
        ("metrics", &["dashboard"][..]),
        ("dashboard", &["driver"][..]),
    ]
    .into_iter()
    .map(|(m, deps)| (m.to_string(), deps.iter().map(|d| d.to_string()).collect()))
    .collect();
    let cycle = find_cycle(&graph).expect("a cycle");
    assert_eq!(cycle.first(), cycle.last(), "{cycle:?}");
    assert_eq!(cycle.len(), 4, "{cycle:?}");
    assert!(reachable(&graph, "driver").contains("dashboard"));
    let refs = references("use crate::{driver::Input, http};\nlet x = crate::conn::Gate::new();");
    assert_eq!(refs, ["conn", "driver", "http"].map(String::from).into());
    assert!(references("// see crate::dashboard\n/// and [`crate::http`]").is_empty());
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Each top-level module (a file `src/x.rs` or a directory `src/x/`) and the top-level
/// modules its files refer to, itself excluded. The crate root, `lib.rs`, is not a module
/// here: it only declares the others and re-exports their items.
fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |file: &Path| -> String {
        let relative = file.strip_prefix(src).expect("under src");
        let first = relative.components().next().expect("a path");
        let name = first.as_os_str().to_string_lossy();
        name.strip_suffix(".rs").unwrap_or(&name).to_string()
    };
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(f))
        .filter(|m| m != "lib")
        .collect();
    let mut graph: Graph = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for file in &files {
        let module = module_of(file);
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable source file");
        for name in references(&text) {
            assert!(
                modules.contains(&name),
                "{}: `crate::{name}` names an item at the crate root; name the module that \
                 holds it instead (the root only re-exports)",
                file.display()
            );
            if name != module {
                graph.get_mut(&module).expect("listed").insert(name);
            }
        }
    }
    graph
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The names that follow `crate::` in `text`'s code (`crate::{a, b::c}` names `a` and `b`).
/// Lines that are comments, doc comments included, are skipped: a link in the docs is no
/// dependency.
fn references(text: &str) -> BTreeSet<String> {
    let code: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect();
    let code = code.join("\n");
    let mut names = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        // `$crate::` and `my_crate::` are other paths.
        if before.is_some_and(|c| c == '$' || c == '_' || c.is_alphanumeric()) {
            continue;
        }
        match rest.strip_prefix('{') {
            Some(group) => names.extend(group_heads(group)),
            None => {
                names.insert(ident(rest).to_string());
            }
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The first segment of each path in a `{a::b, c}` group (up to its closing brace).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut at_start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_start = true,
            c if at_start && !c.is_whitespace() => {
                heads.push(ident(&group[i..]).to_string());
                at_start = false;
            }
            _ => {}
        }
    }
    heads
}

fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c == '_' || c.is_alphanumeric()))
        .unwrap_or(text.len());
    &text[..end]
}

/// One cycle of `graph`, as the modules along it with the first repeated at the end.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        graph: &Graph,
        module: &str,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(module) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|m| m == module).expect("on the path");
                let mut cycle = path[from..].to_vec();
                cycle.push(module.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(module.to_string(), Mark::Open);
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(module.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut marks, &mut Vec::new()))
}

/// Every module `from` depends on, directly or not.
fn reachable(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(module) = todo.pop() {
        for next in graph.get(&module).into_iter().flatten() {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

fn show(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(m, deps)| {
            format!(
                "  {m} -> {}\n",
                deps.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect()
}
