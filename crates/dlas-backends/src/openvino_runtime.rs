//! OpenVINO, the vendor compiler of the papers' CPUs, through the `openvino`
//! crate with runtime linking: the C API library comes from the pinned
//! wheel that `cargo xtask setup` extracts into `.cache/openvino/<version>/`
//! (the wheel names it `libopenvino_c.so.2641`, which the crate's own finder
//! does not look for, so it is loaded by path), and nothing is linked or
//! downloaded at build time.
//!
//! Two compilers: `openvino-f32` pins the inference precision to f32, so
//! its outputs can be checked against ONNX Runtime's at 1e-4;
//! `openvino-native` leaves OpenVINO its default, the device's native
//! precision (bf16 on CPUs with AMX or AVX512-BF16, f32 elsewhere). Each
//! session reads back the precision that ran and names it in the provider.
//!
//! Batch 1 compiles with the LATENCY hint (one stream, one request); larger
//! batches with the THROUGHPUT hint, whose streams each run one request:
//! a timed run then keeps one request per stream in flight and counts as
//! that many batches ([`crate::Session::batches_per_run`]), which is how
//! OpenVINO's `benchmark_app` measures throughput.

use crate::{Session, SessionConfig};
use anyhow::{Context, Result, anyhow, bail};
use openvino::{
    CompiledModel, Core, DeviceType, ElementType, InferRequest, PartialShape, PropertyKey,
    RwPropertyKey, Shape, Tensor,
};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable that points at another `libopenvino_c` than the set-up one.
pub const LIBRARY_VAR: &str = "DLAS_OPENVINO_LIB";
/// The OpenVINO version `cargo xtask setup` installs.
pub const VERSION: &str = "2026.4.1";
const LIBRARY: &str = "libopenvino_c.so.2641";

/// Which precision a session infers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// `INFERENCE_PRECISION_HINT=f32`.
    F32,
    /// OpenVINO's default for the device.
    Native,
}

static LOADED: OnceLock<Result<String, String>> = OnceLock::new();

/// Where the library is expected: `$DLAS_OPENVINO_LIB`, else the setup
/// cache under `<project>/.cache/openvino/<version>/`.
pub fn library_path(project_root: &Path) -> PathBuf {
    std::env::var_os(LIBRARY_VAR).map_or_else(
        || {
            project_root
                .join(".cache/openvino")
                .join(VERSION)
                .join(LIBRARY)
        },
        PathBuf::from,
    )
}

/// Loads the library once per process and returns its build number. The
/// error says what to run.
pub fn init(library: &Path) -> Result<String> {
    let loaded = LOADED.get_or_init(|| {
        if !library.is_file() {
            return Err(format!(
                "the OpenVINO library {} does not exist; run `cargo xtask setup` \
                 (or set {LIBRARY_VAR} to a libopenvino_c of version >= 2025.1)",
                library.display()
            ));
        }
        openvino_sys::library::load_from(library.to_path_buf())
            .map_err(|e| format!("cannot load OpenVINO from {}: {e}", library.display()))?;
        Ok(openvino::version().build_number.to_string())
    });
    loaded.clone().map_err(|e| anyhow!("{e}"))
}

/// The loaded library's version, once [`init`] succeeded.
pub fn info() -> Result<String> {
    match LOADED.get() {
        Some(Ok(build)) => Ok(format!("OpenVINO {build}")),
        Some(Err(e)) => bail!("{e}"),
        None => bail!("OpenVINO is not initialised; call openvino_runtime::init first"),
    }
}

struct OpenVinoSession {
    /// Kept alive for the requests, which borrow nothing but need it.
    _compiled: CompiledModel,
    /// One request per stream: each timed run keeps all of them in flight.
    requests: Vec<InferRequest>,
    input: Tensor,
    half_io: bool,
    provider: String,
}

