//! The report page in a real browser: Debian's chromium, headless, opens the
//! committed `figures/index.html` from the file system, runs the page's own
//! image check, and the test reads the resulting DOM. Every figure must load
//! and every section, table and verdict must be there. Copies of the page
//! with a figure broken or missing must be caught, so the check is shown to
//! fail. Without chromium the tests fail saying what to install; `cargo
//! xtask test` leaves them out then and counts them as skipped (`.ci/run`
//! installs chromium and may skip nothing).

use dlas_report::dlas::{FIGURES, TABLES, observations};
use std::path::{Path, PathBuf};
use std::process::Command;

fn page() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../figures/index.html")
}

/// The chromium binary: `$CHROMIUM`, else `chromium` or `chromium-browser`
/// on the path. A test without it fails: it must never pass unopened.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
        .expect(
            "needs chromium: `sudo apt-get install chromium` \
             or set CHROMIUM; `cargo xtask test` skips this test without it",
        )
}

/// The DOM after the page has loaded and checked its images.
fn dump_dom(chromium: &Path, page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.canonicalize().unwrap().display()))
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// What is wrong with the page, as a reviewer would see it.
fn problems(dom: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !dom.contains("data-images-checked=\"true\"") {
        problems.push("the page's image check did not run".to_string());
    }
    for section in ["claims", "figures", "tables", "environment"] {
        if !dom.contains(&format!("<section id=\"{section}\">")) {
            problems.push(format!("section {section} is missing"));
        }
    }
    for n in TABLES {
        if !dom.contains(&format!("<table id=\"table-{n}\">")) {
            problems.push(format!("table {n} is missing"));
        }
    }
    let verdict_rows = dom
        .split("<table id=\"verdicts\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .map_or(0, |t| t.matches("<tr>").count());
    if verdict_rows != 1 + observations::observations().len() {
        problems.push(format!(
            "the verdicts table has {verdict_rows} rows, not a header and one per observation"
        ));
    }
    for n in FIGURES {
        let Some(figure) = dom.split(&format!("<figure id=\"figure-{n}\">")).nth(1) else {
            problems.push(format!("figure {n} is missing"));
            continue;
        };
        let img = figure
            .split("<img")
            .nth(1)
            .and_then(|tag| tag.split('>').next())
            .unwrap_or("");
        if !img.contains("data-state=\"loaded\"") {
            problems.push(format!("figure {n} did not load"));
        }
        if !figure.contains("<figcaption>") || !figure.contains("Source:") {
            problems.push(format!("figure {n} has no caption naming its source"));
        }
    }
    problems
}

#[test]
fn every_figure_and_section_of_the_report_page_renders() {
    let chromium = chromium();
    let dom = dump_dom(&chromium, &page());
    assert_eq!(problems(&dom), Vec::<String>::new());
}

#[test]
fn a_broken_or_missing_figure_is_caught() {
    let chromium = chromium();
    let html = std::fs::read_to_string(page()).unwrap();
    let dir = tempfile::tempdir().unwrap();

    // Figure 2's image replaced by bytes that are not an SVG.
    let start = html.find("<figure id=\"figure-2\">").unwrap();
    let data = start + html[start..].find("base64,").unwrap() + "base64,".len();
    let end = data + html[data..].find('"').unwrap();
    let broken = format!("{}AAAA{}", &html[..data], &html[end..]);
    let path = dir.path().join("broken.html");
    std::fs::write(&path, broken).unwrap();
    let dom = dump_dom(&chromium, &path);
    assert_eq!(problems(&dom), ["figure 2 did not load"]);
    assert!(
        dom.contains("This figure did not load"),
        "the page tells the reader"
    );

    // Figure 5 gone from the page.
    let missing = html.replace("<figure id=\"figure-5\">", "<figure id=\"gone\">");
    let path = dir.path().join("missing.html");
    std::fs::write(&path, missing).unwrap();
    assert_eq!(
        problems(&dump_dom(&chromium, &path)),
        ["figure 5 is missing"]
    );
}
