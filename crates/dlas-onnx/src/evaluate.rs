//! Runs a zoo graph through tract, returning the network output and, when
//! asked, every node's output.
//!
//! This is the reference evaluator of compression: calibration reads the
//! per-node tensors, fidelity reads the logits. It exports the graph with
//! [`ExportOptions::node_outputs`] so intermediate tensors survive tract's
//! optimiser, then runs `into_optimized()`.

use crate::export::{Dtype, ExportOptions, model_with};
use dlas_zoo::Graph;
use dlas_zoo::weights::Weights;
use prost::Message;
use tract_onnx::prelude::*;

pub use dlas_zoo::reference::Evaluation;

/// Evaluates `graph` with `weights` on `input` (`batch` samples of the
/// graph's input shape), in the numerics `options` describe.
pub fn evaluate(
    graph: &Graph,
    weights: &Weights,
    options: &ExportOptions,
    input: &[f32],
    batch: usize,
    per_node: bool,
) -> anyhow::Result<Evaluation> {
    let [c, h, w] = graph.input_shape();
    anyhow::ensure!(
        batch > 0 && input.len() == batch * c * h * w,
        "input of {} values does not fill a batch of {batch} samples of shape {c}x{h}x{w} ({} values)",
        input.len(),
        batch * c * h * w
    );
    let options = ExportOptions {
        node_outputs: per_node,
        ..*options
    };
    let bytes = model_with(graph, weights, &options)?.encode_to_vec();
    let shape = [batch, c, h, w];
    let outputs = run_bytes(&bytes, options.dtype, &shape, input)?;
    let output = outputs[0].clone();
    let nodes = per_node.then(|| {
        let mut nodes = Vec::with_capacity(graph.nodes.len());
        nodes.push(input.to_vec());
        nodes.extend(outputs[1..].iter().cloned());
        nodes.push(output.clone());
        nodes
    });
    Ok(Evaluation { output, nodes })
}

/// Runs ONNX `bytes` on one input of `shape` and returns every graph output as float32.
pub fn run_bytes(
    bytes: &[u8],
    dtype: Dtype,
    shape: &[usize],
    input: &[f32],
) -> anyhow::Result<Vec<Vec<f32>>> {
    Runner::new(bytes, dtype, shape)?.run(input)
}

/// An ONNX model optimised by tract for one input shape, to run many inputs.
pub struct Runner {
    plan: Arc<TypedSimplePlan>,
    dtype: Dtype,
    shape: Vec<usize>,
}

impl Runner {
    /// Loads and optimises `bytes` for inputs of `shape` in `dtype`.
    pub fn new(bytes: &[u8], dtype: Dtype, shape: &[usize]) -> anyhow::Result<Runner> {
        let fact = match dtype {
            Dtype::F32 => f32::fact(shape),
            Dtype::F16 => f16::fact(shape),
        };
        let plan = tract_onnx::onnx()
            .model_for_read(&mut &bytes[..])?
            .with_input_fact(0, fact.into())?
            .into_optimized()?
            .into_runnable()?;
        Ok(Runner {
            plan,
            dtype,
            shape: shape.to_vec(),
        })
    }

    /// The float type a model declares for its input.
    pub fn input_dtype(bytes: &[u8]) -> anyhow::Result<Dtype> {
        use tract_onnx::pb::{tensor_proto::DataType, type_proto};
        let model = crate::export::decode(bytes)?;
        let elem = model
            .graph
            .as_ref()
            .and_then(|g| g.input.first())
            .and_then(|i| i.r#type.as_ref())
            .and_then(|t| match &t.value {
                Some(type_proto::Value::TensorType(t)) => Some(t.elem_type),
                _ => None,
            })
            .ok_or_else(|| anyhow::anyhow!("the model declares no tensor input"))?;
        match elem {
            e if e == DataType::Float as i32 => Ok(Dtype::F32),
            e if e == DataType::Float16 as i32 => Ok(Dtype::F16),
            e => anyhow::bail!(
                "the model's input has ONNX element type {e}; expected float or float16"
            ),
        }
    }

    /// Runs one input (flattened, of the runner's shape); returns every output as float32.
    pub fn run(&self, input: &[f32]) -> anyhow::Result<Vec<Vec<f32>>> {
        let tensor = Tensor::from_shape(&self.shape, input)?;
        let tensor = match self.dtype {
            Dtype::F32 => tensor,
            Dtype::F16 => tensor.cast_to::<f16>()?.into_owned(),
        };
        let outputs = self.plan.run(tvec!(tensor.into()))?;
        outputs
            .iter()
            .map(|t| {
                let t = t.cast_to::<f32>()?;
                Ok(t.to_plain_array_view::<f32>()?.iter().copied().collect())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::{export, export_with};
    use dlas_core::Dataset;
    use dlas_zoo::{Op, weights};

    fn net(name: &str) -> (Graph, Weights) {
        let g = (dlas_zoo::find(Dataset::Cifar10, name).unwrap().build)();
        let w = weights::generate(&g, 1);
        (g, w)
    }

    #[test]
    fn default_options_give_exports_bytes() {
        let (g, w) = net("mobilenetv2");
        assert_eq!(
            export_with(&g, &w, &ExportOptions::default()).unwrap(),
            export(&g, &w)
        );
    }

    /// Declaring intermediate outputs changes nothing about the result, and
    /// each node's tensor has its shape and its operator's signature.
    #[test]
    fn per_node_outputs_match_the_graph() {
        let (g, w) = net("resnet18");
        let x = weights::input(&g, 4, 2);
        let plain = evaluate(&g, &w, &ExportOptions::default(), &x, 2, false).unwrap();
        let full = evaluate(&g, &w, &ExportOptions::default(), &x, 2, true).unwrap();
        assert_eq!(plain.output, full.output);
        let nodes = full.nodes.unwrap();
        assert_eq!(nodes.len(), g.nodes.len());
        for (node, values) in g.nodes.iter().zip(&nodes) {
            assert_eq!(
                values.len(),
                2 * node.shape.iter().product::<usize>(),
                "{}",
                node.name
            );
            if node.op == Op::Relu {
                assert!(values.iter().all(|v| *v >= 0.0), "{}", node.name);
            }
        }
        assert_eq!(nodes[0], x);
    }

    /// QDQ needs a quantisation for every layer input and is float32 only.
    #[test]
    fn incomplete_or_float16_qdq_is_refused() {
        use crate::export::{Dtype, Qdq};
        let (g, w) = net("mobilenetv1");
        let empty = Qdq {
            activations: vec![None; g.nodes.len()],
            weights: vec![None; g.nodes.len()],
        };
        let options = ExportOptions {
            qdq: Some(&empty),
            ..ExportOptions::default()
        };
        let e = export_with(&g, &w, &options).unwrap_err().to_string();
        assert!(
            e.contains("no activation quantisation for tensor input"),
            "{e}"
        );
        let options = ExportOptions {
            dtype: Dtype::F16,
            qdq: Some(&empty),
            ..ExportOptions::default()
        };
        let e = export_with(&g, &w, &options).unwrap_err().to_string();
        assert!(e.contains("float32 only"), "{e}");
    }

    #[test]
    fn an_input_of_the_wrong_size_is_refused() {
        let (g, w) = net("mobilenetv1");
        let e = evaluate(&g, &w, &ExportOptions::default(), &[0.0; 100], 1, false).unwrap_err();
        assert!(e.to_string().contains("3x32x32"), "{e}");
    }
}
