//! Devices: `ibv_get_device_list`, `ibv_free_device_list`, `ibv_get_device_name`,
//! `ibv_get_device_guid`, `ibv_get_device_index`, and the small sysfs emulation behind
//! `ibv_read_sysfs_file` (docs/compat.md §4, §8).
//!
//! The list comes from `UROCE_DEVICES` (comma-separated `name=address`, default
//! `uroce0=127.0.0.1`), parsed by [`abi::provider::devices_from_env`], the same parser the Rust
//! API uses. Each distinct (name, address) gets one [`UDevice`] for the life of the process:
//! applications keep `ibv_device` pointers past `ibv_free_device_list` (rdma-core keeps its
//! devices alive the same way), and the number of distinct entries is bounded by what the
//! environment ever named.

use core::ffi::{c_char, c_int};
use std::net::IpAddr;
use std::sync::Mutex;

use abi::provider::{devices_from_env, DeviceSpec};

use crate::types::{ibv_device, ibv_device_ops, IBV_NODE_CA, IBV_TRANSPORT_IB};
use crate::util::{array_str, fill_cstr, guard, set_errno, str_arg};

/// One device as the C API hands it out. `ibv` is first so an `ibv_device *` is a
/// `UDevice *`; [`lookup`] checks a pointer against the registry before that cast is used.
#[repr(C)]
#[derive(Debug)]
pub struct UDevice {
    /// What the application sees.
    pub ibv: ibv_device,
    /// The configuration entry: name and address.
    pub spec: DeviceSpec,
    /// Process-unique index (`ibv_get_device_index`).
    pub index: c_int,
    /// Node GUID, host order.
    pub guid: u64,
}

/// Registered devices; entries are leaked on purpose (see module docs) so the references are
/// `'static`.
static REGISTRY: Mutex<Vec<&'static UDevice>> = Mutex::new(Vec::new());

fn registry() -> std::sync::MutexGuard<'static, Vec<&'static UDevice>> {
    // A poisoned lock only means another thread panicked while pushing; the Vec is intact.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The node GUID of a device bound to `addr`, without opening it (`ibv_get_device_guid`,
/// `ibv_devices`): the same derivation the NIC reports in QUERY_DEVICE
/// ([`abi::provider::node_guid`]). `tests/compat/load.sh` checks that `ibv_devices` and
/// `ibv_devinfo` agree.
pub fn guid_for(addr: IpAddr) -> u64 {
    abi::provider::node_guid(addr)
}

/// GID index 0 of a device bound to `addr`: the IPv4-mapped or IPv6 address (RoCEv2).
pub fn gid_for(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn make_device(spec: DeviceSpec, index: c_int) -> UDevice {
    let mut ibv = ibv_device {
        _ops: ibv_device_ops {
            _dummy1: None,
            _dummy2: None,
        },
        node_type: IBV_NODE_CA,
        transport_type: IBV_TRANSPORT_IB,
        name: [0; 64],
        dev_name: [0; 64],
        dev_path: [0; 256],
        ibdev_path: [0; 256],
    };
    fill_cstr(&mut ibv.name, &spec.name);
    fill_cstr(&mut ibv.dev_name, &format!("uverbs{index}"));
    // A device a running uroced serves: its device node is the daemon's socket
    // (docs/daemon.md §3); an embedded one has the sysfs path rdma-core would show.
    let node = abi::daemon::lookup(spec.addr)
        .map(|d| d.socket.display().to_string())
        .unwrap_or_else(|| format!("/sys/class/infiniband_verbs/uverbs{index}"));
    fill_cstr(&mut ibv.dev_path, &node);
    fill_cstr(
        &mut ibv.ibdev_path,
        &format!("/sys/class/infiniband/{}", spec.name),
    );
    let guid = guid_for(spec.addr);
    UDevice {
        ibv,
        spec,
        index,
        guid,
    }
}

/// The registered device for `spec`, creating it on first sight.
fn register(reg: &mut Vec<&'static UDevice>, spec: DeviceSpec) -> &'static UDevice {
    if let Some(d) = reg.iter().find(|d| d.spec == spec) {
        return d;
    }
    let index = c_int::try_from(reg.len()).unwrap_or(c_int::MAX);
    let dev: &'static UDevice = Box::leak(Box::new(make_device(spec, index)));
    reg.push(dev);
    dev
}

/// The devices currently configured, in `UROCE_DEVICES` order.
pub fn configured() -> Result<Vec<&'static UDevice>, abi::provider::DeviceListError> {
    let specs = devices_from_env()?;
    let mut reg = registry();
    Ok(specs.into_iter().map(|s| register(&mut reg, s)).collect())
}

/// The device behind an application's `ibv_device *`, if it is one of ours.
pub fn lookup(dev: *const ibv_device) -> Option<&'static UDevice> {
    if dev.is_null() {
        return None;
    }
    registry()
        .iter()
        .copied()
        .find(|d| core::ptr::eq(&d.ibv, dev))
}

/// The device whose `ibdev_path` is `dir` (how `ibv_read_sysfs_file` callers name a device).
fn by_ibdev_path(dir: &str) -> Option<&'static UDevice> {
    let dir = dir.trim_end_matches('/');
    registry()
        .iter()
        .copied()
        .find(|d| array_str(&d.ibv.ibdev_path) == dir)
}

