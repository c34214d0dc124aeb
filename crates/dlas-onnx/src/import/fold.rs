//! Constants and the shape computations on them that exporters write:
//! PyTorch's `x.view(x.size(0), -1)` becomes Shape, Gather, Unsqueeze,
//! Concat and Reshape, and old exporters compute target shapes with Cast,
//! arithmetic and ConstantOfShape. The importer evaluates all of these at
//! import time, so the graph IR only ever sees their constant results.
//!
//! Every size read from the file is checked before anything is allocated:
//! a malformed file is an error, never a panic or a huge allocation.

use anyhow::{Context, Result, bail, ensure};
use tract_onnx::pb::{self, tensor_proto::DataType};

/// The most elements a constant may have (a large classifier's weights
/// have about 10^8; a folded shape has a handful).
const MAX_ELEMENTS: usize = 1 << 28;

/// The most elements a folded tensor may gain over its inputs (Concat,
/// ConstantOfShape): shapes have a handful, and a file must not make the
/// importer allocate gigabytes from a few bytes.
const MAX_FOLDED: usize = 1 << 20;

/// The operators [`fold`] evaluates when all their inputs are constants.
pub(super) const FOLDED: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Cast",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Reshape",
    "ConstantOfShape",
];

/// A constant tensor: float32 weights, or int64 shapes and indices.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tensor {
    pub dims: Vec<usize>,
    pub data: Data,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Data {
    Float(Vec<f32>),
    Int(Vec<i64>),
}

/// The element count of `dims`, if it is within [`MAX_ELEMENTS`].
pub(super) fn count(dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .with_context(|| format!("a tensor of shape {dims:?} is too large"))
}

impl Tensor {
    pub fn ints(dims: Vec<usize>, values: Vec<i64>) -> Tensor {
        Tensor {
            dims,
            data: Data::Int(values),
        }
    }

    /// Reads an initializer or a Constant's value.
    pub fn from_proto(t: &pb::TensorProto) -> Result<Tensor> {
        let dims = t
            .dims
            .iter()
            .map(|&d| usize::try_from(d).ok())
            .collect::<Option<Vec<_>>>()
            .with_context(|| format!("tensor `{}` has dimensions {:?}", t.name, t.dims))?;
        let n = count(&dims)?;
        let raw = |size: usize| -> Result<Option<std::slice::ChunksExact<'_, u8>>> {
            if t.raw_data.is_empty() {
                return Ok(None);
            }
            ensure!(
                t.raw_data.len() == n * size,
                "tensor `{}` has {} bytes for {n} values",
                t.name,
                t.raw_data.len()
            );
            Ok(Some(t.raw_data.chunks_exact(size)))
        };
        let data = match DataType::try_from(t.data_type) {
            Ok(DataType::Float) => Data::Float(match raw(4)? {
                Some(c) => c
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                None => t.float_data.clone(),
            }),
            Ok(DataType::Double) => Data::Float(match raw(8)? {
                Some(c) => c
                    .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32)
                    .collect(),
                None => t.double_data.iter().map(|&v| v as f32).collect(),
            }),
            Ok(DataType::Int64) => Data::Int(match raw(8)? {
                Some(c) => c
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect(),
                None => t.int64_data.clone(),
            }),
            Ok(DataType::Int32) => Data::Int(match raw(4)? {
                Some(c) => c
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
                    .collect(),
                None => t.int32_data.iter().map(|&v| v as i64).collect(),
            }),
            // Dropout's training_mode flag (opset 12 on).
            Ok(DataType::Bool) => Data::Int(match raw(1)? {
                Some(c) => c.map(|b| i64::from(b[0])).collect(),
                None => t.int32_data.iter().map(|&v| v as i64).collect(),
            }),
            _ => bail!(
                "tensor `{}` has data type {}; supported: float, double, int32, int64, bool",
                t.name,
                t.data_type
            ),
        };
        let tensor = Tensor { dims, data };
        ensure!(
            tensor.len() == n,
            "tensor `{}` has {} values for shape {:?}",
            t.name,
            tensor.len(),
            tensor.dims
        );
        Ok(tensor)
    }

    pub fn len(&self) -> usize {
        match &self.data {
            Data::Float(v) => v.len(),
            Data::Int(v) => v.len(),
        }
    }

    /// The values as floats (weights; an int constant converts).
    pub fn floats(&self) -> Vec<f32> {
        match &self.data {
            Data::Float(v) => v.clone(),
            Data::Int(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }

    /// The values as integers (shapes, axes, pads).
    pub fn int_values(&self) -> Result<Vec<i64>> {
        match &self.data {
            Data::Int(v) => Ok(v.clone()),
            Data::Float(_) => bail!("a float tensor where integers (a shape, axes) are expected"),
        }
    }

    /// The tensor with its values gathered at flat positions `at`, shaped `dims`.
    fn select(&self, dims: Vec<usize>, at: &[usize]) -> Tensor {
        let data = match &self.data {
            Data::Float(v) => Data::Float(at.iter().map(|&i| v[i]).collect()),
            Data::Int(v) => Data::Int(at.iter().map(|&i| v[i]).collect()),
        };
        Tensor { dims, data }
    }
}

/// `axis` of a rank-`rank` tensor, negative values counting from the end.
pub(super) fn axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    ensure!(
        (-r..r).contains(&axis),
        "axis {axis} of a rank-{rank} tensor"
    );
    Ok(axis.rem_euclid(r.max(1)) as usize)
}

