//! The graph around a node, for recognising the subgraphs an exporter
//! writes for one IR operator: who reads each tensor, and a walk that takes
//! the subgraph's nodes one by one. A tensor inside the subgraph must be
//! read by the subgraph alone, since the IR operator that replaces it does
//! not compute it; every mismatch is an error naming the node where the
//! subgraph stops matching.

use super::fold::{self, Tensor};
use super::{Attrs, Importer, Value, constant_node};
use anyhow::{Result, anyhow, bail};
use std::collections::HashMap;
use tract_onnx::pb;

/// The nodes of an ONNX graph with the readers and producer of each tensor.
pub(super) struct Nodes<'a> {
    nodes: &'a [pb::NodeProto],
    readers: HashMap<&'a str, Vec<usize>>,
    producer: HashMap<&'a str, usize>,
}

impl<'a> Nodes<'a> {
    pub fn new(nodes: &'a [pb::NodeProto]) -> Nodes<'a> {
        let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut producer = HashMap::new();
        for (i, node) in nodes.iter().enumerate() {
            for input in node.input.iter().filter(|n| !n.is_empty()) {
                let list = readers.entry(input.as_str()).or_default();
                // Mul(x, x) reads x once as far as the walk is concerned.
                if list.last() != Some(&i) {
                    list.push(i);
                }
            }
            for output in &node.output {
                producer.insert(output.as_str(), i);
            }
        }
        Nodes {
            nodes,
            readers,
            producer,
        }
    }

    pub fn get(&self, i: usize) -> &'a pb::NodeProto {
        &self.nodes[i]
    }

    /// The nodes reading `tensor`, in graph order.
    pub fn readers(&self, tensor: &str) -> &[usize] {
        self.readers.get(tensor).map_or(&[], Vec::as_slice)
    }

    /// The first output of node `i`.
    pub fn output(&self, i: usize) -> &'a str {
        self.nodes[i].output.first().map_or("", String::as_str)
    }

    /// The value of constant `name`: an initializer, a folded constant, or
    /// a Constant node not imported yet (the walk runs ahead of the import).
    pub fn constant(&self, imp: &Importer, name: &str) -> Result<Tensor> {
        match (imp.values.get(name), self.producer.get(name)) {
            (Some(Value::Const(t)), _) => Ok(t.clone()),
            (None, Some(&p)) if self.nodes[p].op_type == "Constant" => {
                constant_node(&Attrs(&self.nodes[p]))
            }
            _ => bail!("`{name}` must be a constant"),
        }
    }

    /// The one value of constant `name`, if it has one value.
    pub fn scalar(&self, imp: &Importer, name: &str) -> Option<f32> {
        let t = self.constant(imp, name).ok()?;
        let v = t.floats();
        (v.len() == 1).then(|| v[0])
    }

    /// The operand of binary node `node` other than `tensor`.
    pub fn other<'n>(&self, node: &'n pb::NodeProto, tensor: &str) -> Result<&'n str> {
        match node.input.as_slice() {
            [a, b] if a == tensor => Ok(b),
            [a, b] if b == tensor => Ok(a),
            _ => Err(fail(
                node,
                format!("expected two inputs, one of them `{tensor}`"),
            )),
        }
    }

    /// The target dims of Reshape node `node` applied to `dims`.
    pub fn reshaped(
        &self,
        imp: &Importer,
        node: &pb::NodeProto,
        dims: &[usize],
    ) -> Result<Vec<usize>> {
        at(
            node,
            (|| {
                let shape = self.constant(imp, node.input.get(1).map_or("", String::as_str))?;
                let allowzero = Attrs(node).int("allowzero") == Some(1);
                fold::target(dims, &shape.int_values()?, allowzero)
            })(),
        )
    }

    /// The (axis, start, end) of Slice node `node` on a tensor of `dims`:
    /// one axis, step 1, bounds resolved as ONNX does (negative from the
    /// end, clamped to the axis).
    pub fn slice(
        &self,
        imp: &Importer,
        node: &pb::NodeProto,
        dims: &[usize],
    ) -> Result<(usize, usize, usize)> {
        at(
            node,
            (|| {
                let a = Attrs(node);
                let ints = |i: usize, attr: &str| -> Result<Option<Vec<i64>>> {
                    if imp.opset < 10 {
                        return Ok(a.ints(attr));
                    }
                    match node.input.get(i).filter(|n| !n.is_empty()) {
                        Some(n) => Ok(Some(self.constant(imp, n)?.int_values()?)),
                        None => Ok(None),
                    }
                };
                let (starts, ends) = (ints(1, "starts")?, ints(2, "ends")?);
                let axes = ints(3, "axes")?.unwrap_or_else(|| vec![0]);
                let steps = ints(4, "steps")?.unwrap_or_else(|| vec![1]);
                let (Some([start]), Some([end]), [axis], [1]) = (
                    starts.as_deref(),
                    ends.as_deref(),
                    axes.as_slice(),
                    steps.as_slice(),
                ) else {
                    bail!("only a Slice of one axis with step 1 is supported");
                };
                let axis = fold::axis(*axis, dims.len())?;
                let size = dims[axis] as i64;
                let bound = |v: i64| (if v < 0 { v + size } else { v }).clamp(0, size) as usize;
                Ok((axis, bound(*start), bound(*end)))
            })(),
        )
    }
}

