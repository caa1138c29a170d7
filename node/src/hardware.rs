//! The one-line description of this machine a node puts in its hello.
//!
//! CPU model and logical cores, RAM, and the GPU backend llama.cpp was built
//! with, e.g. `Intel(R) Xeon(R) Gold 6338, 16 cores, 62 GiB RAM, CUDA`. Read
//! from `/proc` on Linux; a part that cannot be read is left out.

use std::sync::OnceLock;

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
        description(&cpuinfo, &meminfo, cores, GPU_BACKEND)
    })
}

/// Memory available for a new model now, in bytes (`MemAvailable` in
/// `/proc/meminfo`); 0 where that cannot be read.
pub fn free_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    field(&meminfo, "MemAvailable")
        .and_then(kibibytes)
        .map_or(0, |kib| kib.saturating_mul(1024))
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
