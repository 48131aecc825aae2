//! The layering, enforced: every module of `src/` imports only the modules
//! [`LAYERS`] lets it, and the README's architecture table and the
//! `src/lib.rs` doc say the same as [`LAYERS`].
//!
//! Imports are read from the source text: every `crate::<module>` path,
//! whether in a `use`, a `use crate::{a::…, b::…}` group or a path in code.
//! Comments and string literals are skipped; `#[cfg(test)]` code counts like
//! any other, so a test cannot reach up a layer either. A module is a
//! top-level folder or file of `src/` (`src/query/expr/mod.rs` is `query`);
//! `crate::Error`, `crate::bail!` and the other items `lib.rs` re-exports
//! from `error` count as `error`.
//!
//! Inside a module folder the files must not import each other in a cycle
//! either ([`ACYCLIC_DIRS`]): a folder's files form an order too, so each
//! can be read knowing only the files below it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each module, top to bottom, with the modules it may import. The README's
/// architecture table and the `src/lib.rs` doc mirror this.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "server",
        &[
            "wire", "commands", "cursor", "config", "router", "auth", "query", "base", "error",
        ],
    ),
    (
        "commands",
        &[
            "wire",
            "config",
            "cursor",
            "router",
            "index",
            "partition",
            "aggregate",
            "auth",
            "query",
            "base",
            "error",
        ],
    ),
    (
        "config",
        &[
            "cursor",
            "router",
            "index",
            "partition",
            "aggregate",
            "storage",
            "query",
            "base",
            "error",
        ],
    ),
    ("cursor", &["router", "aggregate", "query", "base", "error"]),
    (
        "router",
        &[
            "index",
            "partition",
            "aggregate",
            "storage",
            "query",
            "base",
            "error",
        ],
    ),
    ("index", &["query", "base", "error"]),
    ("partition", &["query", "base", "error"]),
    ("aggregate", &["query", "base", "error"]),
    ("storage", &["query", "base", "error"]),
    ("auth", &["query", "base", "error"]),
    ("wire", &["base", "error"]),
    ("query", &["base", "error"]),
    ("base", &["error"]),
    ("error", &[]),
];

/// Imports that break [`LAYERS`] today and are known: (file, module).
/// Each must still be there (a stale entry fails too), so the list only
/// shrinks.
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[];

/// Names `lib.rs` puts at the crate root that belong to `error`.
const ROOT_ITEMS_OF_ERROR: &[&str] = &["Error", "ErrorCode", "Result", "bail", "err"];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The Rust files under `src/<dir>` (all of `src` for ""), sorted, each
/// with its path relative to `src` in `/` form.
fn source_files(dir: &str) -> Vec<(PathBuf, String)> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src.join(dir), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path
                .strip_prefix(&src)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            (path, rel)
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file belongs to: its first component under `src/`.
fn module_of(rel: &str) -> String {
    let first = rel.split('/').next().unwrap_or(rel);
    first.trim_end_matches(".rs").to_string()
}

