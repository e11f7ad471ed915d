//! CUDA device probing through cudarc, and the preflight that refuses a CUDA variant the
//! machine cannot run: a toolkit newer than the driver supports, or compiled architectures
//! that do not include the device. cudarc panics when the driver library is missing, so the
//! library's presence is checked first and "no CUDA driver" is an ordinary answer.

use serde::Serialize;

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Probe {
    /// Whether a CUDA driver library could be loaded.
    pub driver_present: bool,
    /// Why no device is usable, when none is.
    pub reason: Option<String>,
    /// CUDA version the driver supports, as `major.minor` (cuDriverGetVersion).
    pub driver_cuda_version: Option<String>,
    /// Devices.
    pub devices: Vec<Device>,
}

/// One device.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Device {
    /// Ordinal.
    pub ordinal: usize,
    /// Name.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Free memory in bytes.
    pub free_bytes: u64,
    /// Total memory in bytes.
    pub total_bytes: u64,
}

impl Probe {
    /// The answer on a machine without a driver.
    pub(crate) fn no_driver() -> Probe {
        Probe {
            driver_present: false,
            reason: Some("no CUDA driver".into()),
            driver_cuda_version: None,
            devices: vec![],
        }
    }
}

/// Probe the driver and devices. Never panics.
pub fn probe() -> Probe {
    // SAFETY: is_culib_present only tries to dlopen the driver library and closes it.
    #[allow(unsafe_code)]
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    if !present {
        return Probe::no_driver();
    }
    // A driver that loads but misbehaves must not take pinforge down either.
    match std::panic::catch_unwind(probe_devices) {
        Ok(p) => p,
        Err(_) => Probe {
            driver_present: true,
            reason: Some("the CUDA driver failed while probing".into()),
            driver_cuda_version: None,
            devices: vec![],
        },
    }
}

fn probe_devices() -> Probe {
    use cudarc::driver::{result, CudaContext};
    let mut p = Probe {
        driver_present: true,
        reason: None,
        driver_cuda_version: None,
        devices: vec![],
    };
    if let Err(e) = result::init() {
        p.reason = Some(format!("cuInit failed: {e}"));
        return p;
    }
    let mut v: std::os::raw::c_int = 0;
    // SAFETY: cuDriverGetVersion writes one int through a valid pointer.
    #[allow(unsafe_code)]
    let rc = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    if rc == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        p.driver_cuda_version = Some(format!("{}.{}", v / 1000, (v % 1000) / 10));
    }
    let n = match CudaContext::device_count() {
        Ok(n) => n.max(0) as usize,
        Err(e) => {
            p.reason = Some(format!("cannot count devices: {e}"));
            return p;
        }
    };
    if n == 0 {
        p.reason = Some("the CUDA driver reports no device".into());
    }
    for ordinal in 0..n {
        let Ok(ctx) = CudaContext::new(ordinal) else {
            continue;
        };
        let (free, total) = ctx.mem_get_info().unwrap_or((0, 0));
        p.devices.push(Device {
            ordinal,
            name: ctx.name().unwrap_or_else(|_| "unknown".into()),
            compute_capability: ctx.compute_capability().unwrap_or((0, 0)),
            free_bytes: free as u64,
            total_bytes: total as u64,
        });
    }
    p
}

/// Why a CUDA build runs on the CPU on this machine (no driver, no device), or None when a
/// device is there.
pub fn cpu_reason(probe: &Probe) -> Option<String> {
    if !probe.devices.is_empty() {
        return None;
    }
    Some(if probe.driver_present {
        probe
            .reason
            .clone()
            .unwrap_or_else(|| "no CUDA device".into())
    } else {
        "no CUDA driver".into()
    })
}

