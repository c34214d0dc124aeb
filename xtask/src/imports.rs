//! The import graph of a crate's modules, for tidy's loop check.
//!
//! A file depends on the files whose items it names. Names reach a file in
//! three ways, and all three are followed: paths from `crate::`, `super::`
//! and `self::`; bare paths through a child module (`gemm::gemm(..)` in the
//! file that declares `mod gemm;`, as `lib.rs` and `mod.rs` files write
//! them); and re-exports, so `crate::gemm::gemm` lands in
//! `gemm/driver.rs` when `gemm/mod.rs` says `pub use driver::gemm`, and
//! `crate::outln!` in the file whose `#[macro_export]` defines it. A
//! re-export is itself an edge of the file that writes it (`gemm/mod.rs`
//! names `driver`), while a file that only declares `mod x;` does not
//! depend on `x`. Everything under `#[cfg(test)]` is left out, and
//! comments, strings and character literals are blanked first so text in
//! them is never read as a path. A loop is a strongly connected set of
//! more than two files.

use std::collections::{BTreeMap, BTreeSet};

/// A module path below the crate root: `gemm/mod.rs` is `[gemm]`, `lib.rs`
/// and `main.rs` are `[]`.
pub type ModulePath = Vec<String>;

/// Import loops of more than two modules in `modules` (module path ->
/// source), each as the modules of its strongly connected set, by their
/// `crate::…` names, sorted. A set of files that import each other only in
/// pairs (a `mod.rs` whose children each use its items, with no child
/// using another) has no loop through three files, so it is not one.
pub fn loops(modules: &BTreeMap<ModulePath, String>) -> Vec<Vec<String>> {
    let graph = Graph::new(modules);
    let names: Vec<&ModulePath> = modules.keys().collect();
    let edges = graph.edges();
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 2 && !pairs_only(&edges, c))
        .map(|c| {
            c.into_iter()
                .map(|i| format!("crate::{}", names[i].join("::")))
                .collect()
        })
        .collect()
}

/// Whether the strongly connected set `component` has no simple cycle
/// through more than two files: exactly when every edge inside it goes
/// both ways and the pairs form a tree (an edge without its reverse, or a
/// cycle of pairs, closes a longer cycle).
fn pairs_only(edges: &[BTreeSet<usize>], component: &[usize]) -> bool {
    let inside = |v: usize| component.contains(&v);
    let mut pairs = 0;
    for &from in component {
        for &to in edges[from].iter().filter(|&&t| inside(t)) {
            if !edges[to].contains(&from) {
                return false;
            }
            pairs += 1;
        }
    }
    pairs / 2 == component.len() - 1
}

/// What one file says about names: its child modules, the names its `use`
/// items bind (to an absolute path, or `None` outside the crate), and the
/// absolute paths it names anywhere outside its tests.
#[derive(Default)]
struct Module {
    children: BTreeSet<String>,
    aliases: BTreeMap<String, Option<ModulePath>>,
    paths: Vec<ModulePath>,
}

struct Graph<'a> {
    index: BTreeMap<&'a ModulePath, usize>,
    modules: Vec<Module>,
}

impl<'a> Graph<'a> {
    fn new(sources: &'a BTreeMap<ModulePath, String>) -> Self {
        let index = sources.keys().enumerate().map(|(i, m)| (m, i)).collect();
        let mut modules: Vec<Module> = sources
            .iter()
            .map(|(path, text)| parse_file(path, &without_tests(&blank(text))))
            .collect();
        // `#[macro_export]` puts a macro at the crate root.
        let root = sources.keys().position(|m| m.is_empty());
        for (path, text) in sources {
            for name in exported_macros(&without_tests(&blank(text))) {
                if let Some(root) = root {
                    let target = path.iter().cloned().chain([name.clone()]).collect();
                    modules[root].aliases.insert(name, Some(target));
                }
            }
        }
        Graph { index, modules }
    }

    /// Edges: module -> the modules its paths resolve to.
    fn edges(&self) -> Vec<BTreeSet<usize>> {
        (0..self.modules.len())
            .map(|from| {
                self.modules[from]
                    .paths
                    .iter()
                    .filter_map(|p| self.resolve(p, 0))
                    .filter(|&to| to != from)
                    .collect()
            })
            .collect()
    }

