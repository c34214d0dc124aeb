//! ONNX for the zoo's graphs: export with weights (float32, float16, int8
//! QDQ) and evaluation through tract.
//!
//! This is the only crate of the flow that knows the ONNX protobuf schema;
//! it keeps tract's heavy build out of the zoo, so crates that only need the
//! graph IR (the native engine) compile in seconds.

pub mod evaluate;
pub mod export;
pub mod import;

pub use evaluate::{Evaluation, Runner, evaluate, run_bytes};
pub use export::{
    ActivationQuant, Dtype, ExportOptions, INPUT, OPSET, OUTPUT, Qdq, WeightQuant, decode, export,
    export_with, model, model_with, tensor_name,
};
pub use import::import;
