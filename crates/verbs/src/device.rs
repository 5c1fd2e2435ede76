//! Devices and the provider registry (`ibv_get_device_list`, `ibv_open_device`).
//!
//! A [`Provider`] is what opens a command channel to a device — the part
//! `/dev/infiniband/uverbsN` plays for rdma-core. `verbs` never links the NIC: the `uroce`
//! facade installs the NIC's embedded provider with [`set_provider`], a daemon client would
//! install another, and tests install fakes. The device list comes from `UROCE_DEVICES`
//! (comma-separated `name=address`, default `uroce0=127.0.0.1`; [`abi::provider`]) or is
//! built programmatically with [`Device::new`].

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use abi::provider::{devices_from_env, DeviceSpec, Provider};
use abi::Errno;

use crate::context::Context;
use crate::error::{Error, Result};

static PROVIDER: OnceLock<Arc<dyn Provider>> = OnceLock::new();

/// Install the process-wide provider used by [`devices`] and [`open_device`]. The first
/// call wins (like a provider library loaded once); returns whether this call installed
/// `provider`. Code that needs a different provider builds [`Device`]s with
/// [`Device::new`] instead.
pub fn set_provider(provider: Arc<dyn Provider>) -> bool {
    let mut installed = false;
    PROVIDER.get_or_init(|| {
        installed = true;
        provider
    });
    installed
}

/// The process-wide provider, if one was installed.
pub fn provider() -> Option<Arc<dyn Provider>> {
    PROVIDER.get().cloned()
}

fn global_provider(op: &'static str) -> Result<Arc<dyn Provider>> {
    provider().ok_or_else(|| {
        Error::local(
            op,
            Errno::ENOSYS,
            "no provider installed: depend on the `uroce` crate (embedded device) or call \
             verbs::set_provider",
        )
    })
}

/// The configured devices (`ibv_get_device_list`): `UROCE_DEVICES`, or `uroce0=127.0.0.1`,
/// served by the installed provider.
pub fn devices() -> Result<Vec<Device>> {
    let provider = global_provider("get_device_list")?;
    let specs = devices_from_env()
        .map_err(|e| Error::local("get_device_list", Errno::EINVAL, e.to_string()))?;
    Ok(specs
        .into_iter()
        .map(|spec| Device::new(spec, provider.clone()))
        .collect())
}

/// Open the configured device called `name` (or the first one if `name` is `None`, as
/// perftest does without `-d`).
pub fn open_device(name: Option<&str>) -> Result<Context> {
    let list = devices()?;
    let dev = match name {
        None => list.into_iter().next(),
        Some(n) => list.into_iter().find(|d| d.name() == n),
    }
    .ok_or_else(|| {
        Error::local(
            "open_device",
            Errno::ENOENT,
            format!("no device named {name:?} in the device list"),
        )
    })?;
    dev.open()
}

/// One device: a name, the address it is bound to, and the provider that opens it.
#[derive(Clone)]
pub struct Device {
    spec: DeviceSpec,
    provider: Arc<dyn Provider>,
}

impl Device {
    /// A device served by `provider` (programmatic configuration: several devices in one
    /// process, or a provider other than the installed one).
    pub fn new(spec: DeviceSpec, provider: Arc<dyn Provider>) -> Device {
        Device { spec, provider }
    }

    /// A device called `name` bound to `addr`, served by the installed provider.
    pub fn with_address(name: &str, addr: IpAddr) -> Result<Device> {
        Ok(Device::new(
            DeviceSpec {
                name: name.to_string(),
                addr,
            },
            global_provider("open_device")?,
        ))
    }

    /// `ibv_get_device_name`.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The IP address the device is bound to (its GID index 0).
    pub fn addr(&self) -> IpAddr {
        self.spec.addr
    }

    /// The configuration entry.
    pub fn spec(&self) -> &DeviceSpec {
        &self.spec
    }

    /// The provider serving this device.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// `ibv_open_device`: open a command channel and get a context.
    pub fn open(&self) -> Result<Context> {
        Context::open(self.clone())
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.spec.name)
            .field("addr", &self.spec.addr)
            .field("provider", &self.provider)
            .finish()
    }
}
