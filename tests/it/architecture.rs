//! The floor plan, enforced (`docs/architecture.md`): reads `src/**/*.rs` and fails on
//!
//! - an import that goes up a floor, or across between `permission` and `agent`;
//! - an import of `http` from anywhere but `server`, of the clients (`client`) from anywhere but
//!   the terminal client `tui`, or of `demo_agent`, `service` or `tui` from inside the library;
//! - a cycle between files (through `crate::`, `super::` and `self::` paths);
//! - `axum`, `tower_http` or `hyper` named outside `src/http/` (hyper's client also in the
//!   clients, `src/client/`, and in the daemon's one outgoing client, `src/outgoing.rs`);
//! - a database driver named outside its dialect: `rusqlite` outside `src/store/sqlite.rs`,
//!   `tokio_postgres`, `deadpool_postgres` or `postgres_types` outside `src/store/postgres/` (the
//!   writer, the queue and the rest of the store name no database; the daemon sees `store::Store`);
//! - the fleet's trait (`store::Fleet`) implemented outside `src/store/postgres/` (a test double in
//!   a `mod tests` aside): a store of one daemon has no fleet, rather than one that answers nothing;
//! - a top-level module that has not been given a floor;
//! - in the binary (`main.rs` and its commands under `cli/`), a `crate::` path out of `cli/` (the
//!   binary reaches the library through `mediatord::`), or a `main.rs` past [`MAIN_LINES`];
//! - in a door (`src/http/`, `src/door/`), a registration, subscription, vote or device bound
//!   called on anything but the front desk (`src/desk/`): who is registered, with which role,
//!   within which bounds, and how a vote is cast are decided there, once, for every door.
//!
//! Paths are read from the code with comments and string literals blanked out, so a doc link or a
//! message naming a module is not an import. The checker's own tests below feed it violations.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module's floor. A module may import modules on lower floors, and files of its own
/// folder; leaves (floor 0) may also import other leaves.
const FLOORS: &[(&str, u8)] = &[
    ("clock", 0),
    ("config", 0),
    ("event", 0),
    ("exec", 0),
    ("metrics", 0),
    ("path", 0),
    ("confine", 0),
    ("peer", 0),
    ("environ", 0),
    ("sync", 0),
    ("scratch", 0),
    ("bounds", 0),
    ("service", 0),
    ("throttle", 0),
    ("text", 0),
    ("present", 0),
    ("audit", 0),
    ("transcript", 0),
    ("log_throttle", 0),
    ("tls", 0),
    // The daemon's one outgoing HTTP client: notifications and model reviewers send through it.
    ("outgoing", 0),
    ("discovery", 0),
    // Beside the house with `tui`, its only importer in the library (and the binary's).
    ("client", 2),
    ("acp", 1),
    ("store", 1),
    ("agent", 2),
    ("permission", 2),
    ("demo_agent", 2),
    ("notify", 2),
    ("changes", 2),
    ("devices", 2),
    // A reviewer's program is started as an agent is, and its verdicts are the mediator's
    // ballots: above both, below the daemon that hands each session its reviewers.
    ("review", 3),
    // Sign-in with an OpenID provider: what a sign-in pays for is a device, and it asks the
    // provider through the daemon's outgoing client; the daemon renews through it.
    ("oidc", 3),
    ("daemon", 4),
    ("desk", 5),
    ("door", 6),
    ("fleet", 6),
    ("http", 7),
    ("server", 8),
    ("tui", 8),
];

/// Database drivers, and the one module (its dialect of the store's writer, a file or a folder)
/// that may name each.
const STORE_CRATES: [(&str, &str); 4] = [
    ("rusqlite", "store/sqlite"),
    ("tokio_postgres", "store/postgres"),
    ("deadpool_postgres", "store/postgres"),
    ("postgres_types", "store/postgres"),
];

/// What only a store several daemons share implements (`store::Fleet`), and the one module that
/// may: SQLite and the memory store have no fleet, rather than an empty one.
const FLEET_TRAIT: (&str, &str) = ("Fleet", "store/postgres");

