//! How a library reaches a device's control plane: the part of the contract that
//! `/dev/infiniband/uverbsN` plays for rdma-core.
//!
//! A [`Provider`] opens one command channel per context to a named device. In embedded
//! mode the provider (in `nic`) starts the device's control plane and engine inside the
//! process on first use and hands back one end of a socketpair; in daemon mode it will
//! connect to the daemon's Unix socket. Either way the library speaks only the command ABI
//! of this crate over the returned stream, so the library never links the NIC.

use std::fmt;
use std::net::IpAddr;
use std::os::unix::net::UnixStream;

use crate::doorbell::Progress;

/// Default device list when `UROCE_DEVICES` is unset.
pub const DEFAULT_DEVICES: &str = "uroce0=127.0.0.1";

/// The environment variable that configures the device list: comma-separated `name=address`.
pub const DEVICES_ENV: &str = "UROCE_DEVICES";

/// One configured device: its name (as `ibv_get_device_name` shows it) and the IP address
/// it is bound to (its GID index 0 is this address, IPv4-mapped or IPv6).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceSpec {
    /// Device name, e.g. `uroce0`.
    pub name: String,
    /// The address the device sends and receives RoCEv2 (UDP 4791) on.
    pub addr: IpAddr,
}

/// A device list that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceListError(pub String);

impl fmt::Display for DeviceListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad device list: {}", self.0)
    }
}

impl std::error::Error for DeviceListError {}

/// Parses a device list such as `uroce0=127.0.0.1,uroce1=127.0.0.2` (IPv6 addresses as
/// `uroce2=::1`). Names must be non-empty, unique, and at most 63 bytes of
/// `[A-Za-z0-9_-]` (an `ibv_device` name field holds 64 bytes with its NUL).
pub fn parse_device_list(list: &str) -> Result<Vec<DeviceSpec>, DeviceListError> {
    let mut specs: Vec<DeviceSpec> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, addr) = item
            .split_once('=')
            .ok_or_else(|| DeviceListError(format!("`{item}` is not name=address")))?;
        let name = name.trim();
        if name.is_empty()
            || name.len() > 63
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(DeviceListError(format!("bad device name `{name}`")));
        }
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| DeviceListError(format!("bad address `{}` for {name}", addr.trim())))?;
        if specs.iter().any(|s| s.name == name) {
            return Err(DeviceListError(format!("device `{name}` listed twice")));
        }
        specs.push(DeviceSpec {
            name: name.to_string(),
            addr,
        });
    }
    if specs.is_empty() {
        return Err(DeviceListError("no devices".to_string()));
    }
    Ok(specs)
}

/// The device list: `UROCE_DEVICES` if set; else the devices a running `uroced` serves
/// ([`crate::daemon::find`]); else [`DEFAULT_DEVICES`].
pub fn devices_from_env() -> Result<Vec<DeviceSpec>, DeviceListError> {
    match std::env::var(DEVICES_ENV) {
        Ok(list) => parse_device_list(&list),
        Err(_) => {
            let served: Vec<DeviceSpec> = crate::daemon::find()
                .into_iter()
                .map(|d| DeviceSpec {
                    name: d.dev.name,
                    addr: d.dev.addr,
                })
                .collect();
            if served.is_empty() {
                parse_device_list(DEFAULT_DEVICES)
            } else {
                Ok(served)
            }
        }
    }
}

/// The node GUID of a device bound to `addr`, as its QUERY_DEVICE reports it. Part of the
/// contract because a library must be able to show it without opening the device
/// (`ibv_get_device_guid`, `ibv_devices`). Derived as rxe derives the GUID from its netdev's
/// MAC: the EUI-64 of a locally administered pseudo-MAC — `02:00:a:b:c:d` for IPv4
/// `a.b.c.d`, the low 48 bits of an IPv6 address with the local bit set and the multicast bit
/// cleared — with the universal/local bit flipped.
pub fn node_guid(addr: IpAddr) -> u64 {
    let mac: [u8; 6] = match addr {
        IpAddr::V4(a) => {
            let [a, b, c, d] = a.octets();
            [0x02, 0x00, a, b, c, d]
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            [(o[10] | 0x02) & !0x01, o[11], o[12], o[13], o[14], o[15]]
        }
    };
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// Something that can open a command channel to a device.
pub trait Provider: Send + Sync + fmt::Debug {
    /// Opens a new command channel (one per context) to `device`, starting the device first
    /// if this provider runs devices itself. The stream carries the command ABI of this crate.
    fn open(&self, device: &DeviceSpec) -> std::io::Result<UnixStream>;

    /// The engine's work on the library's thread ([`crate::doorbell::Progress`]), if this
    /// provider runs `device`'s engine in this process (embedded mode); `None` for a daemon.
    fn progress(&self, device: &DeviceSpec) -> Option<std::sync::Arc<dyn Progress>> {
        let _ = device;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists() {
        let l = parse_device_list("uroce0=127.0.0.1, uroce1=127.0.0.2,v6=::1").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].name, "uroce1");
        assert_eq!(l[2].addr, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(
            parse_device_list(DEFAULT_DEVICES).unwrap()[0].name,
            "uroce0"
        );
    }

    #[test]
    fn rejects_bad_lists() {
        for bad in [
            "",
            "uroce0",
            "=1.2.3.4",
            "a=1.2.3",
            "a=1.1.1.1,a=2.2.2.2",
            "a b=1.1.1.1",
        ] {
            assert!(parse_device_list(bad).is_err(), "{bad:?} accepted");
        }
    }
}
