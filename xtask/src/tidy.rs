//! `cargo xtask tidy`: the workspace's structural rules, checked from its files.
//!
//! As rust-analyzer's `xtask/src/tidy.rs` does, the rules a reviewer would
//! otherwise check by eye are code: every crate's dependencies against the
//! Crate / Purpose / May depend on table of `docs/ARCHITECTURE.md` (so the
//! ladder of the data flow cannot leak silently), tract only where the table
//! lets it in (through `cargo tree`, so features count), a `//!` line at the
//! top of every source file, no source file over 700 lines outside tests, and
//! no import loop spanning more than two files of a crate. Each check is a
//! pure function of text, so the tests below plant violations and see them
//! fail; `tidy_passes_on_this_tree` runs them all on the workspace.

use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Longest source file allowed outside tests.
const MAX_LINES: usize = 700;

/// The heavy external dependencies the table names, by crate-name prefix.
const HEAVY: [(&str, &str); 3] = [
    ("tract-", "tract"),
    ("ort", "ort"),
    ("openvino", "openvino"),
];

/// One row of the architecture table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    /// Dependencies of the library and binaries; an entry marked
    /// `(feature …)` is optional and not followed by the transitive check.
    pub may: BTreeSet<String>,
    pub optional: BTreeSet<String>,
    /// What tests, examples and benchmarks may use besides `may`.
    pub tests: BTreeSet<String>,
}

/// Runs every check on the workspace at `root`, printing each violation.
pub fn run(root: &Path) -> Result<()> {
    let problems = check(root)?;
    for p in &problems {
        eprintln!("tidy: {p}");
    }
    if !problems.is_empty() {
        bail!("{} tidy violations", problems.len());
    }
    eprintln!("tidy: dependencies, tract, file headers, file lengths and import loops are clean");
    Ok(())
}

/// All violations in the workspace at `root`.
pub fn check(root: &Path) -> Result<Vec<String>> {
    let arch = root.join("docs/ARCHITECTURE.md");
    let table = parse_table(
        &std::fs::read_to_string(&arch)
            .with_context(|| format!("cannot read {}", arch.display()))?,
    )
    .with_context(|| format!("{}: the crate table", arch.display()))?;
    let mut problems = Vec::new();
    let crates = workspace_crates(root)?;
    for name in table.keys() {
        if !crates.contains_key(name) {
            problems.push(format!(
                "docs/ARCHITECTURE.md names crate `{name}`, which is not in the workspace"
            ));
        }
    }
    for (name, dir) in &crates {
        let Some(row) = table.get(name) else {
            problems.push(format!(
                "crate `{name}` has no row in the table of docs/ARCHITECTURE.md"
            ));
            continue;
        };
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))?;
        problems.extend(check_manifest(row, &manifest)?);
        let tract = tract_in_tree(root, name)?;
        let allowed = reaches(&table, name, "tract");
        if tract != allowed {
            problems.push(if tract {
                format!(
                    "`cargo tree -p {name}` lists a tract crate, but the table lets tract in only through optional features"
                )
            } else {
                format!(
                    "the table lets `{name}` reach tract, but `cargo tree -p {name}` lists none: update the table"
                )
            });
        }
        for file in rust_files(dir)? {
            let text = std::fs::read_to_string(&file)?;
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            problems.extend(check_file(&shown, &text));
        }
        problems.extend(
            import_loops(&dir.join("src"))?
                .into_iter()
                .map(|l| format!("crate `{name}`: an import loop spans {}", l.join(" -> "))),
        );
    }
    Ok(problems)
}

/// The rows of the table under the header `| Crate | Purpose | May depend on | Tests may also use |`.
pub fn parse_table(markdown: &str) -> Result<BTreeMap<String, Row>> {
    let mut lines = markdown.lines().skip_while(|l| {
        !l.replace(' ', "")
            .starts_with("|Crate|Purpose|Maydependon|Testsmayalsouse|")
    });
    lines
        .next()
        .context("no `| Crate | Purpose | May depend on | Tests may also use |` table")?;
    lines.next().context("the table has no separator line")?;
    let mut rows = BTreeMap::new();
    for line in lines.take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [name, _, may, tests] = cells[..] else {
            bail!("table row `{line}` has {} cells, expected 4", cells.len());
        };
        let name = name.trim_matches('`').to_string();
        let mut row = Row {
            name: name.clone(),
            may: BTreeSet::new(),
            optional: BTreeSet::new(),
            tests: names(tests).map(|(n, _)| n).collect(),
        };
        for (dep, optional) in names(may) {
            if optional {
                row.optional.insert(dep.clone());
            }
            row.may.insert(dep);
        }
        rows.insert(name, row);
    }
    Ok(rows)
}

