//! Every `tenure` command that a doc shows in a shell code block parses.
//!
//! The docs read here are README.md, ARCHITECTURE.md, BENCHMARKS.md, docs/*.md and
//! clients/python/README.md. Their fenced blocks marked `sh`, `bash`, `shell`, `console`, or
//! not marked at all, are read as shell: backslash continuations join lines, comments are
//! dropped, a `$ ` prompt is taken off (in a `console` block only prompted lines are
//! commands), and a command is found wherever the shell would start one: at the start of a
//! line, after `;`, `&&`, `||`, `|`, `&`, `do`, `sudo`, `exec` or `VAR=value`, inside `$(…)`,
//! after the `--` of `kubectl exec … --` or `tenure run … --`, and inside `sh -c '…'`. The
//! binary is `tenure` (any path ending in it), or a variable the doc set to one
//! (`T=…/release/tenure`, then `$T status`). Variables the doc sets are expanded (`$N`
//! holding `--node …` flags is checked as those flags); variables it does not set, and
//! placeholders (`…`, `<ID>`), stand for values and are let through.
//!
//! Each command is checked twice against the binary itself (the crate has no library target,
//! so its clap parser is reached only through the binary):
//!
//! - from `tenure <subcommand…> --help`, asked once per subcommand path: each subcommand in
//!   the path exists, every `--flag` (and `-f`) is one the help lists, a command that needs a
//!   subcommand is given one, and one that takes no arguments is given none;
//! - when none of its words is a placeholder or an unknown variable, by clap itself: the
//!   command's own words followed by `--help`. Clap reads every word and parses every value
//!   (`--ttl 10s`, `--systems tenure,etcd`, a bench scenario, an `--inject-bug` name) before
//!   it reaches `--help`, where it prints help and exits 0 instead of running anything; a
//!   word it refuses fails first, with exit 2. One refusal is let through: an
//!   `--inject-bug` name that exists but whose switch only an `inject-bugs` build has (this
//!   test's binary is a plain build; a misspelt name is refused otherwise, and fails).
//!
//! A failure names the doc, the line and the command. Required flags are not checked: a
//! doc may leave out what the environment supplies (`TENURE_BACKEND`, …), and `--help`
//! stops clap before it looks for them. Shell inside YAML manifests is out of scope.

mod common;

use common::workspace;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// Code block languages read as shell; every other language is left alone.
const SHELL_LANGUAGES: &[&str] = &["", "sh", "bash", "shell", "console"];

/// Docs whose unmarked blocks are pictures, not shell (DESIGN.md's diagram has lines such as
/// `tenure cluster (3 or 5 …)`); their marked shell blocks are still read.
const DIAGRAM_DOCS: &[&str] = &["docs/DESIGN.md"];

/// Fewer commands than this means the extraction broke, not that the docs lost their examples.
const COMMANDS_MIN: usize = 60;

/// What `--inject-bug` says of a bug name that exists, in a build without its switches.
const INJECT_BUGS_BUILD: &str = "(build with --features inject-bugs)";

/// How long one `tenure … --help` may take: it only parses, so this is generous.
const PARSE_TIMEOUT: Duration = Duration::from_secs(30);

/// The docs this test reads, as paths relative to the workspace, in a stable order.
fn docs() -> Vec<String> {
    let mut docs: Vec<String> = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"]
        .map(String::from)
        .to_vec();
    let mut under_docs: Vec<String> = std::fs::read_dir(workspace().join("docs"))
        .expect("read docs/")
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    under_docs.sort();
    docs.extend(under_docs);
    docs.push("clients/python/README.md".to_string());
    docs
}

// ---------------------------------------------------------------------------------------
// Code blocks of a Markdown file.

/// One fenced code block.
struct Block {
    /// The info string's first word (`sh` of "```sh"), empty when there is none.
    language: String,
    /// The file line of the block's first line of content.
    first_line: usize,
    text: String,
}

