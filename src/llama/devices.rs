//! The compute devices ggml's backends found (CPU, GPUs, accelerators), and how
//! a model is spread over several GPUs (`--split-mode`, `--tensor-split`,
//! `--main-gpu`), checked against those devices before llama.cpp sees them.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::CStr;

use llama_cpp_sys_2 as sys;

use super::error::InvalidParam;

/// What kind of device ggml reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Gpu,
    /// A GPU sharing the host's memory.
    IntegratedGpu,
    /// An accelerator used together with the CPU (BLAS, AMX).
    Accelerator,
    Other,
}

/// One device, with its memory as the backend reports it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    pub description: String,
    pub kind: DeviceKind,
    pub free_bytes: u64,
    pub total_bytes: u64,
}

impl Device {
    /// Whether layers can be offloaded to it (what `--main-gpu` and
    /// `--tensor-split` count).
    pub fn is_gpu(&self) -> bool {
        matches!(self.kind, DeviceKind::Gpu | DeviceKind::IntegratedGpu)
    }

    /// `CUDA0 (NVIDIA H100 80GB HBM3, 79.1 of 79.6 GiB free)`.
    pub fn summary(&self) -> String {
        const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
        let memory = if self.total_bytes > 0 {
            format!(
                ", {:.1} of {:.1} GiB free",
                self.free_bytes as f64 / GIB,
                self.total_bytes as f64 / GIB
            )
        } else {
            String::new()
        };
        format!("{} ({}{memory})", self.name, self.description)
    }
}

/// `devices:` and one line per device with its memory (`--version`, `--stats`).
pub fn report() -> String {
    let lines: Vec<String> = devices()
        .iter()
        .map(|d| format!("  {}", d.summary()))
        .collect();
    format!("devices:\n{}", lines.join("\n"))
}

/// On a CUDA build that found no GPU, the one line that says so (shepherd then runs
/// the model on the CPU); `None` on other builds and where a GPU was found.
pub fn no_gpu_notice() -> Option<String> {
    if !cfg!(feature = "cuda") || devices().iter().any(Device::is_gpu) {
        return None;
    }
    let why = match super::cuda_init_error() {
        // What cudart says when libcuda.so.1 is missing, too.
        Some(e) if e.contains("driver version is insufficient") => {
            format!("{e}: no NVIDIA driver, or one too old for this build")
        }
        Some(e) => e.to_string(),
        None => "no CUDA GPU visible".to_string(),
    };
    Some(format!("no CUDA device found ({why}): running on the CPU"))
}

/// A `CUDA_CUBLAS=dlopen` build's cuBLAS (`ffi/cublas_open.c`): `Some(Ok(file name))`
/// of the library it opened, `Some(Err(()))` when the box has none; `None` on other
/// builds, where cuBLAS is linked.
pub fn cublas_library() -> Option<Result<String, ()>> {
    #[cfg(cublas_dlopen)]
    {
        extern "C" {
            fn shepherd_cublas_library() -> *const std::ffi::c_char;
        }
        // SAFETY: takes no arguments; opens the library once (pthread_once) and returns
        // NULL or a pointer to a NUL-terminated name that lives for the whole process
        // (a string literal or the environment's value).
        let name = unsafe { shepherd_cublas_library() };
        if name.is_null() {
            return Some(Err(()));
        }
        // SAFETY: non-null, NUL-terminated and never freed (above).
        let name = unsafe { CStr::from_ptr(name) };
        Some(Ok(name.to_string_lossy().into_owned()))
    }
    #[cfg(not(cublas_dlopen))]
    None
}

/// Every device ggml's backends registered, in ggml's order.
pub fn devices() -> Vec<Device> {
    handles().into_iter().map(|(_, device)| device).collect()
}

/// How many devices take offloaded layers: GPUs, and the workers `--rpc` added
/// (ggml reports those as GPUs). Types only; no device is asked for its memory.
pub fn offload_device_count() -> usize {
    super::init();
    // SAFETY: a pure query of the registered backends; no arguments.
    let count = unsafe { sys::ggml_backend_dev_count() };
    (0..count)
        .filter(|index| {
            // SAFETY: `index` is below `ggml_backend_dev_count()`; a non-null handle
            // is owned by ggml's registry for the whole process.
            let dev = unsafe { sys::ggml_backend_dev_get(*index) };
            // SAFETY: `dev` is a valid device handle (checked non-null first).
            !dev.is_null()
                && matches!(
                    kind_of(unsafe { sys::ggml_backend_dev_type(dev) }),
                    DeviceKind::Gpu | DeviceKind::IntegratedGpu
                )
        })
        .count()
}