/// Whether `node` is an `op` (alternatives separated by `|`).
fn is(node: &pb::NodeProto, op: &str) -> bool {
    op.split('|').any(|o| o == node.op_type)
}

/// `result` with its error naming `node`.
pub(super) fn at<T>(node: &pb::NodeProto, result: Result<T>) -> Result<T> {
    result.map_err(|e| fail(node, format!("{e:#}")))
}

/// The importer's one-line error for `node`.
pub(super) fn fail(node: &pb::NodeProto, message: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("node `{}` ({}): {message}", node.name, node.op_type)
}

/// The nodes of one subgraph, taken as the walk finds them.
pub(super) struct Walk<'n, 'a> {
    pub nodes: &'n Nodes<'a>,
    /// What is being recognised, for errors ("a layer norm").
    what: &'static str,
    taken: Vec<usize>,
}

impl<'n, 'a> Walk<'n, 'a> {
    /// A walk from node `first`.
    pub fn new(nodes: &'n Nodes<'a>, first: usize, what: &'static str) -> Self {
        Walk {
            nodes,
            what,
            taken: vec![first],
        }
    }

    pub fn node(&self, i: usize) -> &'a pb::NodeProto {
        self.nodes.get(i)
    }

    /// The nodes taken, for the importer to skip.
    pub fn finish(self) -> Vec<usize> {
        self.taken
    }

    fn take(&mut self, i: usize) {
        if !self.taken.contains(&i) {
            self.taken.push(i);
        }
    }

    /// An error at node `i` of the subgraph.
    pub fn fail(&self, i: usize, message: impl std::fmt::Display) -> anyhow::Error {
        fail(self.node(i), format!("{message} ({})", self.what))
    }

    /// The readers of node `from`'s output, which must be nodes of `ops`
    /// (one each, in any order; `Mul|Pow` is either); taken, in the order
    /// of `ops`.
    pub fn read_by(&mut self, from: usize, ops: &[&str]) -> Result<Vec<usize>> {
        let readers = self.nodes.readers(self.nodes.output(from));
        let mut found = Vec::with_capacity(ops.len());
        for op in ops {
            let next = readers
                .iter()
                .copied()
                .find(|&r| is(self.node(r), op) && !found.contains(&Some(r)));
            found.push(next);
        }
        match found.iter().copied().collect::<Option<Vec<usize>>>() {
            Some(found) if readers.len() == ops.len() => {
                found.iter().for_each(|&r| self.take(r));
                Ok(found)
            }
            _ => {
                let seen: Vec<&str> = readers
                    .iter()
                    .map(|&r| self.node(r).op_type.as_str())
                    .collect();
                Err(self.fail(
                    from,
                    format!("its output feeds {seen:?}; expected exactly {ops:?}"),
                ))
            }
        }
    }

    /// The one reader of node `from`'s output, which must be an `op`
    /// (`Mul|Div`: either); taken.
    pub fn next(&mut self, from: usize, op: &str) -> Result<usize> {
        let readers = self.nodes.readers(self.nodes.output(from));
        match readers {
            [r] if is(self.node(*r), op) => {
                self.take(*r);
                Ok(*r)
            }
            [r] => Err(self.fail(*r, format!("expected {op} here"))),
            _ => Err(self.fail(
                from,
                format!(
                    "its output feeds {} nodes; expected one {op}",
                    readers.len()
                ),
            )),
        }
    }

    /// The node computing `tensor`, which must be an `op` read by node
    /// `reader` alone (a constant computation inside the subgraph); taken.
    pub fn producer(&mut self, tensor: &str, op: &str, reader: usize) -> Result<usize> {
        let p = self.nodes.producer.get(tensor).copied();
        match p {
            Some(p) if self.node(p).op_type == op && self.nodes.readers(tensor) == [reader] => {
                self.take(p);
                Ok(p)
            }
            _ => Err(self.fail(
                reader,
                format!("input `{tensor}` must be computed by a {op} that only this node reads"),
            )),
        }
    }

    /// Checks that node `i`'s `perm` is `want`.
    pub fn perm(&self, i: usize, want: &[i64]) -> Result<()> {
        let perm = Attrs(self.node(i)).ints("perm");
        if perm.as_deref() != Some(want) {
            return Err(self.fail(i, format!("perm {perm:?}; expected {want:?}")));
        }
        Ok(())
    }

    /// Checks that Reshape node `i` takes `dims` to `want`.
    pub fn reshape(&self, imp: &Importer, i: usize, dims: &[usize], want: &[usize]) -> Result<()> {
        let got = self.nodes.reshaped(imp, self.node(i), dims)?;
        if got != want {
            return Err(self.fail(
                i,
                format!("reshapes {dims:?} to {got:?}; expected {want:?}"),
            ));
        }
        Ok(())
    }
}