fn blocks(doc: &str) -> Vec<Block> {
    let mut out = Vec::new();
    // The fence that opened the block being read (its character repeated), with the block.
    let mut open: Option<(String, Block)> = None;
    for (index, line) in doc.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.as_mut() {
            None => {
                let fence_char = match trimmed.chars().next() {
                    Some(c @ ('`' | '~')) => c,
                    _ => continue,
                };
                let fence: String = trimmed.chars().take_while(|&c| c == fence_char).collect();
                if fence.len() < 3 {
                    continue;
                }
                let info = trimmed[fence.len()..].trim();
                let language = info
                    .split(|c: char| c == ',' || c == '{' || c.is_whitespace())
                    .next()
                    .unwrap_or("")
                    .to_string();
                let block = Block {
                    language,
                    first_line: index + 2,
                    text: String::new(),
                };
                open = Some((fence, block));
            }
            Some((fence, block)) => {
                // The fence's character, at least as many times, and nothing else.
                let closes = trimmed.starts_with(fence.as_str())
                    && trimmed.trim_end().chars().all(|c| fence.starts_with(c));
                if closes {
                    out.push(open.take().expect("a block is open").1);
                } else {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
            }
        }
    }
    out
}

/// The block's shell text: a leading `$ ` prompt taken off; in a `console` block, lines that
/// are neither prompted nor the continuation of one are output and become empty (so that
/// line numbers still count from the block's start).
fn shell_text(block: &Block) -> String {
    let console = block.language == "console";
    let mut out = String::new();
    let mut continues = false;
    for line in block.text.lines() {
        let trimmed = line.trim_start();
        let command = if let Some(rest) = trimmed.strip_prefix("$ ") {
            Some(rest)
        } else if !console || continues {
            Some(line)
        } else {
            None
        };
        if let Some(command) = command {
            out.push_str(command);
            continues = command.trim_end().ends_with('\\');
        }
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------
// A small shell lexer: enough of sh to find where commands start and what their words are.

/// One word of a command, as the shell would pass it on.
#[derive(Clone, Debug)]
struct Word {
    /// The text without its quotes and escapes; expansions (`$N`, `$(…)`) kept as written.
    text: String,
    /// The text as written, quotes included: tells `$N` from `"$N"` and `'$N'`.
    raw: String,
    /// The file line the word starts on.
    line: usize,
    /// Holds an expansion outside single quotes, so its value is not known from the text.
    expands: bool,
}

#[derive(Debug)]
enum Token {
    Word(Word),
    /// Ends a command: a newline, `;`, `&`, `&&`, `||`, `|`, `(` or `)`.
    Separator,
    /// `>`, `2>`, `<`, …: `target` when the next word is the file (not so for `2>&1`).
    Redirect {
        target: bool,
    },
}

#[derive(Default)]
struct Lexed {
    tokens: Vec<Token>,
    /// The text inside each `$(…)`, with the line it starts on: scripts of their own.
    substitutions: Vec<(String, usize)>,
}

/// The end of the `$(…)` that starts at `chars[start]` (the index of its `)`), skipping
/// quoted text and nested parentheses; the end of the text if it never closes.
fn substitution_end(chars: &[char], start: usize) -> usize {
    let mut depth = 1;
    let mut quote: Option<char> = None;
    let mut i = start + 1;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some('\'') if c == '\'' => quote = None,
            Some('"') if c == '\\' => i += 1,
            Some('"') if c == '"' => quote = None,
            Some(_) => {}
            None => match c {
                '\\' => i += 1,
                '\'' | '"' => quote = Some(c),
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return i;
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    chars.len()
}

fn lex(script: &str, first_line: usize) -> Lexed {
    let chars: Vec<char> = script.chars().collect();
    let mut out = Lexed::default();
    let mut line = first_line;
    let mut word: Option<Word> = None;

    fn current(word: &mut Option<Word>, line: usize) -> &mut Word {
        word.get_or_insert_with(|| Word {
            text: String::new(),
            raw: String::new(),
            line,
            expands: false,
        })
    }
    fn finish(word: &mut Option<Word>, out: &mut Lexed) {
        if let Some(w) = word.take() {
            out.tokens.push(Token::Word(w));
        }
    }
    // `$(…)` at `chars[i]` (the `$`): kept in the word as written, its inside lexed later.
    // Returns the index after its `)` and the number of newlines inside.
    fn substitution(chars: &[char], i: usize, w: &mut Word, out: &mut Lexed) -> (usize, usize) {
        let end = substitution_end(chars, i + 1);
        let inside: String = chars[i + 2..end.min(chars.len())].iter().collect();
        let newlines = inside.matches('\n').count();
        w.text.push_str(&format!("$({inside})"));
        w.raw.push_str(&format!("$({inside})"));
        w.expands = true;
        out.substitutions.push((inside, w.line));
        (end + 1, newlines)
    }

    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\\' if next == Some('\n') => {
                line += 1;
                i += 2;
            }
            '\\' => {
                let w = current(&mut word, line);
                w.raw.push('\\');
                if let Some(n) = next {
                    w.text.push(n);
                    w.raw.push(n);
                }
                i += 2;
            }
            ' ' | '\t' | '\r' => {
                finish(&mut word, &mut out);
                i += 1;
            }
            '\n' => {
                finish(&mut word, &mut out);
                out.tokens.push(Token::Separator);
                line += 1;
                i += 1;
            }
            '#' if word.is_none() => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\'' => {
                let w = current(&mut word, line);
                w.raw.push('\'');
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    w.text.push(chars[i]);
                    w.raw.push(chars[i]);
                    i += 1;
                }
                w.raw.push('\'');
                i += 1;
            }
            '"' => {
                let w = current(&mut word, line);
                w.raw.push('"');
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    let d = chars[i];
                    let after = chars.get(i + 1).copied();
                    if d == '\\' && after == Some('\n') {
                        line += 1;
                        i += 2;
                    } else if d == '\\' && matches!(after, Some('"' | '\\' | '$' | '`')) {
                        w.text.push(after.expect("matched above"));
                        w.raw.push('\\');
                        w.raw.push(after.expect("matched above"));
                        i += 2;
                    } else if d == '$' && after == Some('(') {
                        let (end, newlines) = substitution(&chars, i, w, &mut out);
                        line += newlines;
                        i = end;
                    } else {
                        if d == '\n' {
                            line += 1;
                        }
                        w.expands |= d == '$';
                        w.text.push(d);
                        w.raw.push(d);
                        i += 1;
                    }
                }
                w.raw.push('"');
                i += 1;
            }
            '$' if next == Some('(') => {
                let w = current(&mut word, line);
                let (end, newlines) = substitution(&chars, i, w, &mut out);
                line += newlines;
                i = end;
            }
            ';' | '&' | '|' | '(' | ')' => {
                finish(&mut word, &mut out);
                out.tokens.push(Token::Separator);
                // `&&`, `||` and `;;` are one operator.
                i += if matches!(c, '&' | '|' | ';') && next == Some(c) {
                    2
                } else {
                    1
                };
            }
            '<' | '>' => {
                // A file descriptor number right before (`2>`) belongs to the redirection.
                let fd = word.as_ref().is_some_and(|w| {
                    !w.raw.is_empty() && w.raw.chars().all(|d| d.is_ascii_digit())
                });
                if fd {
                    word = None;
                } else {
                    finish(&mut word, &mut out);
                }
                while i < chars.len() && matches!(chars[i], '<' | '>' | '|') {
                    i += 1;
                }
                let mut target = true;
                if chars.get(i) == Some(&'&') {
                    i += 1;
                    while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '-') {
                        i += 1;
                    }
                    target = false;
                }
                out.tokens.push(Token::Redirect { target });
            }
            _ => {
                let w = current(&mut word, line);
                w.expands |= c == '$';
                w.text.push(c);
                w.raw.push(c);
                i += 1;
            }
        }
    }
    finish(&mut word, &mut out);
    out
}

