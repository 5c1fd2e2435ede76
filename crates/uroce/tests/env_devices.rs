//! Devices from `UROCE_DEVICES` (comma-separated `name=address`). Its own test binary: it
//! sets the process environment.

use uroce::*;

#[test]
fn uroce_devices_configures_the_device_list() {
    std::env::set_var("UROCE_DEVICES", "uroce-e0=127.0.0.7, uroce-e1=127.0.0.8");
    let list = uroce::devices().unwrap();
    let names: Vec<(&str, String)> = list
        .iter()
        .map(|d| (d.name(), d.addr().to_string()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("uroce-e0", "127.0.0.7".to_string()),
            ("uroce-e1", "127.0.0.8".to_string())
        ]
    );
    let ctx = uroce::open_device(Some("uroce-e1")).unwrap();
    assert_eq!(ctx.device().name(), "uroce-e1");
    assert_eq!(
        ctx.query_gid(PORT, 0).unwrap().to_ip(),
        "127.0.0.8".parse::<std::net::IpAddr>().unwrap()
    );
    // No name: the first device, as perftest without -d.
    assert_eq!(
        uroce::open_device(None).unwrap().device().name(),
        "uroce-e0"
    );
    let e = uroce::open_device(Some("nope")).unwrap_err();
    assert_eq!(e.errno(), Errno::ENOENT);
    std::env::set_var("UROCE_DEVICES", "not a list");
    assert_eq!(uroce::devices().unwrap_err().errno(), Errno::EINVAL);
    assert!(uroce::pair_devices(Some("127.0.0.1")).is_err());
}
