//! Windows of convolutions and pools: kernel, stride and the padding
//! conventions of every opset (`pads`, `auto_pad`, ceil mode), checked
//! and turned into the IR's symmetric padding plus end padding.

use super::{Attrs, MAX_SIZE};
use anyhow::{Result, bail, ensure};
use dlas_zoo::Pool;

/// A pooling window on an input of `shape`: ceil mode and asymmetric
/// pads (Caffe's pooling, `SAME_UPPER`) become padding at the end.
pub(super) fn pool(a: &Attrs, [_, h, w]: [usize; 3]) -> Result<Pool> {
    let kernel = square(a, "kernel_shape")?;
    let stride = square(a, "strides")?;
    ensure!(
        a.ints("dilations")
            .unwrap_or_default()
            .iter()
            .all(|&d| d == 1),
        "dilated pooling is not supported"
    );
    let [top, left, bottom, right] = window_pads(a, [h, w], kernel, stride)?;
    let ceil = a.int("ceil_mode") == Some(1);
    let axis = |size: usize, begin: usize, end: usize| -> Result<(usize, usize)> {
        let span = size + begin + end;
        ensure!(
            span >= kernel,
            "kernel {kernel} is larger than the padded {h}x{w} input"
        );
        let mut out = (span - kernel) / stride + 1;
        // Ceil mode adds a last, partial window, unless it would start in
        // the end padding (PyTorch's and ONNX Runtime's rule).
        if ceil && !(span - kernel).is_multiple_of(stride) && out * stride < size + begin {
            out += 1;
        }
        ensure!(
            (out - 1) * stride < size + begin && begin < kernel,
            "a pooling window lies entirely in the padding"
        );
        // The end padding the last window reaches, at least the start's:
        // more than that adds no window.
        let end = ((out - 1) * stride + kernel)
            .saturating_sub(size + begin)
            .max(begin);
        ensure!(
            (size + begin + end - kernel) / stride + 1 == out,
            "pads {:?} with more padding at the start are not supported",
            [top, left, bottom, right]
        );
        Ok((begin, end - begin))
    };
    let (rows, cols) = (axis(h, top, bottom)?, axis(w, left, right)?);
    ensure!(
        rows == cols,
        "pooling padded differently in height and width is not supported"
    );
    Ok(Pool {
        kernel,
        stride,
        padding: rows.0,
        end: rows.1,
    })
}

/// A window's (top, left, bottom, right) padding on an `hw` input, from
/// `pads` or `auto_pad`.
pub(super) fn window_pads(
    a: &Attrs,
    hw: [usize; 2],
    kernel: usize,
    stride: usize,
) -> Result<[usize; 4]> {
    match a.string("auto_pad").as_deref() {
        None | Some("NOTSET" | "") => match a.ints("pads") {
            None => Ok([0; 4]),
            Some(p) if p.len() == 4 => {
                let mut pads = [0; 4];
                for (o, &v) in pads.iter_mut().zip(&p) {
                    *o = size("padding", v, 0)?;
                }
                Ok(pads)
            }
            Some(p) => bail!("pads {p:?}; expected 4 values"),
        },
        Some("VALID") => Ok([0; 4]),
        Some(mode @ ("SAME_UPPER" | "SAME_LOWER")) => {
            let mut pads = [0; 4];
            for (i, &s) in hw.iter().enumerate() {
                let total = ((s.div_ceil(stride) - 1) * stride + kernel).saturating_sub(s);
                let (small, big) = (total / 2, total - total / 2);
                (pads[i], pads[i + 2]) = if mode == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                };
            }
            Ok(pads)
        }
        Some(other) => bail!("auto_pad `{other}` is not supported"),
    }
}

/// A square attribute (kernel_shape, strides): equal values, default 1.
pub(super) fn square(a: &Attrs, attr: &str) -> Result<usize> {
    let v = match a.ints(attr) {
        None => 1,
        Some(v) if v.windows(2).all(|w| w[0] == w[1]) && !v.is_empty() => v[0],
        Some(v) => bail!("non-uniform `{attr}` {v:?} is not supported"),
    };
    size(attr, v, 1)
}

/// An attribute or dimension `v` as a size of at least `min`.
pub(super) fn size(what: &str, v: i64, min: usize) -> Result<usize> {
    match usize::try_from(v) {
        Ok(n) if (min..=MAX_SIZE).contains(&n) => Ok(n),
        _ => bail!("{what} is {v}; valid: {min}..={MAX_SIZE}"),
    }
}