/// Every device with ggml's handle for it (what `rpc` lends).
pub(super) fn handles() -> Vec<(sys::ggml_backend_dev_t, Device)> {
    super::init();
    // SAFETY: a pure query of the registered backends; no arguments.
    let count = unsafe { sys::ggml_backend_dev_count() };
    (0..count).filter_map(device).collect()
}

fn device(index: usize) -> Option<(sys::ggml_backend_dev_t, Device)> {
    // SAFETY: `index` is below `ggml_backend_dev_count()`; the handle is owned by
    // ggml's registry and lives as long as the process.
    let dev = unsafe { sys::ggml_backend_dev_get(index) };
    if dev.is_null() {
        return None;
    }
    let text = |ptr: *const std::ffi::c_char| {
        if ptr.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated and owned by the device; copied at once.
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned()
    };
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: `dev` is a valid device handle (above); the out-pointers are valid
    // `size_t`s on this stack frame.
    let (name, description, kind) = unsafe {
        sys::ggml_backend_dev_memory(dev, &mut free, &mut total);
        (
            text(sys::ggml_backend_dev_name(dev)),
            text(sys::ggml_backend_dev_description(dev)),
            sys::ggml_backend_dev_type(dev),
        )
    };
    let device = Device {
        name,
        description,
        kind: kind_of(kind),
        free_bytes: free as u64,
        total_bytes: total as u64,
    };
    Some((dev, device))
}

fn kind_of(raw: sys::ggml_backend_dev_type) -> DeviceKind {
    match raw {
        sys::GGML_BACKEND_DEVICE_TYPE_CPU => DeviceKind::Cpu,
        sys::GGML_BACKEND_DEVICE_TYPE_GPU => DeviceKind::Gpu,
        sys::GGML_BACKEND_DEVICE_TYPE_IGPU => DeviceKind::IntegratedGpu,
        sys::GGML_BACKEND_DEVICE_TYPE_ACCEL => DeviceKind::Accelerator,
        _ => DeviceKind::Other,
    }
}

/// How the layers go over several GPUs (`--split-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SplitMode {
    /// Everything on `--main-gpu`.
    None,
    /// Whole layers (and their KV cache) per GPU, llama.cpp's default.
    #[default]
    Layer,
    /// Layers split by rows across the GPUs (tensor parallelism where supported).
    Row,
}

impl SplitMode {
    pub const NAMES: [&'static str; 3] = ["none", "layer", "row"];

    pub fn parse(name: &str) -> Option<SplitMode> {
        match name {
            "none" => Some(SplitMode::None),
            "layer" => Some(SplitMode::Layer),
            "row" => Some(SplitMode::Row),
            _ => None,
        }
    }

    pub(super) fn raw(self) -> sys::llama_split_mode {
        match self {
            SplitMode::None => sys::LLAMA_SPLIT_MODE_NONE,
            SplitMode::Layer => sys::LLAMA_SPLIT_MODE_LAYER,
            SplitMode::Row => sys::LLAMA_SPLIT_MODE_ROW,
        }
    }
}

/// The model's placement over the GPUs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSplit {
    pub mode: SplitMode,
    /// The GPU for everything with `SplitMode::None`, and for the small tensors
    /// otherwise (an index among the GPUs, from 0).
    pub main_gpu: usize,
    /// Each GPU's share of the layers (or rows), in GPU order; empty: by free memory.
    pub tensor_split: Vec<f32>,
}