/// The tokens cut into commands: lists of words, redirections and their files left out.
fn commands(tokens: Vec<Token>) -> Vec<Vec<Word>> {
    let mut out = Vec::new();
    let mut command = Vec::new();
    let mut skip_next_word = false;
    for token in tokens {
        match token {
            Token::Word(_) if skip_next_word => skip_next_word = false,
            Token::Word(w) => command.push(w),
            Token::Redirect { target } => skip_next_word = target,
            Token::Separator => {
                skip_next_word = false;
                if !command.is_empty() {
                    out.push(std::mem::take(&mut command));
                }
            }
        }
    }
    if !command.is_empty() {
        out.push(command);
    }
    out
}

// ---------------------------------------------------------------------------------------
// Finding the `tenure` commands of a doc.

/// One argument of a `tenure` command, after the doc's variables are expanded.
#[derive(Clone, Debug, PartialEq)]
struct Arg {
    text: String,
    /// A placeholder or an unknown variable: stands for some value, maybe for several words.
    vague: bool,
}

/// A `tenure` command a doc shows.
#[derive(Debug)]
struct DocCommand {
    /// The doc's path relative to the workspace.
    doc: String,
    line: usize,
    /// The arguments after the binary, up to a `--` (what follows it is not tenure's).
    args: Vec<Arg>,
}

