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

/// Import loops of more than two files among the modules under `src`
/// (`crate::imports` says what an import is).
pub fn import_loops(src: &Path) -> Result<Vec<Vec<String>>> {
    let mut modules = BTreeMap::new();
    for file in rust_files(src)? {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        modules.insert(module_path(rel), std::fs::read_to_string(&file)?);
    }
    Ok(crate::imports::loops(&modules))
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
        use crate::imports::loops;
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

    /// The loops the first tidy missed (issue 42): through a bare child
    /// path in `lib.rs`, through a `pub use` of `lib.rs` and a `mod.rs`,
    /// and through an exported macro; each one edge away from none.
    #[test]
    fn loops_through_lib_mod_and_pub_use_are_found() {
        use crate::imports::loops;
        let lib = "//! Root.\nmod a;\nmod b;\n#[cfg(test)]\nmod testing;\npub use a::X;\npub fn root() { b::g() }\n";
        // lib -> b (bare child path), b -> a (through lib's `pub use`), a -> lib.
        let planted = modules(&[
            ("lib.rs", lib),
            ("a.rs", "//! A.\npub struct X;\nfn h() { crate::root() }\n"),
            ("b.rs", "//! B.\nuse crate::X;\npub fn g() {}\n"),
        ]);
        assert_eq!(
            loops(&planted),
            vec![vec!["crate::", "crate::a", "crate::b"]]
        );
        // Without `a -> lib`, `crate::X` is `a`, not `lib`: no loop.
        let clean = modules(&[
            ("lib.rs", lib),
            (
                "a.rs",
                "//! A.\npub struct X;\n// crate::root()\nconst S: &str = \"crate::root\";\n",
            ),
            ("b.rs", "//! B.\nuse crate::X;\npub fn g() {}\n"),
        ]);
        assert!(loops(&clean).is_empty(), "{:?}", loops(&clean));
        // mod.rs re-exports: c -> m::f lands in m/d.rs (and m/mod.rs names d),
        // d -> e, e -> c.
        let through_mod = modules(&[
            ("lib.rs", "//! Root.\nmod c;\nmod e;\nmod m;\n"),
            ("c.rs", "//! C.\nfn k() { crate::m::f() }\n"),
            (
                "m/mod.rs",
                "//! M.\nmod d;\npub(crate) use d::{f, Y as Z};\n",
            ),
            ("m/d.rs", "//! D.\npub fn f() { crate::e::q() }\n"),
            ("e.rs", "//! E.\npub fn q() { super::c::k() }\n"),
        ]);
        assert_eq!(
            loops(&through_mod),
            vec![vec!["crate::c", "crate::e", "crate::m::d"]]
        );
        // Inside an inline module, `super::` is the file's own module.
        let inline = modules(&[
            (
                "lib.rs",
                "//! Root.\nmod v;\nmod w;\npub fn r() { w::f() }\n",
            ),
            (
                "v.rs",
                "//! V.\npub trait T {}\nmod x86 { use super::T; pub struct A; impl T for A {} }\npub use x86::A;\n",
            ),
            ("w.rs", "//! W.\nuse crate::v::{A, T};\npub fn f() {}\n"),
        ]);
        assert!(loops(&inline).is_empty(), "{:?}", loops(&inline));
        // An exported macro lives in its file, not at the root.
        let macros = modules(&[
            ("lib.rs", "//! Root.\nmod p;\nmod q;\npub use q::Q;\n"),
            (
                "p.rs",
                "//! P.\n#[macro_export]\nmacro_rules! say { () => {} }\n",
            ),
            ("q.rs", "//! Q.\npub struct Q;\nfn s() { crate::say!() }\n"),
        ]);
        assert!(loops(&macros).is_empty(), "{:?}", loops(&macros));
    }

    /// A loop planted in a real crate through its `lib.rs` re-exports is
    /// found, and the crate as it is has none.
    #[test]
    fn a_loop_planted_in_the_engine_through_lib_is_found() {
        use crate::imports::loops;
        let src = crate::project_root().join("crates/dlas-engine/src");
        let mut engine = BTreeMap::new();
        for file in rust_files(&src).unwrap() {
            let rel = file.strip_prefix(&src).unwrap().to_path_buf();
            engine.insert(module_path(&rel), std::fs::read_to_string(&file).unwrap());
        }
        assert!(loops(&engine).is_empty(), "{:?}", loops(&engine));
        // `aligned` is a leaf that `engine.rs` reaches; naming the engine
        // through the crate root's `pub use engine::Engine` closes a loop.
        let aligned = engine.get_mut(&vec!["aligned".to_string()]).unwrap();
        aligned.push_str("\npub fn planted() -> usize { std::mem::size_of::<crate::Engine>() }\n");
        let found = loops(&engine);
        assert!(
            found
                .iter()
                .any(|l| l.contains(&"crate::aligned".to_string())
                    && l.contains(&"crate::engine".to_string())),
            "{found:?}"
        );
    }

    #[test]
    fn use_trees_expand_and_text_outside_code_is_blank() {
        use crate::imports::{blank, expand, segments, without_tests};
        let leaves: Vec<_> = expand("crate::a::{b, c::{d as e, self}, f::*}");
        assert_eq!(
            leaves,
            vec![
                (segments("crate::a::b"), Some("b".to_string())),
                (segments("crate::a::c::d"), Some("e".to_string())),
                (segments("crate::a::c::self"), Some("c".to_string())),
                (segments("crate::a::f::*"), None),
            ]
        );
        let text = "let s = \"crate::x {\"; let c = '{'; // crate::y\n/* crate::z */ r#\"{\"#";
        let blanked = blank(text);
        assert!(
            !blanked.contains("crate::") && !blanked.contains('{'),
            "{blanked}"
        );
        assert_eq!(blanked.lines().count(), text.lines().count());
        let code = "mod a;\n#[cfg(test)]\nmod t;\nfn f() {}\n#[cfg(test)]\nmod tests { fn g() { {} } }\nfn h() {}\n";
        let kept = without_tests(code);
        assert!(kept.contains("fn f()") && kept.contains("fn h()"), "{kept}");
        assert!(!kept.contains("mod t;") && !kept.contains("fn g"), "{kept}");
    }
}