/// Folds `op` on constant `inputs` (`None`: an input left out; for
/// ConstantOfShape, its `value` attribute is the second); `attr` reads an
/// integer attribute, `axes` are Squeeze's and Unsqueeze's.
pub(super) fn fold(
    op: &str,
    inputs: &[Option<&Tensor>],
    attr: &dyn Fn(&str) -> Option<i64>,
    axes: Option<Vec<i64>>,
) -> Result<Tensor> {
    let input = |i: usize| -> Result<&Tensor> {
        inputs
            .get(i)
            .copied()
            .flatten()
            .with_context(|| format!("{op} lacks input {i}"))
    };
    match op {
        "Add" | "Sub" | "Mul" | "Div" => arithmetic(op, input(0)?, input(1)?),
        "Cast" => {
            let x = input(0)?;
            let to = attr("to").context("Cast without `to`")?;
            let data = match DataType::try_from(to as i32) {
                Ok(DataType::Float | DataType::Double | DataType::Float16) => {
                    Data::Float(x.floats())
                }
                Ok(DataType::Int64 | DataType::Int32 | DataType::Int16 | DataType::Int8) => {
                    Data::Int(match &x.data {
                        Data::Int(v) => v.clone(),
                        Data::Float(v) => v.iter().map(|&f| f as i64).collect(),
                    })
                }
                _ => bail!("Cast to data type {to} is not supported"),
            };
            Ok(Tensor {
                dims: x.dims.clone(),
                data,
            })
        }
        "Gather" => {
            let (x, indices) = (input(0)?, input(1)?);
            ensure!(
                x.dims.len() == 1,
                "Gather of a constant is supported on 1-D data (a shape)"
            );
            let at = indices
                .int_values()?
                .into_iter()
                .map(|i| axis(i, x.dims[0]))
                .collect::<Result<Vec<_>>>()?;
            Ok(x.select(indices.dims.clone(), &at))
        }
        "Unsqueeze" | "Squeeze" => {
            let x = input(0)?;
            let dims = squeeze(op, &x.dims, axes.as_deref())?;
            Ok(Tensor { dims, ..x.clone() })
        }
        "Concat" => {
            let xs = (0..inputs.len()).map(input).collect::<Result<Vec<_>>>()?;
            let first = xs.first().context("Concat of nothing")?;
            let a = axis(
                attr("axis").context("Concat without `axis`")?,
                first.dims.len(),
            )?;
            concat(&xs, a)
        }
        "Reshape" => {
            let (x, shape) = (input(0)?, input(1)?);
            let dims = target(&x.dims, &shape.int_values()?, attr("allowzero") == Some(1))?;
            Ok(Tensor { dims, ..x.clone() })
        }
        "ConstantOfShape" => {
            let dims = input(0)?
                .int_values()?
                .into_iter()
                .map(|d| usize::try_from(d).ok())
                .collect::<Option<Vec<_>>>()
                .context("ConstantOfShape of a negative dimension")?;
            let n = count(&dims)?;
            ensure!(
                n <= MAX_FOLDED,
                "ConstantOfShape of shape {dims:?} is too large"
            );
            let data = match inputs.get(1).copied().flatten().map(|v| &v.data) {
                None => Data::Float(vec![0.0; n]),
                Some(Data::Float(v)) => Data::Float(vec![*v.first().context("empty value")?; n]),
                Some(Data::Int(v)) => Data::Int(vec![*v.first().context("empty value")?; n]),
            };
            Ok(Tensor { dims, data })
        }
        _ => bail!("{op} of constants is not folded"),
    }
}