impl DocCommand {
    fn shown(&self) -> String {
        let words: Vec<&str> = self.args.iter().map(|a| a.text.as_str()).collect();
        format!("tenure {}", words.join(" "))
    }
}

/// A variable a doc sets (`N="--node …"`, `T=…/tenure`).
#[derive(Clone)]
struct Var {
    value: String,
    /// Its value holds an expansion of its own, so it is not known here.
    expands: bool,
}

/// `NAME` of a word written `NAME=value`.
fn assigned_name(w: &Word) -> Option<&str> {
    let (name, _) = w.raw.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    let valid = (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
}

/// `NAME` of a word that is one variable: `$NAME`, `${NAME}`, or either in double quotes.
fn variable_name(raw: &str) -> Option<(&str, bool)> {
    let (inner, quoted) = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) => (inner, true),
        None => (raw, false),
    };
    let name = inner.strip_prefix('$')?;
    let name = match name.strip_prefix('{') {
        Some(braced) => braced.strip_suffix('}')?,
        None => name,
    };
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some((name, quoted))
}

/// A word that stands for a value: `…`, `...`, `<ID>`, or a text with `…` in it.
fn is_placeholder(text: &str) -> bool {
    text == "..." || text.contains('…') || (text.starts_with('<') && text.ends_with('>'))
}

/// Walks a doc's shell blocks in order, keeping the variables it sets.
#[derive(Default)]
struct Finder {
    vars: HashMap<String, Var>,
}

impl Finder {
    fn script(&mut self, doc: &str, script: &str, first_line: usize, found: &mut Vec<DocCommand>) {
        let lexed = lex(script, first_line);
        for command in commands(lexed.tokens) {
            self.command(doc, &command, found);
        }
        for (inside, line) in lexed.substitutions {
            self.script(doc, &inside, line, found);
        }
    }