fn guid_text(guid: u64) -> String {
    let g = guid.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]
    )
}

fn gid_text(gid: [u8; 16]) -> String {
    gid.chunks_exact(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The emulated sysfs attribute `file` of `dev`'s IB device directory, with the trailing
/// newline the kernel puts there. Only what rdma-core callers read through our exported
/// function needs to exist (ibv_devinfo reads `board_id`, §6.1); the rest mirrors what the
/// kernel shows for an rxe device so scripts that go through `ibv_read_sysfs_file` agree with
/// the verbs queries.
pub fn sysfs_attr(dev: &UDevice, file: &str) -> Option<String> {
    let gid0 = gid_for(dev.spec.addr);
    let text = match file.trim_start_matches('/') {
        "board_id" => "UROCE".to_string(),
        "node_type" => "1: CA".to_string(),
        "node_guid" | "sys_image_guid" => guid_text(dev.guid),
        "node_desc" => format!("uroce {} {}", dev.spec.name, dev.spec.addr),
        "hca_type" => "uroce".to_string(),
        "ports/1/link_layer" => "Ethernet".to_string(),
        "ports/1/state" => "4: ACTIVE".to_string(),
        "ports/1/phys_state" => "5: LinkUp".to_string(),
        "ports/1/gids/0" => gid_text(gid0),
        "ports/1/gid_attrs/types/0" => "RoCE v2".to_string(),
        _ => return None,
    };
    Some(text + "\n")
}

/// `ibv_read_sysfs_file` result handling shared by the emulated and the real path: strip one
/// trailing newline, NUL-terminate, and fail rather than hand back an unterminated string.
/// Returns the length stored (without the NUL), or −1.
fn store_sysfs(content: &[u8], buf: &mut [u8]) -> c_int {
    let n = content.len().min(buf.len());
    let (Some(dst), Some(src)) = (buf.get_mut(..n), content.get(..n)) else {
        return -1;
    };
    dst.copy_from_slice(src);
    if n == 0 {
        return 0;
    }
    let len = if src.last() == Some(&b'\n') {
        n - 1
    } else if n < buf.len() {
        n
    } else {
        return -1;
    };
    match buf.get_mut(len) {
        Some(b) => *b = 0,
        None => return -1,
    }
    c_int::try_from(len).unwrap_or(-1)
}

/// `ibv_get_device_list(int *num_devices)`: a NULL-terminated array the caller frees with
/// `ibv_free_device_list`. On a malformed `UROCE_DEVICES` it says why on stderr (once per
/// call, as rdma-core warns about bad configuration) and fails with EINVAL.
///
/// # Safety
/// `num_devices` is NULL or valid for a write.
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard(core::ptr::null_mut(), || {
        let devs = match configured() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("libibverbs (uroce): {}: {e}", abi::provider::DEVICES_ENV);
                set_errno(libc::EINVAL);
                return core::ptr::null_mut();
            }
        };
        if !num_devices.is_null() {
            let n = c_int::try_from(devs.len()).unwrap_or(c_int::MAX);
            // SAFETY: non-NULL and valid for a write per the contract.
            unsafe { num_devices.write(n) };
        }
        let list: Box<[*mut ibv_device]> = devs
            .iter()
            .map(|d| core::ptr::from_ref(&d.ibv).cast_mut())
            .chain(core::iter::once(core::ptr::null_mut()))
            .collect();
        Box::into_raw(list).cast::<*mut ibv_device>()
    })
}

