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

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each module, top to bottom, with the modules it may import. The README's
/// architecture table and the `src/lib.rs` doc mirror this.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "server",
        &[
            "wire", "commands", "cursor", "config", "router", "query", "base", "error",
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
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut out = BTreeMap::new();
    for path in files {
        let rel = path
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
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