/// Why a CUDA build cannot run on this machine's GPU, or None when it can.
///
/// `toolkit` is the nvcc version the build used (`13.1.115`), `archs` its
/// `CMAKE_CUDA_ARCHITECTURES` (`90;120`, `native`, `all`, with optional `-real`/`-virtual`).
///
/// No device at all is not a refusal: a CUDA build that loads without a driver (no VMM pool,
/// the runtime shipped beside it) runs on the CPU there, and [`cpu_reason`] says why.
pub fn preflight(probe: &Probe, toolkit: Option<&str>, archs: Option<&str>) -> Option<String> {
    let dev = probe.devices.first()?;
    if let (Some(tk), Some(drv)) = (toolkit, probe.driver_cuda_version.as_deref()) {
        let major = |s: &str| -> Option<(u32, u32)> {
            let mut it = s.split('.');
            Some((
                it.next()?.parse().ok()?,
                it.next().unwrap_or("0").parse().ok()?,
            ))
        };
        if let (Some(t), Some(d)) = (major(tk), major(drv)) {
            // Minor-version compatibility holds within a major version; across majors the
            // driver must be at least as new as the toolkit.
            if t.0 > d.0 {
                return Some(format!(
                    "the build's CUDA toolkit {tk} needs a driver for CUDA {}.x; the driver supports CUDA {drv}",
                    t.0
                ));
            }
        }
    }
    if let Some(a) = archs {
        let cc = dev.compute_capability.0 * 10 + dev.compute_capability.1;
        let wildcard = a
            .split(';')
            .any(|x| matches!(x, "all" | "all-major" | "native"));
        let compiled: Vec<i32> = a
            .split(';')
            .filter_map(|x| x.split('-').next()?.parse().ok())
            .collect();
        // A virtual (PTX) architecture at or below the device JIT-compiles; a real one runs only
        // on its own major version at or above it.
        let ptx_ok = a.split(';').any(|x| {
            (!x.ends_with("-real"))
                && x.split('-')
                    .next()
                    .and_then(|n| n.parse::<i32>().ok())
                    .is_some_and(|n| n <= cc)
        });
        let real_ok = compiled.iter().any(|&c| c / 10 == cc / 10 && c <= cc);
        if !wildcard && !real_ok && !ptx_ok {
            return Some(format!(
                "the build's CUDA architectures ({a}) do not include the device's compute capability {}.{} ({})",
                dev.compute_capability.0, dev.compute_capability.1, dev.name
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(cc: (i32, i32), drv: &str) -> Probe {
        Probe {
            driver_present: true,
            reason: None,
            driver_cuda_version: Some(drv.into()),
            devices: vec![Device {
                ordinal: 0,
                name: "NVIDIA H200".into(),
                compute_capability: cc,
                free_bytes: 1,
                total_bytes: 2,
            }],
        }
    }

    #[test]
    fn probing_this_machine_never_panics() {
        let p = probe();
        if !p.driver_present {
            assert_eq!(p.reason.as_deref(), Some("no CUDA driver"));
        }
    }

    #[test]
    fn preflight_refuses_newer_toolkit_than_driver() {
        let why = preflight(&gpu((9, 0), "12.8"), Some("13.1.115"), Some("90")).expect("refused");
        assert!(why.contains("needs a driver for CUDA 13.x"), "{why}");
        assert_eq!(
            preflight(&gpu((9, 0), "13.0"), Some("13.1.115"), Some("90")),
            None
        );
    }

    #[test]
    fn preflight_refuses_missing_architecture() {
        let why = preflight(&gpu((9, 0), "13.1"), Some("13.1"), Some("120")).expect("refused");
        assert!(why.contains("compute capability 9.0"), "{why}");
        assert_eq!(
            preflight(&gpu((9, 0), "13.1"), Some("13.1"), Some("90;120")),
            None
        );
        assert_eq!(
            preflight(&gpu((12, 0), "13.1"), Some("13.1"), Some("90;120")),
            None
        );
        // PTX for 8.0 JIT-compiles on 9.0; a -real 8.0 does not.
        assert_eq!(
            preflight(&gpu((9, 0), "13.1"), None, Some("80-virtual")),
            None
        );
        assert!(preflight(&gpu((9, 0), "13.1"), None, Some("80-real")).is_some());
    }

    #[test]
    fn without_driver_or_device_a_cuda_build_runs_on_the_cpu_and_says_why() {
        // Not refused: the engine loads without a driver and its CUDA backend finds nothing.
        assert_eq!(
            preflight(&Probe::no_driver(), Some("13.1"), Some("90")),
            None
        );
        assert_eq!(
            cpu_reason(&Probe::no_driver()).as_deref(),
            Some("no CUDA driver")
        );
        let mut none = gpu((9, 0), "13.1");
        none.devices.clear();
        none.reason = Some("the CUDA driver reports no device".into());
        assert_eq!(preflight(&none, Some("13.1"), Some("90")), None);
        assert_eq!(
            cpu_reason(&none).as_deref(),
            Some("the CUDA driver reports no device")
        );
        assert_eq!(cpu_reason(&gpu((9, 0), "13.1")), None);
    }
}