/// `ibv_free_device_list(struct ibv_device **list)`.
///
/// # Safety
/// `list` is NULL or came from [`ibv_get_device_list`] and was not freed yet.
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if list.is_null() {
        return;
    }
    let mut n = 0usize;
    // SAFETY: the list is NULL-terminated (we built it), so every read up to and including
    // the terminator is in bounds.
    while !unsafe { list.add(n).read() }.is_null() {
        n += 1;
    }
    // SAFETY: `list` is the pointer `Box::into_raw` returned for a boxed slice of n + 1
    // elements; rebuilding the same fat pointer and dropping it frees exactly that allocation.
    drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}

/// `ibv_get_device_name(struct ibv_device *)`: the `name` field, or NULL for NULL.
///
/// # Safety
/// `device` is NULL or a device from [`ibv_get_device_list`].
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    if device.is_null() {
        set_errno(libc::EINVAL);
        return core::ptr::null();
    }
    // SAFETY: non-NULL device pointer per the contract; we only take a field address.
    unsafe { core::ptr::addr_of!((*device).name) }.cast::<c_char>()
}

/// `ibv_get_device_guid(struct ibv_device *)`: the node GUID in network byte order (`__be64`),
/// 0 for a device that is not ours.
///
/// # Safety
/// `device` is any pointer; it is only compared against our registry.
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    match lookup(device) {
        Some(d) => d.guid.to_be(),
        None => {
            set_errno(libc::ENODEV);
            0
        }
    }
}

/// `ibv_get_device_index(struct ibv_device *)`: process-unique index, −1 if unknown.
///
/// # Safety
/// `device` is any pointer; it is only compared against our registry.
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    lookup(device).map_or(-1, |d| d.index)
}

/// `ibv_get_sysfs_path()`: a valid string (the system librdmacm dereferences it, §2.1).
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// `ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)`.
///
/// For one of our devices' `ibdev_path` the attribute comes from [`sysfs_attr`]; any other
/// path is read from the real file system, as upstream does. Returns the length stored in
/// `buf` (newline stripped, NUL-terminated) or −1.
///
/// # Safety
/// `dir` and `file` are NULL or NUL-terminated strings; `buf` is valid for `size` bytes.
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let (Some(dir), Some(file)) = (unsafe { str_arg(dir) }, unsafe { str_arg(file) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if buf.is_null() || size == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: `buf` is valid for `size` bytes per the contract, and nothing else refers
        // to it during this call.
        let out = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        if let Some(dev) = by_ibdev_path(dir) {
            return match sysfs_attr(dev, file) {
                Some(text) => store_sysfs(text.as_bytes(), out),
                None => {
                    set_errno(libc::ENOENT);
                    -1
                }
            };
        }
        let path = std::path::Path::new(dir).join(file);
        match std::fs::File::open(&path) {
            Ok(mut f) => {
                let mut content = vec![0u8; size];
                match std::io::Read::read(&mut f, &mut content) {
                    Ok(n) => store_sysfs(content.get(..n).unwrap_or(&[]), out),
                    Err(e) => {
                        set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                        -1
                    }
                }
            }
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::ENOENT));
                -1
            }
        }
    })
}