    /// The module an absolute path lands in: down through child modules
    /// and through the `use` bindings of the module reached so far, to the
    /// module that defines the name (or `None` outside the crate).
    fn resolve(&self, path: &[String], depth: usize) -> Option<usize> {
        let mut at: ModulePath = Vec::new();
        for (i, name) in path.iter().enumerate() {
            let here = *self.index.get(&at)?;
            let mut child = at.clone();
            child.push(name.clone());
            if self.index.contains_key(&child) {
                at = child;
                continue;
            }
            return match self.modules[here].aliases.get(name) {
                Some(None) => None,
                Some(Some(target)) if depth < 16 => {
                    let full: Vec<String> = target.iter().chain(&path[i + 1..]).cloned().collect();
                    self.resolve(&full, depth + 1)
                }
                _ => Some(here),
            };
        }
        self.index.get(&at).copied()
    }
}

/// A file's module: its own text, and the paths of the modules it declares
/// inline (`mod x86 { ... }`), in whose text `super::` is the file's
/// module; their bindings stay theirs.
fn parse_file(module: &[String], code: &str) -> Module {
    let (outer, inline) = inline_modules(code);
    let mut m = parse(module, &outer);
    for (name, body) in inline {
        let mut path = module.to_vec();
        path.push(name);
        let inner = parse_file(&path, &body);
        m.paths.extend(inner.paths);
    }
    m
}

/// `code` with the bodies of its inline modules blanked, and each inline
/// module's name and body.
fn inline_modules(code: &str) -> (String, Vec<(String, String)>) {
    let bytes = code.as_bytes();
    let mut outer = code.to_string();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("mod ").map(|a| a + from) {
        from = at + 4;
        if at > 0 && is_path_byte(bytes[at - 1]) {
            continue;
        }
        let rest = &code[from..];
        let len = rest.bytes().take_while(|&b| is_path_byte(b)).count();
        let after = rest[len..].trim_start();
        if len == 0 || !after.starts_with('{') {
            continue;
        }
        let open = from + len + (rest[len..].len() - after.len());
        let mut depth = 0usize;
        let Some(close) = code[open..].char_indices().find_map(|(i, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(open + i)
        }) else {
            break;
        };
        found.push((rest[..len].to_string(), code[open + 1..close].to_string()));
        outer.replace_range(open + 1..close, &" ".repeat(close - open - 1));
        from = close;
    }
    (outer, found)
}

/// The names, bindings and paths of module `module`, whose text (blanked,
/// tests removed) is `code`.
fn parse(module: &[String], code: &str) -> Module {
    let mut m = Module::default();
    for line in code.lines() {
        let line = strip_visibility(strip_attributes(line.trim()));
        if let Some(name) = line.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            m.children.insert(name.trim().to_string());
        }
    }
    let absolute = |m: &Module, path: &[String]| absolute(module, &m.children, path);
    // `use` items: bindings, and each leaf is a path the file names.
    let uses = use_items(code);
    for range in &uses {
        for (path, binding) in expand(&code[range.clone()]) {
            let abs = absolute(&m, &path);
            if let Some(abs) = &abs {
                m.paths.push(abs.clone());
            }
            if let Some(binding) = binding {
                m.aliases.insert(binding, abs);
            }
        }
    }
    // Paths in the code: from `crate`, `super`, `self`, a child module or a
    // name a `use` bound to a module path of the crate; not in `use` items.
    let mut rest = code.to_string();
    for range in &uses {
        rest.replace_range(range.clone(), &" ".repeat(range.len()));
    }
    let code = rest.as_str();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = is_ident_start(bytes[i]) && (i == 0 || !is_path_byte(bytes[i - 1]));
        if !starts {
            i += 1;
            continue;
        }
        let end = i + path_len(&code[i..]);
        let path = segments(&code[i..end]);
        i = end.max(i + 1);
        if path.len() < 2 {
            continue;
        }
        let abs = match m.aliases.get(&path[0]) {
            Some(Some(target)) => Some(target.iter().chain(&path[1..]).cloned().collect()),
            _ => absolute(&m, &path),
        };
        if let Some(abs) = abs {
            m.paths.push(abs);
        }
    }
    m
}

/// A path as segments below the crate root, from module `module` whose
/// children are `children`; `None` for a path outside the crate.
fn absolute(module: &[String], children: &BTreeSet<String>, path: &[String]) -> Option<ModulePath> {
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
        Some("self") => rest = &rest[1..],
        Some(first) if children.contains(first) => {}
        _ => return None,
    }
    base.extend(rest.iter().filter(|s| *s != "self" && *s != "*").cloned());
    Some(base)
}

/// `#[cfg(x)] mod y;` -> `mod y;`.
fn strip_attributes(mut line: &str) -> &str {
    while let Some(rest) = line.strip_prefix("#[") {
        let mut depth = 1usize;
        let end = rest.char_indices().find_map(|(i, c)| {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(i)
        });
        match end {
            Some(e) => line = rest[e + 1..].trim_start(),
            None => return line,
        }
    }
    line
}

