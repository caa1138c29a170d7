//! The one-line description of this machine a node puts in its hello, and
//! the memory it has for a new model.
//!
//! CPU model and logical cores, RAM, and the GPUs llama.cpp offloads to
//! with their memory (or the GPU backend it was built with, when it sees no
//! GPU), e.g. `Intel(R) Xeon(R) Gold 6338, 16 cores, 62 GiB RAM, CUDA:
//! NVIDIA GeForce RTX 3090 24 GiB`. Read from `/proc` on Linux and from
//! llama.cpp's backend devices; a part that cannot be read is left out.

use std::sync::OnceLock;

use llama_cpp_2::{list_llama_ggml_backend_devices, LlamaBackendDeviceType};

/// A GPU llama.cpp can offload to, as its backend reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its name, e.g. `NVIDIA GeForce RTX 3090`.
    pub description: String,
    /// Its memory, in bytes.
    pub total: u64,
    /// Its memory free now, in bytes.
    pub free: u64,
}

/// The GPUs, discrete or integrated, this build of llama.cpp sees.
pub fn gpus() -> Vec<Gpu> {
    list_llama_ggml_backend_devices()
        .into_iter()
        .filter(|d| {
            matches!(
                d.device_type,
                LlamaBackendDeviceType::Gpu | LlamaBackendDeviceType::IntegratedGpu
            )
        })
        .map(|d| Gpu {
            description: if d.description.is_empty() {
                d.name
            } else {
                d.description
            },
            total: d.memory_total as u64,
            free: d.memory_free as u64,
        })
        .collect()
}

/// The GPU backend this build of llama.cpp offloads to, if any.
const GPU_BACKEND: Option<&str> = if cfg!(feature = "cuda") {
    Some("CUDA")
} else if cfg!(feature = "metal") {
    Some("Metal")
} else if cfg!(feature = "vulkan") {
    Some("Vulkan")
} else {
    None
};

/// This machine, described once and kept for every hello.
pub fn describe() -> &'static str {
    static DESCRIPTION: OnceLock<String> = OnceLock::new();
    DESCRIPTION.get_or_init(|| {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        let gpu = gpu_part(GPU_BACKEND, &gpus());
        description(&cpuinfo, &meminfo, cores, gpu.as_deref())
    })
}

/// Memory available for a new model now, in bytes: with GPUs, their free
/// memory together (llama.cpp puts every layer it can there); else RAM
/// (`MemAvailable` in `/proc/meminfo`); 0 where that cannot be read.
pub fn free_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let ram = field(&meminfo, "MemAvailable")
        .and_then(kibibytes)
        .map_or(0, |kib| kib.saturating_mul(1024));
    model_memory(&gpus(), ram)
}

/// The memory a new model's weights go to: the GPUs' free memory when
/// there are GPUs, else `ram`.
fn model_memory(gpus: &[Gpu], ram: u64) -> u64 {
    if gpus.is_empty() {
        ram
    } else {
        gpus.iter().map(|g| g.free).sum()
    }
}

/// The GPU part of the description: the backend and each GPU with its
/// memory, or the backend alone when no GPU is seen.
fn gpu_part(backend: Option<&str>, gpus: &[Gpu]) -> Option<String> {
    if gpus.is_empty() {
        return backend.map(str::to_owned);
    }
    let listed: Vec<String> = gpus
        .iter()
        .map(|g| format!("{} {} GiB", g.description, (g.total + (1 << 29)) >> 30))
        .collect();
    let listed = listed.join(", ");
    Some(match backend {
        Some(backend) => format!("{backend}: {listed}"),
        None => listed,
    })
}

/// The description from the text of `/proc/cpuinfo` and `/proc/meminfo`.
fn description(cpuinfo: &str, meminfo: &str, cores: usize, gpu: Option<&str>) -> String {
    let cpu = field(cpuinfo, "model name")
        .or_else(|| field(cpuinfo, "Model"))
        .map_or_else(|| format!("{} CPU", std::env::consts::ARCH), str::to_owned);
    let mut parts = vec![cpu];
    if cores > 0 {
        parts.push(format!("{cores} cores"));
    }
    if let Some(kib) = field(meminfo, "MemTotal").and_then(kibibytes) {
        parts.push(format!("{} GiB RAM", (kib + (1 << 19)) >> 20));
    }
    if let Some(gpu) = gpu {
        parts.push(gpu.to_owned());
    }
    superfluid_proto::hardware::bounded(&parts.join(", "))
}

/// The value of the first `name : value` line.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == name)
            .then(|| value.trim())
            .filter(|v| !v.is_empty())
    })
}

/// `24683784 kB` as a number of KiB.
fn kibibytes(value: &str) -> Option<u64> {
    value.strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\n";
    const MEMINFO: &str = "MemTotal:       65842012 kB\nMemFree:         1024 kB\n";

    #[test]
    fn describes_cpu_cores_ram_and_gpu_backend() {
        assert_eq!(
            description(CPUINFO, MEMINFO, 16, Some("CUDA")),
            "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz, 16 cores, 63 GiB RAM, CUDA"
        );
    }

    #[test]
    fn a_raspberry_pi_names_its_model_line() {
        let cpuinfo =
            "processor\t: 0\nBogoMIPS\t: 108.00\n\nModel\t\t: Raspberry Pi 5 Model B Rev 1.0\n";
        assert_eq!(
            description(cpuinfo, "MemTotal: 8245000 kB\n", 4, None),
            "Raspberry Pi 5 Model B Rev 1.0, 4 cores, 8 GiB RAM"
        );
    }

    #[test]
    fn gpus_are_named_with_their_memory_and_hold_the_model() {
        let gib = 1u64 << 30;
        let gpus = [
            Gpu {
                description: "NVIDIA GeForce RTX 3090".into(),
                total: 24 * gib,
                free: 20 * gib,
            },
            Gpu {
                description: "NVIDIA GeForce RTX 3060".into(),
                total: 12 * gib,
                free: 11 * gib,
            },
        ];
        assert_eq!(
            gpu_part(Some("CUDA"), &gpus).as_deref(),
            Some("CUDA: NVIDIA GeForce RTX 3090 24 GiB, NVIDIA GeForce RTX 3060 12 GiB")
        );
        assert_eq!(gpu_part(Some("CUDA"), &[]).as_deref(), Some("CUDA"));
        assert_eq!(gpu_part(None, &[]), None);
        // The weights go to the GPUs: their free memory, not the RAM's.
        assert_eq!(model_memory(&gpus, 60 * gib), 31 * gib);
        assert_eq!(model_memory(&[], 60 * gib), 60 * gib);
    }

    #[test]
    fn a_cpu_build_sees_no_gpu_and_offers_its_ram() {
        if GPU_BACKEND.is_none() {
            assert_eq!(gpus(), []);
        }
        assert!(free_memory() > 0);
    }

    #[test]
    fn unreadable_parts_are_left_out() {
        let text = description("", "", 0, None);
        assert_eq!(text, format!("{} CPU", std::env::consts::ARCH));
    }

    #[test]
    fn this_machine_has_a_description() {
        assert!(!describe().is_empty());
        assert!(describe().len() <= superfluid_proto::hardware::MAX_HARDWARE_LEN);
    }
}