/// The source with comments and the contents of string and char literals
/// blanked out, so only code is left to read.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else {
                let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                if b.get(i + 1 + ch_len) == Some(&b'\'') {
                    i += 2 + ch_len;
                    out.push_str("' '");
                } else {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = src[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first identifier of `s` (after whitespace).
fn first_ident(s: &str) -> &str {
    let s = s.trim_start();
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// The crate-root names a piece of code reaches through `crate::`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + "crate::".len()..];
        rest = after;
        // `$crate::` in a macro is the same crate; an identifier ending in
        // `crate` (`shardgate::` is not this) is not.
        if before.is_some_and(is_ident) {
            continue;
        }
        let after = after.trim_start();
        if let Some(group) = after.strip_prefix('{') {
            // `crate::{a::b, c, d::{e, f}}`: the first name of each item.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name = first_ident(&group[i..]);
                        if !name.is_empty() {
                            found.push(name.to_string());
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = first_ident(after);
            if !name.is_empty() {
                found.push(name.to_string());
            }
        }
    }
    found
}

/// Every (file, imported module) pair that crosses a module boundary.
fn imports() -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for (path, rel) in source_files("") {
        // The binary and the crate root sit above every layer.
        if rel == "main.rs" || rel == "lib.rs" {
            continue;
        }
        let module = module_of(&rel);
        let text = fs::read_to_string(&path).expect("source is UTF-8");
        for name in crate_paths(&code_only(&text)) {
            let target = if ROOT_ITEMS_OF_ERROR.contains(&name.as_str()) {
                "error".to_string()
            } else {
                name
            };
            if target != module {
                out.entry((format!("src/{rel}"), target))
                    .or_insert_with(|| module.clone());
            }
        }
    }
    out
}

fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    LAYERS
        .iter()
        .map(|(m, may)| (*m, may.iter().copied().collect()))
        .collect()
}

#[test]
fn no_module_imports_past_its_layer() {
    let allowed = allowed();
    let found = imports();
    let mut broken = Vec::new();
    let mut used_exceptions = BTreeSet::new();
    for ((file, target), module) in &found {
        let Some(may) = allowed.get(module.as_str()) else {
            broken.push(format!(
                "{file}: module `{module}` is not in LAYERS; add it"
            ));
            continue;
        };
        if !allowed.contains_key(target.as_str()) {
            broken.push(format!(
                "{file}: imports `crate::{target}`, which is not a module in LAYERS"
            ));
            continue;
        }
        if may.contains(target.as_str()) {
            continue;
        }
        if KNOWN_EXCEPTIONS.contains(&(file.as_str(), target.as_str())) {
            used_exceptions.insert((file.clone(), target.clone()));
            continue;
        }
        broken.push(format!(
            "{file}: `{module}` imports `{target}`, which LAYERS does not let it"
        ));
    }
    for (file, target) in KNOWN_EXCEPTIONS {
        if !used_exceptions.contains(&(file.to_string(), target.to_string())) {
            broken.push(format!(
                "{file} no longer imports `{target}`: remove it from KNOWN_EXCEPTIONS"
            ));
        }
    }
    assert!(broken.is_empty(), "layering broken:\n{}", broken.join("\n"));
}

#[test]
fn layers_are_ordered_top_to_bottom() {
    // A module may import only modules listed after it, so the table is
    // an order and no two layers can import each other.
    for (i, (module, may)) in LAYERS.iter().enumerate() {
        let below: BTreeSet<&str> = LAYERS[i + 1..].iter().map(|(m, _)| *m).collect();
        for target in *may {
            assert!(
                below.contains(target),
                "`{module}` may import `{target}`, which is not below it in LAYERS"
            );
        }
    }
}

#[test]
fn every_module_of_lib_rs_is_in_the_table() {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).expect("lib.rs");
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches(';').trim().to_string())
        .collect();
    let table: BTreeSet<String> = LAYERS.iter().map(|(m, _)| m.to_string()).collect();
    assert_eq!(declared, table, "lib.rs's modules and LAYERS differ");
}

/// The (module, may import) rows of a markdown table whose lines start
/// with `prefix`, in the order they appear: the first column is the module
/// and `import_column` the list.
fn table_rows(lines: &[&str], prefix: &str, import_column: usize) -> Vec<(String, Vec<String>)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells.len() > import_column)
        .filter(|cells| cells[0] != "module" && !cells[0].starts_with("---"))
        .map(|cells| {
            let imports = cells[import_column]
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty() && s != "—")
                .collect();
            (cells[0].clone(), imports)
        })
        .collect()
}

fn expected_rows() -> Vec<(String, Vec<String>)> {
    LAYERS
        .iter()
        .map(|(m, may)| (m.to_string(), may.iter().map(|s| s.to_string()).collect()))
        .collect()
}