    fn command(&mut self, doc: &str, words: &[Word], found: &mut Vec<DocCommand>) {
        let mut rest = words;
        // Assignments and the words that run the command after them.
        loop {
            let Some(first) = rest.first() else { return };
            if let Some(name) = assigned_name(first) {
                let value = first.text[name.len() + 1..].to_string();
                let var = Var {
                    value,
                    expands: first.expands,
                };
                self.vars.insert(name.to_string(), var);
                rest = &rest[1..];
                continue;
            }
            match first.raw.as_str() {
                "export" | "readonly" | "local" => {
                    for w in &rest[1..] {
                        if let Some(name) = assigned_name(w) {
                            let value = w.text[name.len() + 1..].to_string();
                            let var = Var {
                                value,
                                expands: w.expands,
                            };
                            self.vars.insert(name.to_string(), var);
                        }
                    }
                    return;
                }
                "sudo" | "env" => {
                    rest = &rest[1..];
                    while rest.first().is_some_and(|w| w.raw.starts_with('-')) {
                        rest = &rest[1..];
                    }
                }
                "exec" | "time" | "nohup" | "do" | "then" | "else" | "!" | "{" => {
                    rest = &rest[1..];
                }
                _ => break,
            }
        }
        let program = &rest[0];
        let after = &rest[1..];
        let end = after.iter().position(|w| w.raw == "--");
        if self.is_tenure(program) {
            let args = after[..end.unwrap_or(after.len())]
                .iter()
                .flat_map(|w| self.expand(w))
                .collect();
            found.push(DocCommand {
                doc: doc.to_string(),
                line: program.line,
                args,
            });
        }
        // What follows a `--` is often a command of its own: `kubectl exec pod -- tenure …`,
        // `tenure run … -- sh -c '…'`.
        if let Some(end) = end {
            self.command(doc, &after[end + 1..], found);
        }
        let shell = Path::new(&program.text)
            .file_name()
            .is_some_and(|n| matches!(n.to_str(), Some("sh" | "bash" | "zsh" | "dash")));
        if shell {
            let scripts = after.windows(2).filter(|pair| pair[0].raw == "-c");
            for pair in scripts {
                self.script(doc, &pair[1].text, pair[1].line, found);
            }
        }
    }

    /// The binary: a path ending in `tenure`, or a variable the doc set to such a path (a
    /// copy's name may go on: `B=/tmp/tenure-bench-bin`; a URL is no binary).
    fn is_tenure(&self, w: &Word) -> bool {
        let named = |path: &str, prefix: bool| {
            let base = path.rsplit('/').next().unwrap_or(path);
            !path.contains("://")
                && if prefix {
                    base.starts_with("tenure")
                } else {
                    base == "tenure"
                }
        };
        match variable_name(&w.raw) {
            Some((name, _)) => self.vars.get(name).is_some_and(|v| named(&v.value, true)),
            None => !w.expands && named(&w.text, false),
        }
    }

    /// A word as the arguments it becomes: a variable the doc set is expanded (unquoted, it
    /// splits at whitespace); an unknown one, or a placeholder, is vague.
    fn expand(&self, w: &Word) -> Vec<Arg> {
        match variable_name(&w.raw) {
            Some((name, quoted)) => match self.vars.get(name) {
                Some(var) if quoted => vec![Arg {
                    text: var.value.clone(),
                    vague: var.expands,
                }],
                Some(var) => var
                    .value
                    .split_whitespace()
                    .map(|piece| Arg {
                        text: piece.to_string(),
                        vague: var.expands || is_placeholder(piece),
                    })
                    .collect(),
                None => vec![Arg {
                    text: w.raw.clone(),
                    vague: true,
                }],
            },
            None => vec![Arg {
                text: w.text.clone(),
                vague: w.expands || is_placeholder(&w.text),
            }],
        }
    }
}

/// The `tenure` commands of one doc's shell blocks.
fn doc_commands(doc: &str, text: &str) -> Vec<DocCommand> {
    let mut finder = Finder::default();
    let mut found = Vec::new();
    for block in blocks(text) {
        if !SHELL_LANGUAGES.contains(&block.language.as_str()) {
            continue;
        }
        if block.language.is_empty() && DIAGRAM_DOCS.contains(&doc) {
            continue;
        }
        finder.script(doc, &shell_text(&block), block.first_line, &mut found);
    }
    found.sort_by_key(|c| c.line);
    found
}

// ---------------------------------------------------------------------------------------
// What the binary accepts.

/// What `tenure <path> --help` says a command accepts.
#[derive(Debug, Default)]
struct Help {
    subcommands: BTreeSet<String>,
    /// Long flags without their dashes, each with whether it takes a value (`--out <FILE>`).
    longs: BTreeMap<String, bool>,
    shorts: BTreeMap<char, bool>,
    /// Has an Arguments section: takes positional arguments.
    takes_arguments: bool,
    /// Every usage line ends in `<COMMAND>`: runs nothing without a subcommand.
    needs_subcommand: bool,
}

fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut usage: Vec<&str> = Vec::new();
    let mut in_usage = false;
    let mut section = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Usage: ") {
            usage.push(rest);
            in_usage = true;
            continue;
        }
        if in_usage && line.starts_with("       ") {
            usage.push(line.trim());
            continue;
        }
        in_usage = false;
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line;
            continue;
        }
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match section {
            "Commands:" if indent == 2 => {
                if let Some(name) = trimmed.split_whitespace().next() {
                    help.subcommands.insert(name.to_string());
                }
            }
            "Arguments:" => help.takes_arguments |= indent == 2 && trimmed.starts_with(['<', '[']),
            // Options, and any heading a command gives its own flags: a flag's line starts
            // at column 2 (`-h, --help`) or 6 (`--out <FILE>`); its description is deeper.
            _ if (indent == 2 || indent == 6) && trimmed.starts_with('-') => {
                let head = trimmed.split("  ").next().unwrap_or(trimmed);
                let takes_value = head.contains(" <");
                for part in head.split(", ") {
                    let name = part.split([' ', '=']).next().unwrap_or(part);
                    if let Some(long) = name.strip_prefix("--") {
                        help.longs.insert(long.to_string(), takes_value);
                    } else if let Some(short) =
                        name.strip_prefix('-').and_then(|s| s.chars().next())
                    {
                        help.shorts.insert(short, takes_value);
                    }
                }
            }
            _ => {}
        }
    }
    help.needs_subcommand = !usage.is_empty() && usage.iter().all(|u| u.contains("<COMMAND>"));
    help
}

/// The binary, asked once per subcommand path and once per distinct command.
#[derive(Default)]
struct Tenure {
    helps: HashMap<Vec<String>, Help>,
    parses: HashMap<Vec<String>, Result<(), String>>,
    /// How many commands clap itself parsed (the rest had placeholders).
    parsed_by_clap: usize,
}