/// Methods only the front desk calls: registering a client, subscribing to a session, voting,
/// and a device's bounds. A door calls the desk's own (`desk.join`, `desk.subscribe`, `desk.vote`,
/// `desk.open_connection`, …), never these on a session, a mediator or the devices.
const DESK_ONLY: [&str; 8] = [
    "register",
    "remove_client",
    "subscribe",
    "vote",
    "open_stream",
    "open_connection",
    "attach_session",
    "forget_voter",
];

/// The binary's root declares its commands (`cli/`, one file each) and calls them; no more.
const MAIN_LINES: usize = 60;

/// Crates only the HTTP floor may name.
const HTTP_CRATES: [&str; 3] = ["axum", "tower_http", "hyper"];

fn floor(module: &str) -> Option<u8> {
    FLOORS.iter().find(|(m, _)| *m == module).map(|(_, f)| *f)
}

/// Whether `file` is the binary's (`main.rs` and the commands it declares, `cli/`), not the
/// library's: above every floor, it has none.
fn in_binary(file: &Path) -> bool {
    file == Path::new("main.rs") || file.starts_with("cli")
}

/// `src/`'s Rust files (the binary's `main.rs` and the crate root `lib.rs` included).
fn sources() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                out.push((path.strip_prefix(&root).expect("under src").to_path_buf(), text));
            }
        }
    }
    out.sort();
    assert!(out.len() > 20, "src/ read: {} files", out.len());
    out
}

/// The module path of a file under `src/`: `daemon/session.rs` → `["daemon", "session"]`,
/// `daemon/mod.rs` → `["daemon"]`, `lib.rs` → `[]`.
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts
}

/// `source` with comments, string and char literals replaced by spaces (line breaks kept).
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident_char(chars.get(i.wrapping_sub(1)))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let rest: String = chars[j + 1..].iter().collect();
            let len = rest.find(&close).map_or(rest.chars().count(), |at| rest[..at].chars().count());
            let end = (j + 1 + len + close.chars().count()).min(chars.len());
            out.extend(chars[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                out.extend(chars[i..(i + skip).min(chars.len())].iter().map(|&c| blank(c)));
                i += skip;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal (a lifetime has no closing quote right after one character).
            let end = if next == Some('\\') {
                (i + 2..chars.len()).find(|&k| chars[k] == '\'').map_or(chars.len(), |k| k + 1)
            } else {
                i + 3
            };
            out.extend(std::iter::repeat_n(' ', end - i));
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Every path in `code` that starts at `root` (`crate`, `super`, `self`), with `use` groups
/// expanded: `use crate::{a::b, c}` gives `crate::a::b` and `crate::c`. Each path is its segments
/// after the root, up to the first non-path token.
fn paths_from(code: &str, root: &str) -> Vec<Vec<String>> {
    located_paths(code, root).into_iter().map(|(_, path)| path).collect()
}

/// [`paths_from`], each path with the byte offset of its root.
fn located_paths(code: &str, root: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let needle = format!("{root}::");
    let mut from = 0;
    while let Some(at) = code[from..].find(&needle) {
        let start = from + at;
        from = start + needle.len();
        let before = code[..start].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut paths = Vec::new();
        collect_tree(&code[from..], &mut Vec::new(), &mut paths);
        out.extend(paths.into_iter().map(|p| (start, p)));
    }
    out
}

/// The inline modules of `code` (`mod tests { … }`): each one's name and byte range.
fn inline_modules(code: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("mod ") {
        let start = from + at;
        from = start + 4;
        if start > 0 && ident_char(code[..start].chars().last().as_ref()) {
            continue;
        }
        let rest = &code[from..];
        let name: String =
            rest.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let after = rest.trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue; // `mod x;`: a file of its own
        }
        let open = code.len() - after.len();
        let mut depth = 0;
        let close = code[open..]
            .char_indices()
            .find_map(|(k, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                (depth == 0).then_some(open + k)
            })
            .unwrap_or(code.len());
        out.push((name, open..close));
    }
    out
}

/// The child modules a folder's `mod.rs` (or the root) declares with `mod x;`.
fn declared_children(code: &str) -> Vec<String> {
    code.split(';')
        .filter_map(|stmt| {
            let words: Vec<&str> = stmt.split_whitespace().collect();
            match words.as_slice() {
                [.., "mod", name] => Some((*name).to_owned()),
                _ => None,
            }
        })
        .collect()
}

/// Reads `a::b::{c, d::e}` (and chains of `super::super::`) from the start of `text`, pushing
/// each full path onto `out`.
fn collect_tree(text: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        let mut depth = 0;
        let mut item = String::new();
        let mut items = Vec::new();
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut item));
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        items.push(item);
        for item in items.iter().filter(|i| !i.trim().is_empty()) {
            let mut inner = prefix.clone();
            collect_tree(item, &mut inner, out);
        }
        return;
    }
    let ident: String = text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    if ident.is_empty() {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return;
    }
    prefix.push(ident.clone());
    let rest = &text[ident.len()..];
    match rest.strip_prefix("::") {
        Some(rest) => collect_tree(rest, prefix, out),
        None => out.push(prefix.clone()),
    }
}