#[test]
fn readme_table_says_the_same() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = fs::read_to_string(path).expect("README.md");
    let section = readme
        .split("\n## Architecture")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has an Architecture section");
    let lines: Vec<&str> = section.lines().collect();
    let rows = table_rows(&lines, "| ", 2);
    assert_eq!(
        rows,
        expected_rows(),
        "README's architecture table and LAYERS differ"
    );
}

#[test]
fn lib_rs_table_says_the_same() {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).expect("lib.rs");
    let lines: Vec<&str> = lib.lines().collect();
    let rows = table_rows(&lines, "//! | ", 1);
    assert_eq!(
        rows,
        expected_rows(),
        "src/lib.rs's layer table and LAYERS differ"
    );
}

#[test]
fn the_reader_sees_imports_and_skips_comments_and_strings() {
    let code = code_only(
        "use crate::query::x; // crate::server\n\
         /* crate::router */ let s = \"crate::storage\";\n\
         use crate::{bail, wire::Message, index::{a, b}};\n\
         let c = '\"'; let r = r#\"crate::commands\"#; fn f<'a>() {}\n\
         crate::partition::hash(1); $crate::error::Error;",
    );
    let mut got = crate_paths(&code);
    got.sort();
    assert_eq!(
        got,
        ["bail", "error", "index", "partition", "query", "wire"]
    );
}

/// Module folders of `src/` whose files import each other without a cycle,
/// `mod.rs` included: it is one file like the others, and a subfolder
/// counts as one file. Add a folder here once its cycles are gone.
const ACYCLIC_DIRS: &[&str] = &["base", "commands", "index", "partition", "query"];

/// Folders whose `mod.rs` is still both the front that calls the other
/// files and a base they take types from. Only the other files must be
/// free of cycles: what they take from `mod.rs` counts, what `mod.rs`
/// takes from them does not. Move a folder to [`ACYCLIC_DIRS`] once its
/// `mod.rs` is only one of the two.
const ACYCLIC_BESIDE_MOD_RS: &[&str] = &["aggregate", "query/expr", "router", "server", "wire"];

/// A piece of code, as far as paths go.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_whitespace() {
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            out.push(Tok::Ident(code[i..end].to_string()));
        } else if c.is_ascii_digit() {
            // A number, suffix and all (`1u64`, `0x1F`), is no path.
            while chars
                .peek()
                .is_some_and(|&(_, d)| d.is_alphanumeric() || d == '_')
            {
                chars.next();
            }
            out.push(Tok::Punct('0'));
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            out.push(Tok::PathSep);
        } else {
            out.push(Tok::Punct(c));
        }
    }
    out
}

/// Reads a use tree or a path at `toks[*at]`: every full path it names
/// (`a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`), after `prefix`.
fn use_tree(toks: &[Tok], at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    match toks.get(*at) {
        Some(Tok::Punct('{')) => {
            *at += 1;
            loop {
                match toks.get(*at) {
                    None => return,
                    Some(Tok::Punct('}')) => {
                        *at += 1;
                        return;
                    }
                    Some(Tok::Punct(',')) => *at += 1,
                    _ => {
                        let before = *at;
                        use_tree(toks, at, prefix, out);
                        // `x as y`, or anything this reader does not know:
                        // skip to the end of the item.
                        let mut depth = 0;
                        while let Some(t) = toks.get(*at) {
                            match t {
                                Tok::Punct('{') => depth += 1,
                                Tok::Punct('}') if depth == 0 => break,
                                Tok::Punct('}') => depth -= 1,
                                Tok::Punct(',') if depth == 0 => break,
                                _ => {}
                            }
                            *at += 1;
                        }
                        if *at == before {
                            *at += 1;
                        }
                    }
                }
            }
        }
        Some(Tok::Punct('*')) => {
            *at += 1;
            let mut path = prefix.to_vec();
            path.push("*".to_string());
            out.push(path);
        }
        Some(Tok::Ident(name)) => {
            *at += 1;
            let mut path = prefix.to_vec();
            path.push(name.clone());
            if toks.get(*at) == Some(&Tok::PathSep)
                && matches!(
                    toks.get(*at + 1),
                    Some(Tok::Ident(_) | Tok::Punct('{') | Tok::Punct('*'))
                )
            {
                *at += 1;
                use_tree(toks, at, &path, out);
            } else {
                out.push(path);
            }
        }
        _ => {}
    }
}

