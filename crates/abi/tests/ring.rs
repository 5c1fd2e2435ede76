//! SPSC ring: model-based tests against a VecDeque, a two-thread stress test, and the
//! protocol checks (corrupt indices, geometry, attach over a foreign region).

use std::collections::VecDeque;
use std::sync::Arc;

use abi::fastpath::{
    Cqe, RING_CONSUMER_OFFSET, RING_DATA_OFFSET, RING_MAGIC, RING_PRODUCER_OFFSET,
};
use abi::ring::{channel, Consumer, Producer, RingLayout};
use abi::shm::SharedMem;
use abi::uverbs::Wc;
use abi::AbiError;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Stage an entry of this length (filled from a counter) and maybe publish.
    Stage { len: usize, publish: bool },
    /// Publish staged entries.
    Publish,
    /// Refresh availability and read + release up to n entries.
    Consume { n: u32 },
    /// Ask for free slots.
    Free,
}

fn op(elem: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..=elem, any::<bool>()).prop_map(|(len, publish)| Op::Stage { len, publish }),
        1 => Just(Op::Publish),
        3 => (0u32..6).prop_map(|n| Op::Consume { n }),
        1 => Just(Op::Free),
    ]
}

fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq as usize * 31 + i * 7) as u8)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Drive the real ring and a VecDeque model with the same operations; compare every
    /// observable: full/empty, free slots, contents and order.
    #[test]
    fn ring_matches_vecdeque_model(
        log2_slots in 0u32..5,
        ops in proptest::collection::vec(op(64), 1..300),
    ) {
        let slots = 1u32 << log2_slots;
        let layout = RingLayout::new(slots, 64).unwrap();
        let (mut p, mut c) = channel(layout).unwrap();
        let mut published: VecDeque<Vec<u8>> = VecDeque::new();
        let mut staged: Vec<Vec<u8>> = Vec::new();
        let mut seq = 0u64;
        for op in ops {
            match op {
                Op::Stage { len, publish } => {
                    let data = payload(seq, len);
                    let full = published.len() + staged.len() == slots as usize;
                    match p.stage(&data) {
                        Ok(()) => {
                            prop_assert!(!full, "staged into a full ring");
                            staged.push(data);
                            seq += 1;
                        }
                        Err(AbiError::RingFull) => prop_assert!(full, "RingFull with room"),
                        Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
                    }
                    prop_assert_eq!(p.staged(), staged.len() as u64);
                    if publish {
                        p.publish().unwrap();
                        published.extend(staged.drain(..));
                    }
                }
                Op::Publish => {
                    p.publish().unwrap();
                    published.extend(staged.drain(..));
                }
                Op::Consume { n } => {
                    // Staged-but-unpublished entries are invisible to the consumer.
                    let avail = c.available().unwrap();
                    prop_assert_eq!(avail as usize, published.len());
                    let take = n.min(avail);
                    for i in 0..take {
                        let want = &published[i as usize];
                        let mut got = vec![0u8; want.len()];
                        c.read(i, 0, &mut got).unwrap();
                        prop_assert_eq!(&got, want);
                    }
                    prop_assert!(matches!(c.read(avail, 0, &mut [0u8; 1]), Err(AbiError::RingEmpty)));
                    c.release(take).unwrap();
                    published.drain(..take as usize);
                    prop_assert!(matches!(c.release(avail - take + 1), Err(AbiError::RingEmpty)));
                }
                Op::Free => {
                    let free = p.free().unwrap();
                    prop_assert_eq!(free as usize, slots as usize - published.len() - staged.len());
                }
            }
        }
    }
}