/// An import found in a file: where it leads (a module path under `crate`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    target: Vec<String>,
}

/// The imports of the file at module path `module` (`is_dir_module`: a folder's `mod.rs` or the
/// crate root, whose children are named without a prefix).
fn imports(module: &[String], is_dir_module: bool, source: &str) -> Vec<Import> {
    let code = code_only(source);
    let inline = inline_modules(&code);
    let mut found: Vec<Import> =
        paths_from(&code, "crate").into_iter().map(|target| Import { target }).collect();
    // `super::` names the parent of the module the path sits in (inline `mod tests` included).
    for (at, path) in located_paths(&code, "super") {
        let mut base: Vec<String> = module.to_vec();
        base.extend(inline.iter().filter(|(_, r)| r.contains(&at)).map(|(name, _)| name.clone()));
        base.pop();
        let mut rest = path.as_slice();
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        found.push(Import { target: base });
    }
    // A folder's mod.rs names its own children with `self::` or bare (`api::router()`).
    if is_dir_module {
        let children = declared_children(&code);
        let roots = std::iter::once("self".to_owned()).chain(children.iter().cloned());
        for root in roots {
            for (at, path) in located_paths(&code, &root) {
                if inline.iter().any(|(_, r)| r.contains(&at)) {
                    continue;
                }
                let mut target = module.to_vec();
                if root != "self" {
                    target.push(root.clone());
                }
                target.extend(path);
                found.push(Import { target });
            }
        }
    }
    found
}

/// The file a module path resolves to: the longest prefix of `target` that is a module of `files`.
fn resolve<'a>(target: &[String], files: &'a BTreeMap<Vec<String>, PathBuf>) -> Option<&'a PathBuf> {
    (1..=target.len()).rev().find_map(|n| files.get(&target[..n]))
}