/// Every path of two or more segments in a file, with the inline modules
/// (`mod tests { … }`) it sits in: `(["tests"], ["super", "x"])`.
fn paths_in(code: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let toks = tokens(code);
    let mut out = Vec::new();
    // Open inline modules, with the brace depth inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Punct('{'))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                }
            }
            Tok::Ident(_) => {
                let starts_path = toks.get(i + 1) == Some(&Tok::PathSep)
                    && (i == 0 || toks[i - 1] != Tok::PathSep);
                if starts_path {
                    let mut at = i;
                    let mut found = Vec::new();
                    use_tree(&toks, &mut at, &[], &mut found);
                    let within: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                    out.extend(found.into_iter().map(|p| (within.clone(), p)));
                    // Braces inside the path were read with it.
                    i = at.max(i + 1);
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The module path of a file under `src/`: `commands/explain.rs` is
/// `commands::explain`, `commands/mod.rs` is `commands`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    let file = parts.pop().unwrap_or_default();
    if file != "mod.rs" && file != "lib.rs" && file != "main.rs" {
        parts.push(file.trim_end_matches(".rs").to_string());
    }
    parts
}

/// The child modules of a module: its folder's `.rs` files and subfolders.
fn children(module: &[String]) -> BTreeSet<String> {
    let dir = module.iter().fold(src_dir(), |d, m| d.join(m));
    let Ok(entries) = fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let path = e.path();
            let name = path.file_name()?.to_str()?.to_string();
            if path.is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs")
                    .filter(|n| *n != "mod")
                    .map(str::to_string)
            }
        })
        .collect()
}

/// The absolute module path a path in `module` (inside the inline modules
/// `within`) names, if it is one of this crate's: `crate::`, `self::`,
/// `super::` and a bare child module (`args::x` in a `mod.rs`).
fn resolve(module: &[String], within: &[String], path: &[String]) -> Option<Vec<String>> {
    let here: Vec<String> = module.iter().chain(within).cloned().collect();
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(here.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = here.get(..here.len().checked_sub(ups)?)?;
            Some(base.iter().chain(&path[ups..]).cloned().collect())
        }
        _ => (module.len()..=here.len())
            .rev()
            .find(|&n| children(&here[..n]).contains(first))
            .map(|n| here[..n].iter().chain(path).cloned().collect()),
    }
}

/// Inside folder `dir`, the file a module path belongs to: `mod.rs`, or
/// the child (file or subfolder) it lies in.
fn node_in(dir: &[String], kids: &BTreeSet<String>, path: &[String]) -> Option<String> {
    if !path.starts_with(dir) {
        return None;
    }
    match path.get(dir.len()) {
        Some(kid) if kids.contains(kid) => {
            let sub = dir.iter().fold(src_dir(), |d, m| d.join(m)).join(kid);
            Some(if sub.is_dir() {
                format!("{kid}/")
            } else {
                format!("{kid}.rs")
            })
        }
        _ => Some("mod.rs".to_string()),
    }
}