pub fn load(
    model: &Path,
    config: &SessionConfig,
    precision: Precision,
) -> Result<Box<dyn Session>> {
    info()?;
    let mut core = Core::new().map_err(|e| anyhow!("cannot start OpenVINO: {e}"))?;
    let cpu = DeviceType::CPU;
    let throughput = config.input_shape[0] > 1;
    let set = |core: &mut Core, key: RwPropertyKey, value: &str| {
        core.set_property(&cpu, &key, value)
            .map_err(|e| anyhow!("OpenVINO refused {key:?}={value}: {e}"))
    };
    set(
        &mut core,
        RwPropertyKey::InferenceNumThreads,
        &config.threads.to_string(),
    )?;
    set(
        &mut core,
        RwPropertyKey::HintPerformanceMode,
        if throughput { "THROUGHPUT" } else { "LATENCY" },
    )?;
    if precision == Precision::F32 {
        set(&mut core, RwPropertyKey::HintInferencePrecision, "f32")?;
    }
    let path = model
        .to_str()
        .ok_or_else(|| anyhow!("{} is not a UTF-8 path", model.display()))?;
    let mut network = core
        .read_model_from_file(path, "")
        .with_context(|| format!("OpenVINO cannot read {}", model.display()))?;
    let dims: Vec<i64> = config.input_shape.iter().map(|&d| d as i64).collect();
    network
        .reshape_single_input(&PartialShape::new_static(4, &dims)?)
        .with_context(|| {
            format!(
                "OpenVINO cannot give {} the input {dims:?}",
                model.display()
            )
        })?;
    let mut compiled = core
        .compile_model(&network, cpu)
        .with_context(|| format!("OpenVINO cannot compile {}", model.display()))?;
    let property = |compiled: &CompiledModel, key: RwPropertyKey| {
        compiled
            .get_property(&PropertyKey::Rw(key))
            .map(|v| v.to_string())
            .unwrap_or_else(|_| "?".into())
    };
    let ran_in = property(&compiled, RwPropertyKey::HintInferencePrecision);
    let streams = property(&compiled, RwPropertyKey::NumStreams);
    let threads = property(&compiled, RwPropertyKey::InferenceNumThreads);
    let requests_wanted = if throughput {
        streams.parse::<usize>().unwrap_or(1).max(1)
    } else {
        1
    };
    let requests = (0..requests_wanted)
        .map(|_| compiled.create_infer_request())
        .collect::<Result<Vec<_>, _>>()?;
    let element = if config.half_io {
        ElementType::F16
    } else {
        ElementType::F32
    };
    let input = Tensor::new(element, &Shape::new(&dims)?)?;
    let hint = if throughput { "THROUGHPUT" } else { "LATENCY" };
    let in_flight = if requests_wanted > 1 {
        format!(", {requests_wanted} requests in flight per timed run (its time is per batch)")
    } else {
        String::new()
    };
    let provider = format!(
        "{} CPU, inference precision {ran_in}, {hint} hint, {streams} stream(s), \
         {threads} thread(s){in_flight}",
        info()?
    );
    Ok(Box::new(OpenVinoSession {
        _compiled: compiled,
        requests,
        input,
        half_io: config.half_io,
        provider,
    }))
}

impl OpenVinoSession {
    fn set_input(&mut self, input: &[f32]) -> Result<()> {
        if self.half_io {
            let data = self.input.get_data_mut::<half::f16>()?;
            check_len(data.len(), input.len())?;
            for (d, x) in data.iter_mut().zip(input) {
                *d = half::f16::from_f32(*x);
            }
        } else {
            let data = self.input.get_data_mut::<f32>()?;
            check_len(data.len(), input.len())?;
            data.copy_from_slice(input);
        }
        for request in &mut self.requests {
            request.set_input_tensor(&self.input)?;
        }
        Ok(())
    }

    fn output(&self) -> Result<Vec<f32>> {
        let tensor = self.requests[0].get_output_tensor()?;
        Ok(match tensor.get_element_type()? {
            ElementType::F16 => tensor
                .get_data::<half::f16>()?
                .iter()
                .map(|x| x.to_f32())
                .collect(),
            _ => tensor.get_data::<f32>()?.to_vec(),
        })
    }
}

fn check_len(have: usize, given: usize) -> Result<()> {
    if have != given {
        bail!("OpenVINO's input holds {have} values, the run gave {given}");
    }
    Ok(())
}

impl Session for OpenVinoSession {
    fn run(&mut self, input: &[f32]) -> Result<Vec<f32>> {
        self.set_input(input)?;
        if let [request] = self.requests.as_mut_slice() {
            request.infer()?;
        } else {
            for request in &mut self.requests {
                request.infer_async()?;
            }
            for request in &mut self.requests {
                request.wait(-1)?;
            }
        }
        self.output()
    }

    fn batches_per_run(&self) -> usize {
        self.requests.len()
    }

    fn provider(&self) -> String {
        self.provider.clone()
    }
}