/// The backticked names of a cell, each with whether `(feature …)` follows it.
fn names(cell: &str) -> impl Iterator<Item = (String, bool)> + '_ {
    cell.split(',').filter_map(|part| {
        let start = part.find('`')? + 1;
        let len = part[start..].find('`')?;
        Some((
            part[start..start + len].to_string(),
            part.contains("(feature"),
        ))
    })
}

/// The table's name of a dependency that the table governs: workspace
/// crates by name, heavy crates by family; `None` for the rest.
fn governed(dep: &str) -> Option<String> {
    if dep.starts_with("dlas-") || dep == "xtask" {
        return Some(dep.to_string());
    }
    HEAVY
        .iter()
        .find(|(prefix, _)| dep == prefix.trim_end_matches('-') || dep.starts_with(prefix))
        .map(|(_, family)| family.to_string())
}

/// Violations of `row` by the manifest text of its crate.
pub fn check_manifest(row: &Row, manifest: &str) -> Result<Vec<String>> {
    let doc: toml::Table = manifest.parse().context("Cargo.toml does not parse")?;
    let mut problems = Vec::new();
    for (section, allowed) in [
        ("dependencies", row.may.clone()),
        ("build-dependencies", row.may.clone()),
        ("dev-dependencies", &row.may | &row.tests),
    ] {
        let Some(deps) = doc.get(section).and_then(|d| d.as_table()) else {
            continue;
        };
        for dep in deps.keys() {
            if let Some(name) = governed(dep)
                && !allowed.contains(&name)
            {
                problems.push(format!(
                    "crate `{}` has `{dep}` in [{section}], which docs/ARCHITECTURE.md does not allow (allowed: {})",
                    row.name,
                    allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    Ok(problems)
}

/// Whether `target` is reachable from `from` over the table's required edges.
pub fn reaches(table: &BTreeMap<String, Row>, from: &str, target: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_string()];
    while let Some(name) = stack.pop() {
        if name == target {
            return true;
        }
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(row) = table.get(&name) {
            stack.extend(
                (&row.may | &row.tests)
                    .into_iter()
                    .filter(|d| !row.optional.contains(d)),
            );
        }
    }
    false
}

/// Whether `cargo tree -p name` lists a tract crate: dev and build edges
/// included, optional features left off (the table does not follow them).
fn tract_in_tree(root: &Path, name: &str) -> Result<bool> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args([
            "tree",
            "--offline",
            "--no-default-features",
            "-p",
            name,
            "-e",
            "normal,dev,build",
            "--prefix",
            "none",
        ])
        .output()
        .context("cannot run cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree -p {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("tract-")))
}

/// The workspace's crates: `crates/*` and `xtask`, by package name.
fn workspace_crates(root: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut crates = BTreeMap::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    dirs.push(root.join("xtask"));
    for dir in dirs {
        let manifest = dir.join("Cargo.toml");
        if !manifest.exists() {
            continue;
        }
        let doc: toml::Table = std::fs::read_to_string(&manifest)?
            .parse()
            .with_context(|| format!("{} does not parse", manifest.display()))?;
        let name = doc
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .with_context(|| format!("{} has no package name", manifest.display()))?;
        crates.insert(name.to_string(), dir);
    }
    Ok(crates)
}

/// Every `.rs` file under `dir`, sorted, outside `target` folders.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                if path
                    .file_name()
                    .is_some_and(|n| n != "target" && n != "snapshots")
                {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Violations of one source file: a missing `//!` opening line, or more than
/// [`MAX_LINES`] lines of code outside tests (test files, and a file's
/// `#[cfg(test)]` module at its end, are not counted).
pub fn check_file(shown: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !text.starts_with("//!") {
        problems.push(format!(
            "{shown}: the file does not open with a `//!` line saying what it is for"
        ));
    }
    let is_test = shown.contains("/tests/") || shown.contains("/benches/");
    let code = text
        .find("\n#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at]);
    let lines = code.lines().count();
    if !is_test && lines > MAX_LINES {
        problems.push(format!(
            "{shown}: {lines} lines, more than {MAX_LINES}: split it by concern"
        ));
    }
    problems
}

/// Import loops of more than two files among the modules under `src`: the
/// strongly connected components of the graph whose edges are the
/// `crate::…` and `super::…` paths each file names outside its tests.
pub fn import_loops(src: &Path) -> Result<Vec<Vec<String>>> {
    let mut modules = BTreeMap::new();
    for file in rust_files(src)? {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        modules.insert(module_path(rel), std::fs::read_to_string(&file)?);
    }
    Ok(loops(&modules))
}

/// Import loops of more than two modules in `modules` (module path -> source).
pub fn loops(modules: &BTreeMap<Vec<String>, String>) -> Vec<Vec<String>> {
    let names: Vec<&Vec<String>> = modules.keys().collect();
    let index: BTreeMap<&Vec<String>, usize> =
        names.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let edges: Vec<BTreeSet<usize>> = names
        .iter()
        .map(|m| {
            referenced_paths(m, &modules[*m])
                .into_iter()
                .filter_map(|p| resolve(&p, &index))
                .filter(|&t| names[t] != *m)
                .collect()
        })
        .collect();
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 2)
        .map(|c| {
            c.into_iter()
                .map(|i| format!("crate::{}", names[i].join("::")))
                .collect()
        })
        .collect()
}

/// `gemm/mod.rs` -> `[gemm]`, `lib.rs` -> `[]`, `claims/cells.rs` -> `[claims, cells]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The absolute module paths (segments after `crate`) that `source`, the
/// text of module `module`, names through `crate::` and `super::`, outside
/// its `#[cfg(test)]` part. Use-trees with braces are expanded.
fn referenced_paths(module: &[String], source: &str) -> Vec<Vec<String>> {
    let code = source
        .find("#[cfg(test)]")
        .map_or(source, |at| &source[..at]);
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    for start in ["crate::", "super::"] {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(start) {
            let before = rest[..at].chars().last();
            let tail = &rest[at..];
            rest = &rest[at + start.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let end = use_tree_end(tail);
            for path in expand(&tail[..end]) {
                if let Some(abs) = absolute(module, &path) {
                    found.push(abs);
                }
            }
        }
    }
    found
}

/// The length of the path or use-tree starting at `text` (balanced braces).
fn use_tree_end(text: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => return i,
            _ => {}
        }
    }
    text.len()
}

/// `crate::a::{b, c::{d}}` -> `[crate,a,b]`, `[crate,a,c,d]`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![segments(&tree)];
    };
    let prefix = segments(&tree[..open]);
    let inner = &tree[open + 1..tree.len().saturating_sub(1)];
    let mut out = Vec::new();
    let (mut depth, mut from) = (0usize, 0);
    for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                let item = &inner[from..i];
                from = i + 1;
                for p in expand(item) {
                    out.push(prefix.iter().cloned().chain(p).collect());
                }
            }
            _ => {}
        }
    }
    if out.is_empty() {
        out.push(prefix);
    }
    out
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// A path as segments below the crate root, from module `module`.
fn absolute(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// The module (file) a path lands in: its longest prefix that is a module.
fn resolve(path: &[String], index: &BTreeMap<&Vec<String>, usize>) -> Option<usize> {
    (0..=path.len())
        .rev()
        .find_map(|n| index.get(&path[..n].to_vec()).copied())
}

/// Tarjan's strongly connected components.
fn strongly_connected(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            component.sort();
            s.out.push(component);
        }
    }
    let n = edges.len();
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
| Crate | Purpose | May depend on | Tests may also use |
|---|---|---|---|
| `dlas-core` | vocabulary | — | — |
| `dlas-onnx` | ONNX | `dlas-core`, `tract` | — |
| `dlas-compress` | compression | `dlas-core`, `dlas-onnx` (feature `onnx`) | — |
| `dlas-report` | figures | `dlas-core`, `dlas-compress` | `insta` |
";

    #[test]
    fn tidy_passes_on_this_tree() {
        let problems = check(&crate::project_root()).unwrap();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn a_dependency_the_table_does_not_allow_is_a_violation() {
        let table = parse_table(TABLE).unwrap();
        let ok = "[package]\nname = \"dlas-report\"\n[dependencies]\ndlas-core.workspace = true\nserde = \"1\"\n";
        assert!(
            check_manifest(&table["dlas-report"], ok)
                .unwrap()
                .is_empty()
        );
        let planted = format!("{ok}dlas-onnx.workspace = true\n");
        let problems = check_manifest(&table["dlas-report"], &planted).unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("`dlas-onnx` in [dependencies]"));
        let heavy = format!("{ok}[dev-dependencies]\ntract-onnx = \"0.23\"\n");
        assert!(check_manifest(&table["dlas-report"], &heavy).unwrap()[0].contains("tract-onnx"));
    }

    #[test]
    fn tract_reaches_only_through_required_edges() {
        let table = parse_table(TABLE).unwrap();
        assert!(reaches(&table, "dlas-onnx", "tract"));
        assert!(!reaches(&table, "dlas-compress", "tract"));
        assert!(!reaches(&table, "dlas-report", "tract"));
        assert!(table["dlas-compress"].optional.contains("dlas-onnx"));
    }

    #[test]
    fn a_file_without_its_doc_line_or_too_long_is_a_violation() {
        assert!(check_file("crates/x/src/a.rs", "//! What.\nfn f() {}\n").is_empty());
        assert_eq!(check_file("crates/x/src/a.rs", "fn f() {}\n").len(), 1);
        let long = format!("//! Long.\n{}", "fn f() {}\n".repeat(MAX_LINES));
        assert_eq!(check_file("crates/x/src/a.rs", &long).len(), 1);
        assert!(check_file("crates/x/tests/a.rs", &long).is_empty());
        let with_tests = format!(
            "//! Short.\n\n#[cfg(test)]\nmod tests {{\n{}}}\n",
            "fn f() {}\n".repeat(MAX_LINES)
        );
        assert!(check_file("crates/x/src/a.rs", &with_tests).is_empty());
    }

    fn modules(files: &[(&str, &str)]) -> BTreeMap<Vec<String>, String> {
        files
            .iter()
            .map(|(path, text)| (module_path(Path::new(path)), text.to_string()))
            .collect()
    }

    #[test]
    fn a_loop_of_three_files_is_found_and_two_are_allowed() {
        let two = modules(&[
            ("lib.rs", "//! Root.\nmod a;\nmod b;\n"),
            ("a.rs", "//! A.\nuse crate::b::Thing;\n"),
            ("b.rs", "//! B.\nuse super::a;\n"),
        ]);
        assert!(loops(&two).is_empty());
        let three = modules(&[
            ("lib.rs", "//! Root.\n"),
            ("a.rs", "//! A.\nuse crate::{b::Thing, c};\n"),
            ("b/mod.rs", "//! B.\nfn f() { crate::c::g() }\n"),
            (
                "c.rs",
                "//! C.\nuse crate::a::{self, X};\n#[cfg(test)]\nmod tests { use crate::b; }\n",
            ),
        ]);
        assert_eq!(
            loops(&three),
            vec![vec!["crate::a", "crate::b", "crate::c"]]
        );
        // The test module's import of `b` is not an edge: without `b -> c`, no loop.
        let tests_only = modules(&[
            ("a.rs", "//! A.\nuse crate::b;\n"),
            ("b.rs", "//! B.\nuse crate::c;\n"),
            (
                "c.rs",
                "//! C.\n#[cfg(test)]\nmod tests { use crate::a; }\n",
            ),
        ]);
        assert!(loops(&tests_only).is_empty());
    }

    #[test]
    fn use_trees_expand_and_resolve_to_files() {
        assert_eq!(
            expand("crate::a::{b, c::{d, e}}"),
            vec![
                segments("crate::a::b"),
                segments("crate::a::c::d"),
                segments("crate::a::c::e")
            ]
        );
        let m = vec!["x".to_string(), "y".to_string()];
        assert_eq!(absolute(&m, &segments("super::z")), Some(segments("x::z")));
        assert_eq!(
            absolute(&m, &segments("super::super::z")),
            Some(segments("z"))
        );
    }
}