/// Element-wise arithmetic of equal shapes or with a one-value operand.
fn arithmetic(op: &str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let dims = match (a.len(), b.len()) {
        _ if a.dims == b.dims => a.dims.clone(),
        (_, 1) if b.dims.len() <= a.dims.len() => a.dims.clone(),
        (1, _) if a.dims.len() <= b.dims.len() => b.dims.clone(),
        _ => bail!(
            "{op} of constants of shapes {:?} and {:?} is not folded",
            a.dims,
            b.dims
        ),
    };
    let n = count(&dims)?;
    let pick = |len: usize, i: usize| if len == 1 { 0 } else { i };
    let data = match (&a.data, &b.data) {
        (Data::Float(x), Data::Float(y)) => Data::Float(
            (0..n)
                .map(|i| {
                    let (p, q) = (x[pick(x.len(), i)], y[pick(y.len(), i)]);
                    match op {
                        "Add" => p + q,
                        "Sub" => p - q,
                        "Mul" => p * q,
                        _ => p / q,
                    }
                })
                .collect(),
        ),
        (Data::Int(x), Data::Int(y)) => Data::Int(
            (0..n)
                .map(|i| {
                    let (p, q) = (x[pick(x.len(), i)], y[pick(y.len(), i)]);
                    match op {
                        "Add" => p.checked_add(q),
                        "Sub" => p.checked_sub(q),
                        "Mul" => p.checked_mul(q),
                        _ => p.checked_div(q),
                    }
                    .with_context(|| format!("{op} of {p} and {q} overflows"))
                })
                .collect::<Result<_>>()?,
        ),
        _ => bail!("{op} of a float and an integer constant"),
    };
    Ok(Tensor { dims, data })
}

fn concat(xs: &[&Tensor], axis: usize) -> Result<Tensor> {
    let first = xs[0];
    let mut dims = first.dims.clone();
    for x in &xs[1..] {
        ensure!(
            x.dims.len() == dims.len()
                && x.dims
                    .iter()
                    .zip(&dims)
                    .enumerate()
                    .all(|(i, (a, b))| i == axis || a == b),
            "Concat of constants of shapes {:?} and {:?}",
            first.dims,
            x.dims
        );
        dims[axis] = dims[axis]
            .checked_add(x.dims[axis])
            .context("Concat overflows")?;
    }
    ensure!(
        count(&dims)? <= MAX_FOLDED,
        "Concat of constants to shape {dims:?} is too large"
    );
    let outer: usize = dims[..axis].iter().product();
    let mut data = match &first.data {
        Data::Float(_) => Data::Float(Vec::new()),
        Data::Int(_) => Data::Int(Vec::new()),
    };
    for o in 0..outer {
        for x in xs {
            let inner: usize = x.dims[axis..].iter().product();
            match (&mut data, &x.data) {
                (Data::Float(out), Data::Float(v)) => {
                    out.extend_from_slice(&v[o * inner..][..inner])
                }
                (Data::Int(out), Data::Int(v)) => out.extend_from_slice(&v[o * inner..][..inner]),
                _ => bail!("Concat of float and integer constants"),
            }
        }
    }
    Ok(Tensor { dims, data })
}

/// The dims after Squeeze (`axes`, or every 1 when none) or Unsqueeze.
pub(super) fn squeeze(op: &str, dims: &[usize], axes: Option<&[i64]>) -> Result<Vec<usize>> {
    if op == "Squeeze" {
        let Some(axes) = axes else {
            return Ok(dims.iter().copied().filter(|&d| d != 1).collect());
        };
        let axes = axes
            .iter()
            .map(|&a| axis(a, dims.len()))
            .collect::<Result<Vec<_>>>()?;
        ensure!(
            axes.iter().all(|&a| dims[a] == 1),
            "Squeeze of axes {axes:?} of shape {dims:?}"
        );
        Ok(dims
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect())
    } else {
        let axes = axes.context("Unsqueeze without axes")?;
        let rank = dims.len() + axes.len();
        let axes = axes
            .iter()
            .map(|&a| axis(a, rank))
            .collect::<Result<Vec<_>>>()?;
        let mut rest = dims.iter();
        (0..rank)
            .map(|i| {
                if axes.contains(&i) {
                    Ok(1)
                } else {
                    rest.next().copied().context("Unsqueeze with repeated axes")
                }
            })
            .collect()
    }
}

/// The dims a Reshape of `dims` to `shape` gives: 0 copies the input's
/// dimension (unless `allowzero`), one -1 takes what is left.
pub(super) fn target(dims: &[usize], shape: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    let total = count(dims)?;
    let mut out = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        out.push(match d {
            0 if !allowzero => *dims
                .get(i)
                .with_context(|| format!("Reshape copies dimension {i} of {dims:?}"))?,
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            d => usize::try_from(d)
                .ok()
                .with_context(|| format!("Reshape to {shape:?}"))?,
        });
    }
    let known = count(&out)?;
    if let Some(i) = infer {
        ensure!(
            known > 0 && total.is_multiple_of(known),
            "Reshape of {dims:?} to {shape:?}"
        );
        out[i] = total / known;
    }
    ensure!(count(&out)? == total, "Reshape of {dims:?} to {shape:?}");
    Ok(out)
}