#[test]
fn two_threads_200k_items_in_order() {
    // Small ring, many items: both threads spend most of their time at the full/empty
    // boundaries. No timing assertions: only order and content.
    const N: u64 = 200_000;
    let layout = RingLayout::new(8, 64).unwrap();
    let (mut p, mut c) = channel(layout).unwrap();
    let producer = std::thread::spawn(move || {
        let mut i = 0u64;
        while i < N {
            // Variable lengths and batch sizes exercise partial words and multi-slot publishes.
            let batch = 1 + (i % 3);
            let mut staged = 0;
            while staged < batch && i < N {
                let len = 8 + (i % 41) as usize;
                let mut buf = [0u8; 64];
                buf[..8].copy_from_slice(&i.to_le_bytes());
                for (k, b) in buf[8..len].iter_mut().enumerate() {
                    *b = (i as u8).wrapping_add(k as u8);
                }
                match p.stage(&buf[..len]) {
                    Ok(()) => {
                        i += 1;
                        staged += 1;
                    }
                    Err(AbiError::RingFull) => break,
                    Err(e) => panic!("producer: {e}"),
                }
            }
            p.publish().unwrap();
            if staged == 0 {
                std::thread::yield_now();
            }
        }
    });
    let mut next = 0u64;
    while next < N {
        let n = c.available().unwrap();
        if n == 0 {
            std::thread::yield_now();
            continue;
        }
        for k in 0..n {
            let mut buf = [0u8; 64];
            c.read(k, 0, &mut buf).unwrap();
            let v = u64::from_le_bytes(buf[..8].try_into().unwrap());
            assert_eq!(v, next, "out of order");
            let len = 8 + (v % 41) as usize;
            for (j, b) in buf[8..len].iter().enumerate() {
                assert_eq!(
                    *b,
                    (v as u8).wrapping_add(j as u8),
                    "corrupt payload in item {v}"
                );
            }
            next += 1;
        }
        c.release(n).unwrap();
    }
    producer.join().unwrap();
    assert_eq!(c.available().unwrap(), 0);
}

#[test]
fn cqe_ring_roundtrip_typed() {
    let layout = RingLayout::for_depth(3, 64).unwrap();
    assert_eq!(layout.slots(), 4);
    let (mut p, mut c) = channel(layout).unwrap();
    for i in 0..4u64 {
        let cqe = Cqe {
            wc: Wc {
                wr_id: i,
                qp_num: 17,
                byte_len: 100 + i as u32,
                ..Default::default()
            },
            reserved: [0; 2],
        };
        p.stage_struct(&cqe).unwrap();
    }
    assert!(matches!(
        p.stage_struct(&Cqe::default()),
        Err(AbiError::RingFull)
    ));
    assert_eq!(c.available().unwrap(), 0, "nothing visible before publish");
    p.publish().unwrap();
    assert_eq!(c.available().unwrap(), 4);
    for i in 0..4u32 {
        let cqe: Cqe = c.read_struct(i).unwrap();
        assert_eq!(cqe.wc.wr_id, u64::from(i));
        assert_eq!(cqe.wc.byte_len, 100 + i);
    }
    c.release(4).unwrap();
    assert_eq!(p.free().unwrap(), 4);
}

#[test]
fn geometry_and_header() {
    assert!(RingLayout::new(3, 64).is_err());
    assert!(RingLayout::new(0, 64).is_err());
    assert!(RingLayout::new(4, 32).is_err());
    assert!(RingLayout::new(4, 96).is_err());
    assert!(RingLayout::new(1 << 21, 64).is_err());
    let l = RingLayout::new(16, 128).unwrap();
    assert_eq!(l.bytes(), RING_DATA_OFFSET + 16 * 128);
    let mem = SharedMem::new_zeroed(4096).unwrap();
    l.init(&mem, 0).unwrap();
    let mut hdr = [0u8; 12];
    mem.read(0, &mut hdr).unwrap();
    assert_eq!(
        u32::from_ne_bytes(hdr[0..4].try_into().unwrap()),
        7,
        "log2 elem"
    );
    assert_eq!(
        u32::from_ne_bytes(hdr[4..8].try_into().unwrap()),
        15,
        "index mask"
    );
    assert_eq!(
        u32::from_ne_bytes(hdr[8..12].try_into().unwrap()),
        RING_MAGIC
    );
    // Ring must fit the region; base must be cache-line aligned.
    assert!(l.init(&mem, 2048).is_err());
    assert!(l.init(&mem, 8).is_err());

    let d = l.desc(0x10000);
    assert_eq!(RingLayout::from_desc(&d).unwrap(), l);
    assert!(RingLayout::from_desc(&abi::uverbs::RingDesc {
        len: d.len - 1,
        ..d
    })
    .is_err());
    assert!(RingLayout::from_desc(&abi::uverbs::RingDesc { addr: 0x10008, ..d }).is_err());
    assert!(RingLayout::from_desc(&abi::uverbs::RingDesc { slots: 12, ..d }).is_err());
}

#[test]
fn element_too_large_is_rejected() {
    let (mut p, _c) = channel(RingLayout::new(2, 64).unwrap()).unwrap();
    assert!(matches!(p.stage(&[0; 65]), Err(AbiError::TooLarge { .. })));
    assert!(matches!(
        p.stage_parts(&[&[0; 60], &[0; 5]]),
        Err(AbiError::TooLarge { .. })
    ));
    assert_eq!(p.staged(), 0);
}