/// Every rule broken by `sources`, as human lines.
fn violations(sources: &[(PathBuf, String)]) -> Vec<String> {
    let mut errors = Vec::new();
    let files: BTreeMap<Vec<String>, PathBuf> = sources
        .iter()
        .filter(|(file, _)| !in_binary(file))
        .map(|(file, _)| (module_of(file), file.clone()))
        .collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (file, source) in sources {
        let name = file.display();
        let in_http = file.starts_with("http");
        let code = code_only(source);
        for krate in HTTP_CRATES {
            // The clients (of a daemon, of a notification's target) are the other places hyper
            // is used: its client, never the server.
            let client = krate == "hyper" && (file == Path::new("outgoing.rs") || file.starts_with("client"));
            if !in_http && !client && !paths_from(&code, krate).is_empty() {
                errors.push(format!("{name} names `{krate}`: only src/http/ may"));
            }
        }
        for (krate, dialect) in STORE_CRATES {
            let in_dialect = file.with_extension("") == Path::new(dialect) || file.starts_with(dialect);
            if !in_dialect && !paths_from(&code, krate).is_empty() {
                errors.push(format!("{name} names `{krate}`: only src/{dialect} may"));
            }
        }
        let (fleet_trait, fleet_home) = FLEET_TRAIT;
        if !file.starts_with(fleet_home) {
            for at in trait_impls(&code, fleet_trait) {
                errors.push(format!(
                    "{name}:{at} implements `{fleet_trait}`: only src/{fleet_home}/ does (a store of one daemon has no fleet)"
                ));
            }
        }
        if file.starts_with("http") || file.starts_with("door") {
            for (method, at) in desk_only_calls(&code) {
                errors.push(format!(
                    "{name}:{at} calls .{method}( on something other than the desk: doors register, subscribe, vote and hold device places through src/desk/"
                ));
            }
        }
        let module = module_of(file);
        if in_binary(file) {
            // Above every floor: it imports the library through `mediatord::`, its own files
            // through `super::`/`crate::cli::`.
            for import in imports(&module, file.ends_with("mod.rs"), source) {
                if import.target.first().is_some_and(|top| top != "cli") {
                    errors.push(format!(
                        "{name} imports crate::{}: the binary reaches the library through mediatord::",
                        import.target.join("::")
                    ));
                }
            }
            if file == Path::new("main.rs") && source.lines().count() > MAIN_LINES {
                errors.push(format!(
                    "main.rs has {} lines: past {MAIN_LINES}, what it does belongs in a command under cli/",
                    source.lines().count()
                ));
            }
            continue;
        }
        let is_dir_module = file.ends_with("mod.rs") || file == Path::new("lib.rs");
        let Some(top) = module.first() else {
            // The crate root only declares modules.
            for import in imports(&module, true, source) {
                errors.push(format!(
                    "lib.rs imports crate::{}: the root only declares",
                    import.target.join("::")
                ));
            }
            continue;
        };
        let Some(own) = floor(top) else {
            errors
                .push(format!("{name}: module `{top}` has no floor in the plan (tests/it/architecture.rs)"));
            continue;
        };
        for import in imports(&module, is_dir_module, source) {
            let Some(target_top) = import.target.first() else { continue };
            let shown = format!("crate::{}", import.target.join("::"));
            if let Some(to) = resolve(&import.target, &files)
                && to != file
            {
                edges.entry(file.clone()).or_default().insert(to.clone());
            }
            if target_top == top {
                continue; // its own folder: only cycles matter, checked below
            }
            let Some(theirs) = floor(target_top) else {
                errors.push(format!("{name} imports {shown}: no such floor"));
                continue;
            };
            if target_top == "http" && top != "server" {
                errors.push(format!("{name} imports {shown}: nothing but server imports http"));
            } else if target_top == "client" && top != "tui" {
                errors.push(format!(
                    "{name} imports {shown}: the clients are the binary's and the terminal client's, not the daemon's"
                ));
            } else if target_top == "tui" {
                errors.push(format!(
                    "{name} imports {shown}: the terminal client is the binary's, not the daemon's"
                ));
            } else if target_top == "demo_agent" {
                errors.push(format!("{name} imports {shown}: the demo agent is a program of its own"));
            } else if target_top == "service" {
                errors.push(format!(
                    "{name} imports {shown}: `mediatord service` is the binary's, not the daemon's"
                ));
            } else if theirs > own {
                errors.push(format!("{name} imports {shown}: up from floor {own} to floor {theirs}"));
            } else if theirs == own && own != 0 {
                errors.push(format!("{name} imports {shown}: across floor {own}"));
            }
        }
    }
    errors.extend(cycles(&edges));
    errors
}

/// The calls `.m(` of a [`DESK_ONLY`] method `m` in `code` whose receiver is not the desk (`desk`,
/// `self.desk`, `desk()`), with their line numbers.
fn desk_only_calls(code: &str) -> Vec<(&'static str, usize)> {
    let mut out = Vec::new();
    for method in DESK_ONLY {
        let needle = format!(".{method}(");
        for (at, _) in code.match_indices(&needle) {
            let before = code[..at].trim_end();
            let receiver = before.strip_suffix("()").unwrap_or(before);
            let ident: String =
                receiver.chars().rev().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if ident.chars().rev().collect::<String>() != "desk" {
                out.push((method, code[..at].matches('\n').count() + 1));
            }
        }
    }
    out.sort_by_key(|(_, line)| *line);
    out
}

