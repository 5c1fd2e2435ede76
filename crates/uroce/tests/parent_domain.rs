//! Parent domains (`ibv_alloc_parent_domain`) and wall-clock completion stamps through the
//! Rust API: QPs, SRQs and CQs made in a parent domain take their rings from its allocator
//! (which may answer "use the default"), every buffer it gave is handed back once its queue
//! is destroyed, traffic runs over such queues with the data checked, and the parent domain
//! neither deallocates its PD nor lets it go while it lives. A CQ made with `wallclock`
//! stamps each completion with the wall-clock time the device wrote it.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use common::*;
use uroce::pair::ALL_ACCESS;
use uroce::*;

/// Hands out 4096-aligned heap buffers (or "use the default" when `defer`), recording what
/// it gave and what came back.
#[derive(Default)]
struct Counting {
    defer: bool,
    given: Mutex<Vec<(usize, usize, BufferKind)>>,
    freed: Mutex<Vec<usize>>,
    calls: AtomicUsize,
}

impl BufferAllocator for Counting {
    fn alloc(&self, len: usize, align: usize, kind: BufferKind) -> Buffer {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.defer {
            return Buffer::Default;
        }
        let layout = std::alloc::Layout::from_size_align(len, align).unwrap();
        // SAFETY: nonzero size; freed in `free` with the same layout.
        let p = unsafe { std::alloc::alloc(layout) };
        assert!(!p.is_null());
        self.given.lock().unwrap().push((p as usize, len, kind));
        Buffer::At(p)
    }

    fn free(&self, ptr: *mut u8, _kind: BufferKind) {
        let mut given = self.given.lock().unwrap();
        let i = given
            .iter()
            .position(|g| g.0 == ptr as usize)
            .expect("freed a buffer it gave");
        let (p, len, _) = given.remove(i);
        self.freed.lock().unwrap().push(p);
        // SAFETY: allocated in `alloc` with this layout, freed once.
        unsafe {
            std::alloc::dealloc(ptr, std::alloc::Layout::from_size_align(len, 4096).unwrap())
        };
    }
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

#[test]
fn queues_of_a_parent_domain_live_in_its_allocators_buffers() {
    let (dev, _) = topo_devices(Topo::SameDevice);
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let alloc = Arc::new(Counting::default());
    let parent = pd.parent_domain(Some(alloc.clone()));
    assert!(parent.is_parent_domain() && !pd.is_parent_domain());
    assert_eq!(parent.handle(), pd.handle());

    let cq = ctx.create_cq_ex(16, None, 0, Some(&parent), false).unwrap();
    let srq = parent
        .create_srq(&SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let a = parent
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap()))
        .unwrap();
    let mut bi = QpInitAttr::new(QpType::Rc, &cq, cap());
    bi.srq = Some(&srq);
    let b = parent.create_qp(&bi).unwrap();
    {
        let given = alloc.given.lock().unwrap();
        let kinds: Vec<BufferKind> = given.iter().map(|g| g.2).collect();
        // CQ ring, SRQ ring, A's SQ and RQ, B's SQ (its receives come from the SRQ).
        assert_eq!(
            kinds,
            [
                BufferKind::Cq,
                BufferKind::Srq,
                BufferKind::Qp,
                BufferKind::Qp,
                BufferKind::Qp
            ]
        );
        assert!(given.iter().all(|g| g.0 % 4096 == 0));
    }
    let gid = ctx.query_gid(1, 0).unwrap();
    let o = ConnectOpts {
        access: ALL_ACCESS,
        ..ConnectOpts::default()
    };
    a.connect(&b.endpoint(o.sq_psn, gid), &o).unwrap();
    b.connect(&a.endpoint(o.sq_psn, gid), &o).unwrap();
    // MRs of the parent domain are the PD's.
    let mut src = parent.alloc_mr(2048, ALL_ACCESS).unwrap();
    let mut dst = pd.alloc_mr(2048, ALL_ACCESS).unwrap();
    src.copy_from_slice(&pattern(4, 2048));
    dst.fill(0);
    srq.post_recv(&[RecvWr::new(1, &[dst.sge(0, 2048)])])
        .unwrap();
    a.post_send(&[SendWr::send(2, &[src.sge(0, 2048)]).signaled()])
        .unwrap();
    let wcs = wait(&cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(&dst[..], &pattern(4, 2048)[..]);

    // The PD cannot go while its parent domain lives; the parent domain goes alone.
    drop((a, b, srq));
    assert_eq!(
        alloc.freed.lock().unwrap().len(),
        4,
        "the QPs' and SRQ's rings"
    );
    drop(cq);
    assert!(
        alloc.given.lock().unwrap().is_empty(),
        "every buffer came back"
    );
    drop((src, dst));
    let (e, pd) = pd.dealloc().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    parent.dealloc().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn an_allocator_may_leave_buffers_to_the_library() {
    let (dev, _) = topo_devices(Topo::SameDevice);
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let alloc = Arc::new(Counting {
        defer: true,
        ..Counting::default()
    });
    let parent = pd.parent_domain(Some(alloc.clone()));
    let cq = ctx.create_cq(16, None, 0).unwrap();
    let qp = parent
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap()))
        .unwrap();
    assert_eq!(
        alloc.calls.load(Ordering::SeqCst),
        2,
        "asked for the SQ and the RQ"
    );
    drop(qp);
    assert!(
        alloc.freed.lock().unwrap().is_empty(),
        "nothing of its own to free"
    );
    // Without an allocator, a parent domain is its PD.
    let plain = pd.parent_domain(None);
    plain
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap()))
        .unwrap();
}

#[test]
fn wallclock_cqs_stamp_each_completion() {
    let (dev, _) = topo_devices(Topo::SameDevice);
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq_ex(16, None, 0, None, true).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap()))
        .unwrap();
    let gid = ctx.query_gid(1, 0).unwrap();
    let o = ConnectOpts {
        access: ALL_ACCESS,
        ..ConnectOpts::default()
    };
    qp.connect(&qp.endpoint(o.sq_psn, gid), &o).unwrap();
    let mut buf = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    buf.fill(7);
    let ns = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = ns();
    qp.post_recv(&[RecvWr::new(1, &[buf.sge(32, 32)])]).unwrap();
    qp.post_send(&[SendWr::send(2, &[buf.sge(0, 32)]).signaled()])
        .unwrap();
    let mut stamps = Vec::new();
    let mut wc = Default::default();
    while stamps.len() < 2 {
        if let Some(t) = cq.poll_raw_stamped(&mut wc).unwrap() {
            assert_eq!(wc.status, WcStatus::Success.raw());
            stamps.push(t);
        }
    }
    let after = ns();
    // Written between the post and the poll, by the same clock.
    assert!(
        stamps.iter().all(|&t| before <= t && t <= after),
        "{before} {stamps:?} {after}"
    );
    // A plain CQ's completions carry none.
    let plain = ctx.create_cq(4, None, 0).unwrap();
    let qp2 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &plain, cap()))
        .unwrap();
    qp2.connect(&qp2.endpoint(o.sq_psn, gid), &o).unwrap();
    qp2.post_send(&[SendWr::write(3, &[buf.sge(0, 8)], buf.addr() + 40, buf.rkey()).signaled()])
        .unwrap();
    loop {
        if let Some(t) = plain.poll_raw_stamped(&mut wc).unwrap() {
            assert_eq!((wc.wr_id, t), (3, 0));
            break;
        }
    }
}