#[test]
fn hostile_indices_are_detected_not_followed() {
    let layout = RingLayout::new(4, 64).unwrap();
    let mem = Arc::new(SharedMem::new_zeroed(layout.bytes()).unwrap());
    layout.init(&mem, 0).unwrap();
    let mut p = Producer::attach(mem.clone(), 0, layout).unwrap();
    let mut c = Consumer::attach(mem.clone(), 0, layout).unwrap();
    p.push(&[1; 8]).unwrap();

    // A producer index more than `slots` ahead of the consumer.
    mem.word(RING_PRODUCER_OFFSET)
        .unwrap()
        .store(100, std::sync::atomic::Ordering::Release);
    assert_eq!(c.available().unwrap_err().errno(), abi::Errno::EIO);
    // A producer index behind the consumer (wraps to a huge distance).
    mem.word(RING_PRODUCER_OFFSET)
        .unwrap()
        .store(u64::MAX, std::sync::atomic::Ordering::Release);
    assert!(matches!(c.available(), Err(AbiError::RingCorrupt { .. })));
    mem.word(RING_PRODUCER_OFFSET)
        .unwrap()
        .store(1, std::sync::atomic::Ordering::Release);
    assert_eq!(c.available().unwrap(), 1);

    // A consumer index ahead of what was published.
    mem.word(RING_CONSUMER_OFFSET)
        .unwrap()
        .store(2, std::sync::atomic::Ordering::Release);
    assert!(matches!(p.free(), Err(AbiError::RingCorrupt { .. })));
    mem.word(RING_CONSUMER_OFFSET)
        .unwrap()
        .store(0, std::sync::atomic::Ordering::Release);
    assert_eq!(p.free().unwrap(), 3);
}

#[test]
fn indices_are_free_running_across_wrap() {
    // Start both sides just below a u64 wrap: the ring must keep working across it.
    let layout = RingLayout::new(4, 64).unwrap();
    let mem = Arc::new(SharedMem::new_zeroed(layout.bytes()).unwrap());
    layout.init(&mem, 0).unwrap();
    let start = u64::MAX - 5;
    mem.word(RING_PRODUCER_OFFSET)
        .unwrap()
        .store(start, std::sync::atomic::Ordering::Relaxed);
    mem.word(RING_CONSUMER_OFFSET)
        .unwrap()
        .store(start, std::sync::atomic::Ordering::Relaxed);
    let mut p = Producer::attach(mem.clone(), 0, layout).unwrap();
    let mut c = Consumer::attach(mem, 0, layout).unwrap();
    for round in 0..5u8 {
        for k in 0..3u8 {
            p.stage(&[round, k]).unwrap();
        }
        p.publish().unwrap();
        assert_eq!(c.available().unwrap(), 3);
        for k in 0..3u8 {
            let mut b = [0u8; 2];
            assert!(c.pop_into(&mut b).unwrap());
            assert_eq!(b, [round, k]);
        }
        assert!(!c.pop_into(&mut [0u8; 2]).unwrap());
    }
}

#[test]
fn attach_through_a_raw_region_like_the_engine_does() {
    // The library allocates and describes the ring; the engine attaches to the same memory
    // from the descriptor's address (embedded mode) through `from_raw_parts`.
    let layout = RingLayout::new(8, 128).unwrap();
    let lib_mem = Arc::new(SharedMem::new_zeroed(layout.bytes()).unwrap());
    layout.init(&lib_mem, 0).unwrap();
    let desc = layout.desc(lib_mem.addr());
    let mut lib = Producer::attach(lib_mem.clone(), 0, layout).unwrap();

    let engine_layout = RingLayout::from_desc(&desc).unwrap();
    // SAFETY: `lib_mem` outlives `engine_mem` (dropped at the end of this test, after it),
    // and every access to the region goes through `SharedMem`'s atomics.
    let engine_mem =
        unsafe { SharedMem::from_raw_parts(desc.addr as usize as *mut u8, desc.len as usize) }
            .unwrap();
    let mut eng = Consumer::attach(Arc::new(engine_mem), 0, engine_layout).unwrap();
    lib.push(b"wqe").unwrap();
    let mut b = [0u8; 3];
    assert!(eng.pop_into(&mut b).unwrap());
    assert_eq!(&b, b"wqe");
    drop(eng);
    drop(lib);
    drop(lib_mem);
}