/// The lines of `code`'s `impl … Trait for …` blocks of `trait_name` (by its last path segment,
/// generics and paths allowed), outside a `mod tests` (a test double of the trait).
fn trait_impls(code: &str, trait_name: &str) -> Vec<usize> {
    let tests: Vec<std::ops::Range<usize>> =
        inline_modules(code).into_iter().filter(|(name, _)| name == "tests").map(|(_, r)| r).collect();
    let mut out = Vec::new();
    for (at, _) in code.match_indices("impl") {
        let before = code[..at].chars().last();
        let after = code[at + 4..].chars().next();
        if ident_char(before.as_ref()) || ident_char(after.as_ref()) || tests.iter().any(|r| r.contains(&at))
        {
            continue;
        }
        let head = code[at + 4..].split(['{', ';']).next().unwrap_or_default();
        let Some((implemented, _)) = head.split_once(" for ") else { continue };
        // `impl<T: Bound> path::Trait<Args>`: the trait is the last path before any arguments.
        let implemented = implemented.trim();
        let implemented = match implemented.strip_prefix('<') {
            Some(generic) => generic.split_once('>').map_or("", |(_, rest)| rest),
            None => implemented,
        };
        let path = implemented.split('<').next().unwrap_or_default().trim();
        if path.rsplit("::").next() == Some(trait_name) {
            out.push(code[..at].matches('\n').count() + 1);
        }
    }
    out
}

