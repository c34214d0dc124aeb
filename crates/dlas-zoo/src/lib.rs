//! The model zoo: a typed graph IR with shapes, the study's networks written
//! in it, deterministic weights, and ONNX export.
//!
//! The zoo is the single source of truth for a network's structure. Devices
//! read layer workloads from [`Graph`]; runtimes read the ONNX files that
//! `dlas-onnx` writes from the same graph. The zoo has no heavy dependency.

pub mod ir;
pub mod networks;
pub mod qdq;
pub mod quant;
pub mod reference;
pub mod weights;

pub use ir::{Attention, Conv, Graph, GraphBuilder, Node, NodeId, Op, Pool, Shape};
pub use networks::{Network, all, block_models, catalogue, find, modern};