/// `ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *, const char
/// *fmt, ...)` (IBVERBS_PRIVATE_34): used only by rdma-core's own providers, which never get a
/// uroce device, so there is nothing to read. The variadic tail is ignored, which the x86_64
/// SysV calling convention allows.
pub extern "C" fn ibv_read_ibdev_sysfs_file() -> c_int {
    set_errno(libc::ENOENT);
    -1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, addr: &str) -> DeviceSpec {
        DeviceSpec {
            name: name.into(),
            addr: addr.parse().unwrap(),
        }
    }

    #[test]
    fn guid_and_gid_follow_the_address() {
        let a = guid_for("127.0.0.1".parse().unwrap());
        assert_eq!(a.to_be_bytes(), [0x00, 0, 127, 0xff, 0xfe, 0, 0, 1]);
        assert_ne!(a, guid_for("127.0.0.2".parse().unwrap()));
        let v6 = guid_for("fe80::1234:5678:9abc:def1".parse().unwrap());
        assert_eq!(
            v6.to_be_bytes(),
            [0x54, 0x78, 0x9a, 0xff, 0xfe, 0xbc, 0xde, 0xf1]
        );
        let gid = gid_for("10.1.2.3".parse().unwrap());
        assert_eq!(gid[10..], [0xff, 0xff, 10, 1, 2, 3]);
        assert_eq!(gid_text(gid), "0000:0000:0000:0000:0000:ffff:0a01:0203");
        assert_eq!(guid_text(a), "0000:7fff:fe00:0001");
    }

    #[test]
    fn device_fields_and_sysfs() {
        let d = make_device(spec("uroce7", "127.0.0.7"), 3);
        assert_eq!(array_str(&d.ibv.name), "uroce7");
        assert_eq!(array_str(&d.ibv.dev_name), "uverbs3");
        assert_eq!(array_str(&d.ibv.ibdev_path), "/sys/class/infiniband/uroce7");
        assert_eq!(d.ibv.node_type, IBV_NODE_CA);
        assert_eq!(sysfs_attr(&d, "board_id").as_deref(), Some("UROCE\n"));
        assert_eq!(
            sysfs_attr(&d, "node_guid").as_deref(),
            Some("0000:7fff:fe00:0007\n")
        );
        assert_eq!(
            sysfs_attr(&d, "ports/1/link_layer").as_deref(),
            Some("Ethernet\n")
        );
        assert!(sysfs_attr(&d, "nonexistent").is_none());
    }

    #[test]
    fn store_sysfs_matches_upstream_rules() {
        let mut buf = [0xaau8; 8];
        assert_eq!(store_sysfs(b"abc\n", &mut buf), 3);
        assert_eq!(&buf[..4], b"abc\0");
        assert_eq!(store_sysfs(b"abc", &mut buf), 3);
        assert_eq!(&buf[..4], b"abc\0");
        // Exactly fills with a newline at the end: newline becomes the NUL.
        assert_eq!(store_sysfs(b"1234567\n", &mut buf), 7);
        assert_eq!(&buf, b"1234567\0");
        // Would need truncation to terminate: fail.
        assert_eq!(store_sysfs(b"12345678", &mut buf), -1);
        assert_eq!(store_sysfs(b"", &mut buf), 0);
    }

    #[test]
    fn registry_keeps_one_device_per_spec() {
        let mut reg = Vec::new();
        let a = register(&mut reg, spec("t0", "127.0.0.1"));
        let b = register(&mut reg, spec("t1", "127.0.0.2"));
        let a2 = register(&mut reg, spec("t0", "127.0.0.1"));
        assert!(core::ptr::eq(a, a2));
        assert_eq!((a.index, b.index), (0, 1));
        assert_eq!(reg.len(), 2);
    }
}