impl GpuSplit {
    /// Checks the split against `gpus` (the number of GPUs this build found) and
    /// llama.cpp's device limit, before anything is loaded; only when layers go
    /// to a GPU (`offloading`) does the number of GPUs matter.
    pub fn check(
        &self,
        offloading: bool,
        gpus: usize,
        max_devices: usize,
    ) -> Result<(), InvalidParam> {
        let split = &self.tensor_split;
        if split.iter().any(|share| !share.is_finite() || *share < 0.0) {
            return Err(InvalidParam::new(
                "tensor_split",
                "each share must be a number of 0 or more",
            ));
        }
        if !split.is_empty() && split.iter().all(|share| *share == 0.0) {
            return Err(InvalidParam::new(
                "tensor_split",
                "at least one share must be more than 0",
            ));
        }
        if split.len() > max_devices {
            let message = format!(
                "{} shares, but llama.cpp handles at most {max_devices} devices",
                split.len()
            );
            return Err(InvalidParam::new("tensor_split", message));
        }
        if !offloading {
            return Ok(());
        }
        if gpus == 0 && (self.main_gpu > 0 || !split.is_empty() || self.mode != SplitMode::Layer) {
            let message =
                "this build found no GPU (see shepherd --version); the model runs on the CPU";
            return Err(InvalidParam::new("gpu_split", message));
        }
        if gpus > 0 && self.main_gpu >= gpus {
            let message = format!(
                "GPU {} does not exist: this machine has {gpus} (0 to {})",
                self.main_gpu,
                gpus - 1
            );
            return Err(InvalidParam::new("main_gpu", message));
        }
        if split.len() > gpus {
            let message = format!("{} shares for {gpus} GPU(s)", split.len());
            return Err(InvalidParam::new("tensor_split", message));
        }
        Ok(())
    }
}

/// llama.cpp's limit on devices (the length of its `tensor_split` array).
pub fn max_devices() -> usize {
    // SAFETY: a pure function with no arguments.
    unsafe { sys::llama_max_devices() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(mode: SplitMode, main_gpu: usize, shares: &[f32]) -> GpuSplit {
        GpuSplit {
            mode,
            main_gpu,
            tensor_split: shares.to_vec(),
        }
    }

    #[test]
    fn impossible_splits_are_refused_with_the_reason() {
        let refused =
            |s: GpuSplit, offloading, gpus| s.check(offloading, gpus, 16).unwrap_err().message;
        let ok = |s: GpuSplit, offloading, gpus| s.check(offloading, gpus, 16).is_ok();
        // Plain defaults fit every machine, GPU or not.
        assert!(ok(GpuSplit::default(), true, 0) && ok(GpuSplit::default(), true, 2));
        assert!(ok(split(SplitMode::Row, 1, &[3.0, 1.0]), true, 2));
        assert!(ok(split(SplitMode::None, 1, &[]), true, 2));
        // Shares that are no shares.
        assert!(refused(split(SplitMode::Layer, 0, &[1.0, -1.0]), true, 2).contains("0 or more"));
        assert!(refused(split(SplitMode::Layer, 0, &[f32::NAN]), true, 2).contains("0 or more"));
        assert!(refused(split(SplitMode::Layer, 0, &[0.0, 0.0]), true, 2).contains("more than 0"));
        assert!(refused(split(SplitMode::Layer, 0, &[1.0; 17]), false, 0).contains("at most 16"));
        // More GPUs than there are.
        assert!(
            refused(split(SplitMode::Layer, 0, &[1.0, 1.0, 1.0]), true, 2)
                .contains("3 shares for 2")
        );
        assert!(refused(split(SplitMode::None, 2, &[]), true, 2).contains("GPU 2 does not exist"));
        assert!(refused(split(SplitMode::Row, 0, &[]), true, 0).contains("no GPU"));
        assert!(refused(split(SplitMode::Layer, 1, &[]), true, 0).contains("no GPU"));
        // Nothing offloaded: the GPUs do not matter, the shares still must make sense.
        assert!(ok(split(SplitMode::Row, 3, &[1.0, 1.0, 1.0]), false, 0));
    }

    #[test]
    fn the_cpu_is_among_the_devices_with_its_memory() {
        let all = devices();
        let cpu = all
            .iter()
            .find(|d| d.kind == DeviceKind::Cpu)
            .expect("a CPU device");
        assert!(!cpu.name.is_empty(), "{all:?}");
        assert!(!cpu.is_gpu());
        assert!(cpu.summary().starts_with(&cpu.name), "{}", cpu.summary());
        assert!(max_devices() >= 1);
        assert_eq!(SplitMode::parse("row"), Some(SplitMode::Row));
        assert_eq!(SplitMode::parse("tensor"), None);
    }
}
