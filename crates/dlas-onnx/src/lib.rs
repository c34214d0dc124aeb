//! ONNX for the zoo's graphs: export with weights (and, later, import).
//!
//! This is the only crate of the flow that knows the ONNX protobuf schema;
//! it keeps tract's heavy build out of the zoo, so crates that only need the
//! graph IR (the native engine, compression) compile in seconds.

pub mod export;
pub mod import;

pub use export::{INPUT, OPSET, OUTPUT, decode, export, model};
pub use import::import;