/// Runs the binary with `args`, TENURE_* variables removed, with a time limit; its exit
/// code (None if killed), stdout and stderr.
fn run_tenure(args: &[String]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TENURE_") {
            cmd.env_remove(key);
        }
    }
    let mut child = cmd.spawn().expect("start tenure");
    let started = Instant::now();
    // The output is small (a help text or an error); it fits the pipes while we wait.
    loop {
        if child.try_wait().expect("wait for tenure").is_some() {
            break;
        }
        if started.elapsed() > PARSE_TIMEOUT {
            // `--help` should have stopped it at once: it went on to run the command.
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = child.wait_with_output().expect("collect tenure's output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

impl Tenure {
    fn help(&mut self, path: &[String]) -> &Help {
        self.helps.entry(path.to_vec()).or_insert_with(|| {
            let mut args = path.to_vec();
            args.push("--help".to_string());
            let (code, stdout, stderr) = run_tenure(&args);
            assert_eq!(code, Some(0), "tenure {}: {stderr}", args.join(" "));
            parse_help(&stdout)
        })
    }

    /// Checks a command against the help of each subcommand on its path; the first problem.
    fn check_against_help(&mut self, args: &[Arg]) -> Result<(), String> {
        let mut path: Vec<String> = Vec::new();
        // A positional argument was given at this level: no subcommand may follow.
        let mut positional = false;
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            let command = format!("tenure {}", path.join(" ")).trim_end().to_string();
            let help = self.help(&path);
            let wants_subcommand = !help.subcommands.is_empty() && !positional;
            i += 1;
            if let Some(flag) = arg.text.strip_prefix("--").filter(|f| !f.is_empty()) {
                let (name, inline_value) = match flag.split_once('=') {
                    Some((name, _)) => (name, true),
                    None => (flag, false),
                };
                match help.longs.get(name) {
                    None => {
                        let known: Vec<String> =
                            help.longs.keys().map(|l| format!("--{l}")).collect();
                        return Err(format!(
                            "`{command}` has no flag --{name} (it has {})",
                            known.join(" ")
                        ));
                    }
                    Some(&takes_value) if takes_value && !inline_value => i += 1,
                    Some(_) => {}
                }
                continue;
            }
            let is_short = arg.text.starts_with('-')
                && arg.text.len() > 1
                && !arg.text[1..].starts_with(|c: char| c.is_ascii_digit());
            if is_short && !arg.vague {
                let cluster: Vec<char> = arg.text[1..].chars().collect();
                for (at, short) in cluster.iter().enumerate() {
                    match help.shorts.get(short) {
                        None => return Err(format!("`{command}` has no flag -{short}")),
                        Some(&true) => {
                            // The rest of the cluster is the value, or else the next word.
                            if at + 1 == cluster.len() {
                                i += 1;
                            }
                            break;
                        }
                        Some(&false) => {}
                    }
                }
                continue;
            }
            if arg.vague {
                if wants_subcommand {
                    // It may name the subcommand: what follows cannot be checked.
                    return Ok(());
                }
                // It may be a value, or flags (`$NODES`): let through.
                continue;
            }
            if wants_subcommand {
                if arg.text == "help" {
                    return Ok(());
                }
                if help.subcommands.contains(&arg.text) {
                    path.push(arg.text.clone());
                    positional = false;
                    continue;
                }
                if !help.takes_arguments {
                    let known: Vec<&str> = help
                        .subcommands
                        .iter()
                        .map(String::as_str)
                        .filter(|s| *s != "help")
                        .collect();
                    return Err(format!(
                        "`{command}` has no subcommand {:?} (it has {})",
                        arg.text,
                        known.join(", ")
                    ));
                }
            } else if !help.takes_arguments {
                return Err(format!(
                    "`{command}` takes no argument, but is given {:?}",
                    arg.text
                ));
            }
            positional = true;
        }
        let command = format!("tenure {}", path.join(" ")).trim_end().to_string();
        let help = self.help(&path);
        if help.needs_subcommand {
            let known: Vec<&str> = help
                .subcommands
                .iter()
                .map(String::as_str)
                .filter(|s| *s != "help")
                .collect();
            return Err(format!(
                "`{command}` needs a subcommand (one of {})",
                known.join(", ")
            ));
        }
        Ok(())
    }

    /// Has clap parse the command's words: they, then `--help`, which stops it before it runs.
    fn check_with_clap(&mut self, args: &[Arg]) -> Result<(), String> {
        let words: Vec<String> = args.iter().map(|a| a.text.clone()).collect();
        if let Some(known) = self.parses.get(&words) {
            return known.clone();
        }
        self.parsed_by_clap += 1;
        let mut with_help = words.clone();
        with_help.push("--help".to_string());
        let (code, stdout, stderr) = run_tenure(&with_help);
        let result = match code {
            Some(0) if stdout.contains("Usage: tenure") => Ok(()),
            Some(0) => Err("it ran instead of stopping at --help".to_string()),
            None => Err("it ran instead of stopping at --help (killed)".to_string()),
            // A bug switch of the core or the log is a real name that only a build with the
            // `inject-bugs` feature accepts (README.md says so beside its `--inject-bug`
            // example); this test's binary is a plain build. A misspelt name is refused
            // with another message, and still fails.
            Some(2) if stderr.contains(INJECT_BUGS_BUILD) => Ok(()),
            Some(code) => {
                let first = stderr.lines().next().unwrap_or("");
                Err(format!("clap refuses it (exit {code}): {first}"))
            }
        };
        self.parses.insert(words, result.clone());
        result
    }

    /// The problem with a command, if any, as `doc:line: `command`: what`.
    fn check(&mut self, command: &DocCommand) -> Option<String> {
        let mut result = self.check_against_help(&command.args);
        if result.is_ok() && command.args.iter().all(|a| !a.vague) {
            result = self.check_with_clap(&command.args);
        }
        result.err().map(|why| {
            format!(
                "{}:{}: `{}`: {why}",
                command.doc,
                command.line,
                command.shown()
            )
        })
    }
}

// ---------------------------------------------------------------------------------------
// The tests.

#[test]
fn every_tenure_command_in_the_docs_parses() {
    let mut tenure = Tenure::default();
    let mut problems = Vec::new();
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut total = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(workspace().join(&doc))
            .unwrap_or_else(|e| panic!("read {doc}: {e}"));
        let found = doc_commands(&doc, &text);
        total += found.len();
        problems.extend(found.iter().filter_map(|c| tenure.check(c)));
        counts.push((doc, found.len()));
    }
    let summary: Vec<String> = counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(doc, n)| format!("{doc} {n}"))
        .collect();
    println!(
        "{total} commands from {} docs ({}), {} subcommand paths asked for help, {} commands \
         parsed by clap",
        summary.len(),
        summary.join(", "),
        tenure.helps.len(),
        tenure.parsed_by_clap,
    );
    assert!(
        problems.is_empty(),
        "{} doc command(s) the binary does not accept:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        total >= COMMANDS_MIN,
        "only {total} tenure commands found in the docs (at least {COMMANDS_MIN} expected): \
         the extraction is broken"
    );
}