/// The imports between the files of one folder: (from, to) → the first
/// path that makes it, as written. Without `with_mod_rs`, what `mod.rs`
/// imports is left out.
fn folder_imports(dir: &str, with_mod_rs: bool) -> BTreeMap<(String, String), String> {
    let dir_path: Vec<String> = dir.split('/').map(str::to_string).collect();
    let kids = children(&dir_path);
    let mut out = BTreeMap::new();
    for (path, rel) in source_files(dir) {
        let module = module_path(&rel);
        let Some(from) = node_in(&dir_path, &kids, &module) else {
            continue;
        };
        if from == "mod.rs" && !with_mod_rs {
            continue;
        }
        let text = fs::read_to_string(&path).expect("source is UTF-8");
        for (within, p) in paths_in(&code_only(&text)) {
            let Some(target) = resolve(&module, &within, &p) else {
                continue;
            };
            let Some(to) = node_in(&dir_path, &kids, &target) else {
                continue;
            };
            if to != from {
                out.entry((from.clone(), to))
                    .or_insert_with(|| p.join("::"));
            }
        }
    }
    out
}

/// The groups of nodes that reach each other (Tarjan's strongly connected
/// components), only those of more than one node.
fn cycles(edges: &BTreeMap<(String, String), String>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.next.get(v).cloned().unwrap_or_default() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    group.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for (from, to) in edges.keys() {
        walk.next
            .entry(from.as_str())
            .or_default()
            .push(to.as_str());
        walk.next.entry(to.as_str()).or_default();
    }
    let nodes: Vec<&str> = walk.next.keys().copied().collect();
    for v in nodes {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}

#[test]
fn no_import_cycle_inside_a_module_folder() {
    let mut broken = Vec::new();
    let dirs = ACYCLIC_DIRS.iter().map(|d| (d, true));
    let beside = ACYCLIC_BESIDE_MOD_RS.iter().map(|d| (d, false));
    for (dir, with_mod_rs) in dirs.chain(beside) {
        assert!(
            src_dir().join(dir).is_dir(),
            "src/{dir} is listed as acyclic but is not a folder"
        );
        let edges = folder_imports(dir, with_mod_rs);
        for group in cycles(&edges) {
            let ties: Vec<String> = edges
                .iter()
                .filter(|((from, to), _)| group.contains(from) && group.contains(to))
                .map(|((from, to), path)| format!("    {from} -> {to} (`{path}`)"))
                .collect();
            broken.push(format!(
                "src/{dir}: {} import each other:\n{}",
                group.join(", "),
                ties.join("\n")
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "import cycles inside a folder:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_cycle_reader_resolves_paths_as_rust_does() {
    let code = code_only(
        "use super::{args::{self, opt}, Request};\n\
         use crate::commands::find::parse as p;\n\
         fn f() { super::explain::run(); let k = Kind::Find; x::<u8>::y(); }\n\
         mod tests { use super::*; fn g() { super::super::registry::lookup(); } }",
    );
    let module = module_path("commands/aggregate.rs");
    assert_eq!(module, ["commands", "aggregate"]);
    let mut got: Vec<String> = paths_in(&code)
        .into_iter()
        .filter_map(|(within, p)| resolve(&module, &within, &p))
        .map(|p| p.join("::"))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "commands::Request",
            "commands::aggregate::*",
            "commands::args::opt",
            "commands::args::self",
            "commands::explain::run",
            "commands::find::parse",
            "commands::registry::lookup",
        ]
    );
    // In a `mod.rs`, a child module is named bare.
    let module = module_path("commands/mod.rs");
    let code = code_only("fn h() { registry::lookup(); bson::doc(); }");
    let got: Vec<Vec<String>> = paths_in(&code)
        .into_iter()
        .filter_map(|(within, p)| resolve(&module, &within, &p))
        .collect();
    assert_eq!(got, [["commands", "registry", "lookup"]]);
}

#[test]
fn the_cycle_finder_finds_every_cycle_and_only_cycles() {
    let edges: BTreeMap<(String, String), String> = [
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
        ("c", "d"),
        ("d", "e"),
        ("e", "d"),
        ("f", "a"),
    ]
    .iter()
    .map(|(f, t)| ((f.to_string(), t.to_string()), String::new()))
    .collect();
    assert_eq!(cycles(&edges), [vec!["a", "b", "c"], vec!["d", "e"]]);
}
