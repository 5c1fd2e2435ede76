//! XRC domains (`ibv_xrcd`; IBTA XRC annex). A domain groups XRC SRQs and XRC target QPs: a
//! message reaching an XRC target QP lands in the XRC SRQ its XRCETH names, if that SRQ is
//! of the QP's domain. Opening the same file from several contexts shares one domain.

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;

use abi::uverbs::{CloseXrcd, OpenXrcd, OpenXrcdResp, Request, UroceOpenXrcd};
use abi::Errno;

use crate::context::{take, Context};
use crate::error::{Error, Result};

/// An open XRC domain. Cheap to clone; XRC SRQs and target QPs keep it alive.
#[derive(Clone)]
pub struct Xrcd(pub(crate) Arc<XrcdInner>);

pub(crate) struct XrcdInner {
    ctx: Context,
    handle: u32,
    closed: bool,
}

impl Context {
    /// `ibv_open_xrcd`: `file` `None` opens a new domain of its own (fd −1); a file names
    /// the domain every open of that file shares, made when absent if `oflags` has
    /// `O_CREAT`, refused when present if it has `O_EXCL`.
    pub fn open_xrcd(&self, file: Option<BorrowedFd<'_>>, oflags: i32) -> Result<Xrcd> {
        const OP: &str = "open_xrcd";
        let (fd, drv) = match file {
            None => (u32::MAX, UroceOpenXrcd::default()),
            Some(f) => {
                let (dev, ino) = file_identity(f)
                    .ok_or_else(|| Error::local(OP, Errno::EBADF, "fstat of the file failed"))?;
                (f.as_raw_fd() as u32, UroceOpenXrcd { dev, ino })
            }
        };
        let req = Request::OpenXrcd(
            OpenXrcd {
                response: 0,
                fd,
                oflags: oflags as u32,
            },
            drv,
        );
        let r: OpenXrcdResp = self.cmd(OP, &req, |mut r| Ok(take(&mut r)))?;
        Ok(Xrcd(Arc::new(XrcdInner {
            ctx: self.clone(),
            handle: r.xrcd_handle,
            closed: false,
        })))
    }
}

/// `(st_dev, st_ino)` of the file `f` refers to.
fn file_identity(f: BorrowedFd<'_>) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::File::from(f.try_clone_to_owned().ok()?)
        .metadata()
        .ok()?;
    Some((m.dev(), m.ino()))
}

impl Xrcd {
    /// The context.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// The control plane's handle.
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// `ibv_close_xrcd`. `EBUSY` (handed back) while XRC SRQs, target QPs or other handles
    /// use it.
    pub fn close(self) -> core::result::Result<(), (Error, Xrcd)> {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => match inner.close() {
                Ok(()) => Ok(()),
                Err(e) => Err((e, Xrcd(Arc::new(inner)))),
            },
            Err(arc) => Err((
                Error::local(
                    "close_xrcd",
                    Errno::EBUSY,
                    "XRC domain still used by SRQs, QPs or other handles",
                ),
                Xrcd(arc),
            )),
        }
    }
}

impl XrcdInner {
    fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let req = Request::CloseXrcd(CloseXrcd {
            xrcd_handle: self.handle,
        });
        self.ctx.cmd("close_xrcd", &req, |_| Ok(()))?;
        self.closed = true;
        Ok(())
    }
}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl fmt::Debug for Xrcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Xrcd")
            .field("handle", &self.0.handle)
            .finish()
    }
}
