//! Every figure of both studies, rendered to SVG, keeps each of its texts
//! inside the canvas and clear of every other text.
//!
//! A text's box is estimated from the embedded DejaVu Sans (the bytes the
//! crate registers with plotters) with its real glyph advances and kerning,
//! as the PNG backend lays it out (the wider of the two renderings), and
//! from the font's ascent and descent under both the SVG's and the PNG's
//! vertical anchoring; a rotation turns the box about the text's anchor as
//! `transform="rotate(a, x, y)"` does.

mod common;

use ab_glyph::{Font, FontRef, ScaleFont};
use dlas_report::{FigureData, Inputs, compilers, dlas};

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// How far, in pixels, a box may cross the canvas' edge or another box.
const TOLERANCE: f64 = 1.0;

/// A text of an SVG and the box it covers, in canvas pixels.
#[derive(Debug, Clone)]
struct TextBox {
    text: String,
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

fn number(tag: &str, name: &str) -> f64 {
    attribute(tag, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {name} in {tag}"))
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The width in pixels of `text` as plotters lays it out at `size` (its
/// font size, 1.24 times the SVG's `font-size`): advances plus kerning.
fn advance(font: &FontRef, size: f64, text: &str) -> f64 {
    let scaled = font.as_scaled(size as f32);
    let mut width = 0f32;
    let mut previous = None;
    for c in text.chars() {
        let glyph = scaled.glyph_id(c);
        width += scaled.h_advance(glyph);
        if let Some(p) = previous {
            width += scaled.kern(p, glyph);
        }
        previous = Some(glyph);
    }
    f64::from(width)
}

/// The canvas size and the box of every `<text>` of `svg`.
fn text_boxes(svg: &str) -> ((f64, f64), Vec<TextBox>) {
    let font = FontRef::try_from_slice(FONT).unwrap();
    let em = f64::from(font.units_per_em().unwrap());
    let (ascent, descent) = (
        f64::from(font.ascent_unscaled()) / em,
        -f64::from(font.descent_unscaled()) / em,
    );
    let height_em = ascent + descent;
    let x_height = font
        .outline(font.glyph_id('x'))
        .map_or(0.5, |o| f64::from(o.bounds.max.y) / em);
    let head = &svg[..svg.find('>').unwrap()];
    let canvas = (number(head, "width"), number(head, "height"));
    let mut boxes = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text ") {
        rest = &rest[start..];
        let close = rest.find('>').unwrap();
        let tag = &rest[..close];
        let end = rest.find("</text>").unwrap();
        let text = unescape(rest[close + 1..end].trim());
        rest = &rest[end..];
        let (x, y, svg_size) = (number(tag, "x"), number(tag, "y"), number(tag, "font-size"));
        let size = svg_size * 1.24;
        let width = advance(&font, size, &text);
        let left = match attribute(tag, "text-anchor") {
            Some("middle") => -width / 2.0,
            Some("end") => -width,
            _ => 0.0,
        };
        // The baseline below the anchor in the SVG (`dy`) and in the PNG
        // (plotters puts it half the size below the box it anchors, the box
        // being one SVG em high); the text spans the font's ascent above
        // and its descent below, at the SVG's em and at the PNG's scale.
        let line = svg_size.floor();
        let (svg_baseline, png_top) = match attribute(tag, "dy") {
            Some("0.76em") => (0.76 * svg_size, 0.0),
            Some("0.5ex") => (0.5 * x_height * svg_size, -line / 2.0),
            Some("-0.5ex") => (-0.5 * x_height * svg_size, -line),
            other => panic!("unexpected dy {other:?} in {tag}"),
        };
        let png_baseline = png_top + size / 2.0;
        let top = (svg_baseline - ascent * svg_size).min(png_baseline - size * ascent / height_em);
        let bottom =
            (svg_baseline + descent * svg_size).max(png_baseline + size * descent / height_em);
        let corners = [
            (left, top),
            (left + width, top),
            (left, bottom),
            (left + width, bottom),
        ];
        let turn = attribute(tag, "transform").map_or(0, |t| {
            t.trim_start_matches("rotate(")
                .split(',')
                .next()
                .unwrap()
                .parse::<i32>()
                .unwrap()
        });
        let turned = corners.map(|(dx, dy)| match turn {
            0 => (x + dx, y + dy),
            90 => (x - dy, y + dx),
            180 => (x - dx, y - dy),
            270 => (x + dy, y - dx),
            other => panic!("unexpected rotation {other} in {tag}"),
        });
        let xs = turned.map(|p| p.0);
        let ys = turned.map(|p| p.1);
        boxes.push(TextBox {
            text,
            left: xs.iter().copied().fold(f64::INFINITY, f64::min),
            right: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            top: ys.iter().copied().fold(f64::INFINITY, f64::min),
            bottom: ys.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        });
    }
    (canvas, boxes)
}

/// Every text of `svg` that leaves the canvas or overlaps another text.
fn layout_problems(svg: &str) -> Vec<String> {
    let ((width, height), boxes) = text_boxes(svg);
    let mut problems = Vec::new();
    for b in &boxes {
        if b.left < -TOLERANCE
            || b.top < -TOLERANCE
            || b.right > width + TOLERANCE
            || b.bottom > height + TOLERANCE
        {
            problems.push(format!(
                "{:?} at ({:.0}, {:.0})-({:.0}, {:.0}) leaves the {width} x {height} canvas",
                b.text, b.left, b.top, b.right, b.bottom
            ));
        }
    }
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            let across = a.right.min(b.right) - a.left.max(b.left);
            let down = a.bottom.min(b.bottom) - a.top.max(b.top);
            if across > TOLERANCE && down > TOLERANCE {
                problems.push(format!(
                    "{:?} at ({:.0}, {:.0}) overlaps {:?} at ({:.0}, {:.0}) by {across:.0} x {down:.0} px",
                    a.text, a.left, a.top, b.text, b.left, b.top
                ));
            }
        }
    }
    problems
}

/// The layout problems of `figures`, each named by `study` and inputs.
fn check_all(study: &str, inputs_name: &str, figures: Vec<FigureData>) -> Vec<String> {
    figures
        .iter()
        .flat_map(|figure| {
            let svg = figure.svg().unwrap();
            layout_problems(&svg)
                .into_iter()
                .map(move |p| format!("{study} figure {} ({inputs_name}): {p}", figure.number))
        })
        .collect()
}

/// Each study's figures from the snapshot tests' inputs (the mocked
/// devices) and from `reproduce`'s (the mocked devices and the recorded
/// host runs), so host panels are laid out too.
#[test]
fn no_text_leaves_the_canvas_or_overlaps_another() {
    let mut problems = Vec::new();
    let dlas_figures = |inputs: &Inputs| -> Vec<FigureData> {
        dlas::FIGURES
            .iter()
            .map(|&n| dlas::figure(n, inputs).unwrap())
            .collect()
    };
    common::with_inputs(|inputs| {
        problems.extend(check_all("dlas", "mocked", dlas_figures(inputs)))
    });
    common::with_results(
        &["data/results/dlas/mock.csv", "data/results/dlas/host.csv"],
        |inputs| problems.extend(check_all("dlas", "mocked and host", dlas_figures(inputs))),
    );
    for (name, paths) in [
        ("mocked", &["data/results/compilers/mock.csv"][..]),
        (
            "mocked and host",
            &[
                "data/results/compilers/mock.csv",
                "data/results/compilers/host.csv",
            ][..],
        ),
    ] {
        common::with_compiler_results(paths, |inputs| {
            let figures = compilers::FIGURES
                .iter()
                .map(|&n| compilers::figure(n, inputs).unwrap())
                .collect();
            problems.extend(check_all("compilers", name, figures));
        });
    }
    assert!(
        problems.is_empty(),
        "{} layout problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The committed figures (what `reproduce` wrote, and `reproduce --check`
/// keeps current) pass the same check.
#[test]
fn committed_figures_keep_their_texts_apart() {
    let root = common::root();
    let mut problems = Vec::new();
    for dir in ["figures", "figures/compilers"] {
        let mut paths: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "svg"))
            .collect();
        paths.sort();
        for path in paths {
            let svg = std::fs::read_to_string(&path).unwrap();
            problems.extend(
                layout_problems(&svg)
                    .into_iter()
                    .map(|p| format!("{}: {p}", path.display())),
            );
        }
    }
    assert!(
        problems.is_empty(),
        "{} layout problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

fn text(x: i32, y: i32, anchor: &str, extra: &str, content: &str) -> String {
    format!(
        "<text x=\"{x}\" y=\"{y}\" dy=\"0.76em\" text-anchor=\"{anchor}\" font-family=\"sans-serif\" \
         font-size=\"12.9\" opacity=\"1\" fill=\"#000000\"{extra}>\n{content}\n</text>\n"
    )
}

fn tiny_svg(texts: &[String]) -> String {
    format!(
        "<svg width=\"200\" height=\"100\" viewBox=\"0 0 200 100\" xmlns=\"http://www.w3.org/2000/svg\">\n{}</svg>\n",
        texts.concat()
    )
}

/// The checker can fail: planted overlaps and a text past the edge are
/// reported, and texts set apart are not.
#[test]
fn planted_overlaps_and_overflows_are_reported() {
    let apart = tiny_svg(&[
        text(10, 10, "start", "", "speedup"),
        text(10, 40, "start", "", "slowdown"),
        text(190, 10, "end", "", "1x"),
    ]);
    assert_eq!(layout_problems(&apart), Vec::<String>::new());

    let same_spot = tiny_svg(&[
        text(10, 10, "start", "", "speedup"),
        text(10, 10, "start", "", "slowdown"),
    ]);
    let problems = layout_problems(&same_spot);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("overlaps"), "{problems:?}");

    // The real advances tell "WWWW" (wide) from "iiii" (narrow): the first
    // reaches the text after it, the second does not.
    let wide = tiny_svg(&[
        text(10, 10, "start", "", "WWWW"),
        text(50, 10, "start", "", "x"),
    ]);
    assert_eq!(layout_problems(&wide).len(), 1);
    let narrow = tiny_svg(&[
        text(10, 10, "start", "", "iiii"),
        text(50, 10, "start", "", "x"),
    ]);
    assert_eq!(layout_problems(&narrow), Vec::<String>::new());

    // A rotated label reaching into the one beside it, and a title wider
    // than the canvas.
    let rotated = tiny_svg(&[
        text(20, 5, "start", " transform=\"rotate(90, 20, 5)\"", "group"),
        text(14, 30, "start", "", "label"),
    ]);
    assert_eq!(layout_problems(&rotated).len(), 1);
    let clipped = tiny_svg(&[text(
        100,
        5,
        "middle",
        "",
        "Figure 8: a title longer than the canvas is wide",
    )]);
    let problems = layout_problems(&clipped);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("leaves the 200 x 100 canvas"));
}