/// Test the tester: commands the binary would refuse are reported with their doc and line.
#[test]
fn a_wrong_flag_subcommand_or_value_is_reported_with_its_line() {
    let doc = "\
Intro.

```sh
T=./target/debug/tenure
tenure status --no-such-flag
kubectl -n tenure exec tenure-admin -- tenure members ad 4
$T leader --election e --jsn
tenure members
tenure sim --inject-bug no-such-bug
tenure status --json   # fine
tenure sim --inject-bug double-vote   # fine: a core bug, refused only for want of the feature
```

```rust
tenure status --not-shell
```
";
    let mut tenure = Tenure::default();
    let problems: Vec<String> = doc_commands("FAKE.md", doc)
        .iter()
        .filter_map(|c| tenure.check(c))
        .collect();
    let expected = [
        ("FAKE.md:5:", "has no flag --no-such-flag"),
        ("FAKE.md:6:", "has no subcommand \"ad\""),
        ("FAKE.md:7:", "has no flag --jsn"),
        ("FAKE.md:8:", "needs a subcommand"),
        ("FAKE.md:9:", "clap refuses it"),
    ];
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for ((at, what), problem) in expected.iter().zip(&problems) {
        assert!(
            problem.starts_with(at) && problem.contains(what),
            "{problem}"
        );
    }
}

/// The extraction itself: where commands start, what their words are.
#[test]
fn commands_are_found_where_the_shell_would_start_them() {
    let doc = r#"
```sh
N="--node 1=a \
   --node 2=b"
for i in 1 2; do tenure server --id $i $N --data-dir /tmp/t-$i > /tmp/t-$i.log 2>&1 & done
TENURE_CA=ca.pem sudo tenure status | head -3   # tenure not-this
x=$(tenure leader --election e --json) && echo "$x"
tenure run --election e -- sh -c 'tenure put k "$(date)" --election e'
tenure backup \
  --out f
echo tenure not-a-command; ./target/release/tenure elections
B=tenure://127.0.0.1:8001
$B status
```

```console
$ tenure get k
token=1 election=e index=3 value=v
tenure output-not-a-command
```
"#;
    let shown: Vec<(usize, String)> = doc_commands("FAKE.md", doc)
        .iter()
        .map(|c| (c.line, c.shown()))
        .collect();
    let expected = [
        (
            5,
            "tenure server --id $i --node 1=a --node 2=b --data-dir /tmp/t-$i",
        ),
        (6, "tenure status"),
        (7, "tenure leader --election e --json"),
        (8, "tenure run --election e"),
        (8, "tenure put k $(date) --election e"),
        (9, "tenure backup --out f"),
        (11, "tenure elections"),
        (17, "tenure get k"),
    ];
    let expected: Vec<(usize, String)> = expected
        .iter()
        .map(|(line, text)| (*line, text.to_string()))
        .collect();
    assert_eq!(shown, expected);
}
