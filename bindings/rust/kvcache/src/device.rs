//! Devices: where a cache and a tensor live (DLPack's `DLDevice`).

use std::fmt;

use kvcache_sys as sys;

/// A device type (`kvc_device_type`, the DLPack `DLDeviceType` values).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// `KVC_DEVICE_CPU`.
    Cpu,
    /// `KVC_DEVICE_CUDA`.
    Cuda,
    /// `KVC_DEVICE_CUDA_HOST`: pinned host memory visible to CUDA.
    CudaHost,
    /// `KVC_DEVICE_ROCM`.
    Rocm,
    /// `KVC_DEVICE_ROCM_HOST`: pinned host memory visible to ROCm.
    RocmHost,
    /// Another DLPack device type.
    Other(i32),
}

impl DeviceType {
    /// The raw `kvc_device_type`.
    pub fn raw(self) -> sys::kvc_device_type {
        match self {
            DeviceType::Cpu => sys::KVC_DEVICE_CPU,
            DeviceType::Cuda => sys::KVC_DEVICE_CUDA,
            DeviceType::CudaHost => sys::KVC_DEVICE_CUDA_HOST,
            DeviceType::Rocm => sys::KVC_DEVICE_ROCM,
            DeviceType::RocmHost => sys::KVC_DEVICE_ROCM_HOST,
            DeviceType::Other(raw) => raw,
        }
    }

    /// The device type of a raw `kvc_device_type`.
    pub fn from_raw(raw: sys::kvc_device_type) -> DeviceType {
        match raw {
            sys::KVC_DEVICE_CPU => DeviceType::Cpu,
            sys::KVC_DEVICE_CUDA => DeviceType::Cuda,
            sys::KVC_DEVICE_CUDA_HOST => DeviceType::CudaHost,
            sys::KVC_DEVICE_ROCM => DeviceType::Rocm,
            sys::KVC_DEVICE_ROCM_HOST => DeviceType::RocmHost,
            other => DeviceType::Other(other),
        }
    }

    /// Whether memory of this device type is ordinary host memory that the
    /// CPU may read.
    pub fn is_host(self) -> bool {
        matches!(
            self,
            DeviceType::Cpu | DeviceType::CudaHost | DeviceType::RocmHost
        )
    }
}

/// A device: type and ordinal (`kvc_device`, laid out as DLPack's `DLDevice`).
///
/// ```
/// use kvcache::{Device, DeviceType};
/// assert_eq!(Device::CPU, Device { kind: DeviceType::Cpu, id: 0 });
/// assert_eq!(Device::cuda(1).to_string(), "cuda:1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    /// The device type.
    pub kind: DeviceType,
    /// The ordinal among devices of that type.
    pub id: i32,
}

impl Device {
    /// The CPU, `{KVC_DEVICE_CPU, 0}`: where caches live by default.
    pub const CPU: Device = Device {
        kind: DeviceType::Cpu,
        id: 0,
    };

    /// CUDA device `id`.
    pub const fn cuda(id: i32) -> Device {
        Device {
            kind: DeviceType::Cuda,
            id,
        }
    }

    /// ROCm/HIP device `id`.
    pub const fn rocm(id: i32) -> Device {
        Device {
            kind: DeviceType::Rocm,
            id,
        }
    }

    pub(crate) fn from_raw(raw: sys::kvc_device) -> Device {
        Device {
            kind: DeviceType::from_raw(raw.device_type),
            id: raw.device_id,
        }
    }

    pub(crate) fn raw(self) -> sys::kvc_device {
        sys::kvc_device {
            device_type: self.kind.raw(),
            device_id: self.id,
        }
    }
}

impl Default for Device {
    fn default() -> Device {
        Device::CPU
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.kind {
            DeviceType::Cpu => "cpu".to_string(),
            DeviceType::Cuda => "cuda".to_string(),
            DeviceType::CudaHost => "cuda_host".to_string(),
            DeviceType::Rocm => "rocm".to_string(),
            DeviceType::RocmHost => "rocm_host".to_string(),
            DeviceType::Other(raw) => format!("device_type_{raw}"),
        };
        write!(f, "{name}:{}", self.id)
    }
}