/// One line per file that can reach itself through imports.
fn cycles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<String> {
    let mut errors = Vec::new();
    for start in edges.keys() {
        let mut stack: Vec<(PathBuf, Vec<PathBuf>)> = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    let shown: Vec<String> =
                        trail.iter().chain([next]).map(|p| p.display().to_string()).collect();
                    errors.push(format!("import cycle: {}", shown.join(" → ")));
                    stack.clear();
                    break;
                }
                if seen.insert(next.clone()) {
                    let mut longer = trail.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    errors
}

#[test]
fn every_import_points_down_and_no_file_imports_itself_back() {
    let errors = violations(&sources());
    assert!(errors.is_empty(), "the floor plan is broken:\n{}", errors.join("\n"));
}

#[test]
fn every_top_level_module_has_a_floor() {
    let sources = sources();
    let tops: BTreeSet<String> = sources
        .iter()
        .filter(|(file, _)| !in_binary(file))
        .filter_map(|(file, _)| module_of(file).first().cloned())
        .collect();
    let planned: BTreeSet<String> = FLOORS.iter().map(|(m, _)| (*m).to_owned()).collect();
    assert_eq!(tops, planned, "src/'s modules and the floor plan differ");
}

// The checker, fed violations: it must be able to fail.

fn file(path: &str, text: &str) -> (PathBuf, String) {
    (PathBuf::from(path), text.to_owned())
}

#[test]
fn the_checker_sees_through_comments_strings_and_groups() {
    let code =
        code_only("// crate::http::x\nlet s = \"crate::http\"; let c = '\"'; use crate::{a::b, c::{d, e}};");
    assert!(!code.contains("http"), "{code}");
    let found = paths_from(&code, "crate");
    let expected: Vec<Vec<String>> = [["a", "b"].as_slice(), &["c", "d"], &["c", "e"]]
        .iter()
        .map(|p| p.iter().map(|s| s.to_string()).collect())
        .collect();
    assert_eq!(found, expected);
    let raw = code_only("let r = r#\"crate::http\"#; fn f<'a>(x: &'a str) {}");
    assert!(!raw.contains("http") && raw.contains("'a"), "{raw}");
}

#[test]
fn the_checker_refuses_an_upward_import_a_cross_import_and_axum_outside_http() {
    let sources = vec![
        file("metrics.rs", "use crate::daemon::Daemon;"),
        file("permission/mediator.rs", "fn f() { crate::agent::AgentHandle::start(); }"),
        file("daemon/mod.rs", "use axum::Router; use crate::http::app;"),
        file("agent/mod.rs", "fn f() { let _ = tokio_postgres::connect; }"),
        file("store/postgres/mod.rs", "use tokio_postgres::Client;"),
        file("store/postgres/write.rs", "use deadpool_postgres::Pool;"),
        file("store/sqlite.rs", "use rusqlite::Connection;"),
        file("store/writer.rs", "fn f(c: &rusqlite::Connection) {}"),
        file("store/postgres_notes.rs", "use tokio_postgres::Client;"),
        file("http/mod.rs", "use axum::Router;"),
        file("exec.rs", "use crate::sync::lock;"),
        file("sync.rs", ""),
    ];
    let errors = violations(&sources);
    let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(has("metrics.rs imports crate::daemon::Daemon: up from floor 0 to floor 4"), "{errors:#?}");
    assert!(
        has("permission/mediator.rs imports crate::agent::AgentHandle::start: across floor 2"),
        "{errors:#?}"
    );
    assert!(has("daemon/mod.rs names `axum`"), "{errors:#?}");
    assert!(has("daemon/mod.rs imports crate::http::app: nothing but server imports http"), "{errors:#?}");
    assert!(has("agent/mod.rs names `tokio_postgres`: only src/store/postgres may"), "{errors:#?}");
    assert!(has("store/writer.rs names `rusqlite`: only src/store/sqlite may"), "{errors:#?}");
    assert!(
        has("store/postgres_notes.rs names `tokio_postgres`: only src/store/postgres may"),
        "{errors:#?}"
    );
    assert_eq!(
        errors.len(),
        7,
        "leaves may use leaves, http may use axum, a dialect its driver: {errors:#?}"
    );
}

#[test]
fn the_checker_lets_the_terminal_client_use_the_clients_and_the_daemon_neither() {
    let sources = vec![
        file("tui/mod.rs", "mod run;"),
        file(
            "tui/run.rs",
            "use crate::client::api::Endpoint; use crate::http::api::routes; use crate::text::escape;",
        ),
        file("daemon/mod.rs", "use crate::tui::attach; use crate::client::connect::main;"),
        file("client/mod.rs", "pub mod api;"),
        file("client/api.rs", "use hyper::Request; use axum::body::Body; use crate::tls::pinned_client;"),
        file("http/mod.rs", ""),
        file("tls.rs", ""),
        file("text.rs", ""),
    ];
    let errors = violations(&sources);
    let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(
        has("tui/run.rs imports crate::http::api::routes: nothing but server imports http"),
        "{errors:#?}"
    );
    assert!(
        has("daemon/mod.rs imports crate::tui::attach: the terminal client is the binary's"),
        "{errors:#?}"
    );
    assert!(
        has(
            "daemon/mod.rs imports crate::client::connect::main: the clients are the binary's and the terminal client's"
        ),
        "{errors:#?}"
    );
    assert!(has("client/api.rs names `axum`: only src/http/ may"), "{errors:#?}");
    assert_eq!(
        errors.len(),
        4,
        "tui may use the clients, the clients hyper's client and leaves: {errors:#?}"
    );
}

#[test]
fn the_checker_keeps_the_binary_on_mediatord_and_its_root_short() {
    let sources = vec![
        file(
            "main.rs",
            &format!("mod cli;\n{}fn main() {{ cli::main() }}", "// a line\n".repeat(MAIN_LINES - 1)),
        ),
        file("cli/mod.rs", "mod reach; use crate::cli::reach::locate; use self::reach::say;"),
        file("cli/reach.rs", "use super::say; use crate::daemon::Daemon;"),
        file("cli/serve.rs", "use super::super::server::run;"),
        file("daemon/mod.rs", ""),
        file("server.rs", ""),
    ];
    let errors = violations(&sources);
    let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(
        has("cli/reach.rs imports crate::daemon::Daemon: the binary reaches the library through mediatord::"),
        "{errors:#?}"
    );
    assert!(has("cli/serve.rs imports crate::server::run: the binary reaches"), "{errors:#?}");
    assert!(has(&format!("main.rs has {} lines: past {MAIN_LINES}", MAIN_LINES + 1)), "{errors:#?}");
    assert_eq!(errors.len(), 3, "the binary's own files import each other freely: {errors:#?}");
}

#[test]
fn the_checker_refuses_a_door_that_registers_subscribes_or_votes_without_the_desk() {
    let sources = vec![
        file("http/events.rs", "fn f(s: S) { s.subscribe(None); }"),
        file(
            "door/methods.rs",
            "fn f(&self) { session.permissions()\n    .vote(&b); self.daemon().devices.open_connection(d); }",
        ),
        file("http/acp.rs", "fn f() { session.register(c, e); }"),
    ];
    let errors = violations(&sources);
    for expected in [
        "http/events.rs:1 calls .subscribe(",
        "door/methods.rs:2 calls .vote(",
        "door/methods.rs:2 calls .open_connection(",
        "http/acp.rs:1 calls .register(",
    ] {
        assert!(errors.iter().any(|e| e.starts_with(expected)), "{expected}: {errors:#?}");
    }
    let through_the_desk = vec![
        file("http/events.rs", "fn f() { desk.subscribe(s, c, None, seat); self.desk().vote(s, c, r, v); }"),
        file("door/methods.rs", "fn f(&self) { self.desk.join(s, c); desk.open_connection(c); }"),
        // Below the doors, the desk itself and the daemon call them.
        file("desk/mod.rs", "fn f() { session.register(c, e); session.permissions().vote(&b); }"),
        file("http/strings.rs", "fn f() { let _ = \"session.vote(\"; } // s.register(x)"),
    ];
    assert_eq!(violations(&through_the_desk), Vec::<String>::new());
}

#[test]
fn the_checker_refuses_a_fleet_outside_postgres_but_in_a_test_double() {
    let sources = vec![
        file("store/sqlite.rs", "impl Fleet for SqliteStore {}"),
        file("store/memory.rs", "struct M;\nimpl super::fleet::Fleet for MemoryStore {\n}"),
        file("daemon/mod.rs", "impl<S: Store> crate::store::Fleet for Wrapper<S> { }"),
        file("store/postgres/mod.rs", "impl Fleet for PgStore {} impl Store for PgStore {}"),
        file("store/fleet.rs", "pub trait Fleet {} impl<T: Fleet> Shown for T {} // impl Fleet for X"),
        file("devices/mod.rs", "mod tests { impl Fleet for Disk {} impl Store for Disk {} }"),
        file("store/api.rs", "fn f() { let s = \"impl Fleet for Fake\"; } impl FleetLike for Y {}"),
    ];
    let errors = violations(&sources);
    for expected in [
        "store/sqlite.rs:1 implements `Fleet`: only src/store/postgres/ does",
        "store/memory.rs:2 implements `Fleet`",
        "daemon/mod.rs:1 implements `Fleet`",
    ] {
        assert!(errors.iter().any(|e| e.starts_with(expected)), "{expected}: {errors:#?}");
    }
    assert_eq!(errors.len(), 3, "PostgreSQL and test doubles may, nobody else: {errors:#?}");
}

#[test]
fn the_checker_finds_a_cycle_between_sibling_files() {
    let sources = vec![
        file("daemon/mod.rs", "mod a; mod b; pub use self::a::A;"),
        file("daemon/a.rs", "use super::b::B;"),
        file("daemon/b.rs", "use crate::daemon::a::A;"),
    ];
    let errors = violations(&sources);
    assert!(
        errors.iter().any(|e| e.contains("import cycle: daemon/a.rs → daemon/b.rs → daemon/a.rs")),
        "{errors:#?}"
    );
    let fixed = vec![
        file("daemon/mod.rs", "mod a; mod b; pub use self::a::A;"),
        file("daemon/a.rs", "use super::b::B;"),
        file("daemon/b.rs", ""),
    ];
    assert_eq!(violations(&fixed), Vec::<String>::new());
}