/// `pub(crate) mod x;` -> `mod x;`.
fn strip_visibility(line: &str) -> &str {
    let Some(rest) = line.strip_prefix("pub") else {
        return line;
    };
    let rest = rest.trim_start();
    match rest.strip_prefix('(') {
        Some(r) => r.find(')').map_or(rest, |c| r[c + 1..].trim_start()),
        None => rest,
    }
}

/// The byte ranges of the trees of the file's `use` items (the text
/// between `use` and `;`).
fn use_items(code: &str) -> Vec<std::ops::Range<usize>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("use ").map(|a| a + from) {
        from = at + 4;
        if at > 0 && is_path_byte(bytes[at - 1]) {
            continue;
        }
        if let Some(end) = code[from..].find(';') {
            out.push(from..from + end);
            from += end;
        }
    }
    out
}

/// The leaves of a use tree with the name each binds: `a::{b, c::{d as
/// e, self}, f::*}` -> `a::b` (b), `a::c::d` (e), `a::c` (c), `a::f::*` (no
/// binding).
pub fn expand(tree: &str) -> Vec<(ModulePath, Option<String>)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let (path, rename) = match tree.split_once(" as ") {
            Some((p, r)) => (p.trim(), Some(r.trim().to_string())),
            None => (tree, None),
        };
        let segs = segments(path);
        let binding = match segs.last().map(String::as_str) {
            Some("*") | None => None,
            Some(_) if rename.as_deref() == Some("_") => None,
            Some(_) if rename.is_some() => rename,
            Some("self") => segs.iter().rev().nth(1).cloned(),
            Some(last) => Some(last.to_string()),
        };
        return vec![(segs, binding)];
    };
    let prefix = segments(&tree[..open]);
    let close = tree.rfind('}').unwrap_or(tree.len());
    let inner = &tree[open + 1..close.max(open + 1)];
    let mut out = Vec::new();
    let (mut depth, mut from) = (0usize, 0);
    for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                let item = inner[from..i].trim();
                from = i + 1;
                if item.is_empty() {
                    continue;
                }
                for (p, binding) in expand(item) {
                    let self_only = p.len() == 1 && p[0] == "self";
                    let binding = if self_only {
                        prefix.last().cloned()
                    } else {
                        binding
                    };
                    out.push((prefix.iter().cloned().chain(p).collect(), binding));
                }
            }
            _ => {}
        }
    }
    out
}

pub fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The length of the path starting at `text` (identifiers joined by `::`).
fn path_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    loop {
        while i < bytes.len() && is_path_byte(bytes[i]) {
            i += 1;
        }
        let more =
            text[i..].starts_with("::") && text[i + 2..].bytes().next().is_some_and(is_ident_start);
        if !more {
            return i;
        }
        i += 2;
    }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Macros a `#[macro_export]` attribute puts at the crate root.
fn exported_macros(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[macro_export]") {
        rest = &rest[at + 15..];
        if let Some(m) = rest.find("macro_rules!") {
            let name = rest[m + 12..].trim_start();
            let len = name.bytes().take_while(|&b| is_path_byte(b)).count();
            out.push(name[..len].to_string());
        }
    }
    out
}

/// `code` without the items under `#[cfg(test)]` (a `mod x;`, or a braced
/// item such as the tests module, whichever ends first).
pub fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let semi = item.find(';').unwrap_or(item.len());
        let brace = item.find('{').unwrap_or(item.len());
        let end = if semi < brace {
            semi + 1
        } else {
            let mut depth = 0usize;
            let mut end = item.len();
            for (i, c) in item.char_indices().skip(brace) {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        // Keep the line count, for nothing but easier debugging.
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// `text` with comments, string literals and character literals replaced by
/// spaces (newlines kept), so braces and paths in them are not code.
pub fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let space = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
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
                    out.push(space(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            // A raw string: r"…", r#"…"#, …
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let closing: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body_from = i + 2 + hashes;
            let rest: String = chars[body_from..].iter().collect();
            let len = rest
                .find(&closing)
                .map_or(rest.len(), |e| rest[..e].chars().count());
            out.push_str("r\"");
            out.extend(chars[body_from..body_from + len].iter().map(|&c| space(c)));
            out.push('"');
            i = (body_from + len + closing.chars().count()).min(chars.len());
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(space(chars[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{7f}'
            let len = chars[i + 2..]
                .iter()
                .skip(1)
                .position(|&q| q == '\'')
                .map_or(0, |p| p + 1);
            out.push_str("' '");
            i += 3 + len;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
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
