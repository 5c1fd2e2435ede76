//! Driving a [`Perftest`] exchange over a blocking `Read + Write` stream (normally a
//! `TcpStream`), with the RDMA-side steps supplied through [`BenchHooks`]; and the TCP
//! connection set-up perftest uses (docs/perftest.md §1).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::machine::{Action, Event, Negotiated, Perftest};
use super::msg::{BwReport, KeyMessage};
use super::PerftestError;

/// perftest's default TCP port.
pub const DEFAULT_PORT: u16 = 18515;

/// An error from a caller-side step.
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// The RDMA-side steps of a perftest run, called by [`run_exchange`] at the points where
/// perftest does them. Only `negotiated` and `connect` have no default.
pub trait BenchHooks {
    /// `ib_write_bw`'s pause after connecting. Default: `std::thread::sleep`.
    fn sleep(&mut self, duration: Duration) {
        std::thread::sleep(duration);
    }

    /// M1–M4 are done: create QPs and buffers, print the header block, and return this
    /// side's KEY per QP (see [`Event::Negotiated`]).
    fn negotiated(&mut self, negotiated: &Negotiated) -> Result<Vec<KeyMessage>, HookError>;

    /// Bring the QPs to RTR (and RTS) with the peer's KEY per QP ([`Event::Connect`]).
    fn connect(&mut self, remote: &[KeyMessage]) -> Result<(), HookError>;

    /// Print the address lines ([`Event::Addresses`]). Default: nothing.
    fn addresses(&mut self, local: &[KeyMessage], remote: &[KeyMessage]) {
        let _ = (local, remote);
    }

    /// Prepare a run ([`Event::Prepare`]): post receives in send tests. Default: nothing.
    fn prepare(&mut self, size: u64) -> Result<(), HookError> {
        let _ = size;
        Ok(())
    }

    /// Run the measurement ([`Event::Run`]); return this side's report in bandwidth tests.
    fn run(&mut self, size: u64) -> Result<Option<BwReport>, HookError> {
        let _ = size;
        Ok(None)
    }

    /// A REPORT exchange is done ([`Event::Report`]). Default: nothing.
    fn report(&mut self, mine: Option<&BwReport>, peer: &BwReport) {
        let _ = (mine, peer);
    }
}

/// Writes one message with a single `write()` call (retrying only on `EINTR`). If the
/// kernel takes part of it — not seen with these ≤108-byte messages on a blocking
/// socket — the rest follows at once, since the message must arrive whole.
pub fn write_message<W: Write + ?Sized>(w: &mut W, msg: &[u8]) -> io::Result<()> {
    loop {
        match w.write(msg) {
            Ok(n) if n == msg.len() => return Ok(()),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => return w.write_all(msg.get(n..).unwrap_or(&[])),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Fills `buf` completely, looping over short reads. On EOF or error, returns how many
/// bytes had arrived and the error (`None` for EOF).
pub fn read_message<R: Read + ?Sized>(
    r: &mut R,
    buf: &mut [u8],
) -> Result<(), (usize, Option<io::Error>)> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(buf.get_mut(got..).unwrap_or(&mut [])) {
            Ok(0) => return Err((got, None)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err((got, Some(e))),
        }
    }
    Ok(())
}

/// Runs `exchange` to its end over `stream`, calling `hooks` for the RDMA-side steps.
///
/// Returns when the exchange is finished; the caller then closes the stream (dropping a
/// `TcpStream` does). Pass the raw stream, not a buffered writer: each message must leave
/// in its own `write()`.
pub fn run_exchange<S, H>(
    stream: &mut S,
    exchange: &mut Perftest,
    hooks: &mut H,
) -> Result<(), PerftestError>
where
    S: Read + Write + ?Sized,
    H: BenchHooks + ?Sized,
{
    loop {
        match exchange.poll()? {
            Action::Sleep(d) => hooks.sleep(d),
            Action::Write(bytes) => {
                if let Err(e) = write_message(stream, &bytes) {
                    exchange.write_failed(e)?;
                }
            }
            Action::Read(n) => {
                let mut buf = vec![0u8; n];
                match read_message(stream, &mut buf) {
                    Ok(()) => exchange.received(&buf)?,
                    Err((got, cause)) => return Err(exchange.read_failed(got, cause)),
                }
            }
            Action::Event(event) => match event {
                Event::Negotiated(n) => {
                    let keys = hooks
                        .negotiated(&n)
                        .map_err(|e| PerftestError::Local(e.to_string()))?;
                    exchange.set_local_keys(keys)?;
                }
                Event::Connect { remote } => hooks
                    .connect(&remote)
                    .map_err(|e| PerftestError::Connect(e.to_string()))?,
                Event::Addresses { local, remote } => hooks.addresses(&local, &remote),
                Event::Prepare { size } => hooks
                    .prepare(size)
                    .map_err(|e| PerftestError::Local(e.to_string()))?,
                Event::Run { size } => {
                    let report = hooks
                        .run(size)
                        .map_err(|e| PerftestError::Local(e.to_string()))?;
                    exchange.run_complete(report)?;
                }
                Event::Report { mine, peer } => hooks.report(mine.as_ref(), &peer),
            },
            Action::Finished => return Ok(()),
        }
    }
}

/// The client could not connect; `Display` is perftest's text.
#[derive(Debug, thiserror::Error)]
#[error("Couldn't connect to {host}:{port}\nUnable to open file descriptor for socket connection Unable to init the socket connection")]
pub struct ConnectError {
    /// The server as given.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Why (not printed by perftest).
    #[source]
    pub cause: Option<io::Error>,
}

/// perftest's client connect: IPv4 addresses only (AF_INET), each tried once, no retry.
pub fn connect(host: &str, port: u16) -> Result<TcpStream, ConnectError> {
    let fail = |cause| ConnectError {
        host: host.to_string(),
        port,
        cause,
    };
    let addrs = (host, port).to_socket_addrs().map_err(|e| fail(Some(e)))?;
    let mut last = None;
    for addr in addrs.filter(SocketAddr::is_ipv4) {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(fail(last))
}

/// perftest's server socket: bound to `0.0.0.0:port` (or the `--source_ip` address),
/// IPv4 only. Port 0 picks a free port (tests).
pub fn listen(bind: Option<Ipv4Addr>, port: u16) -> io::Result<TcpListener> {
    TcpListener::bind(SocketAddrV4::new(
        bind.unwrap_or(Ipv4Addr::UNSPECIFIED),
        port,
    ))
}

/// Accepts exactly one connection and closes the listener, as perftest does.
pub fn accept_one(listener: TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    let accepted = listener.accept();
    drop(listener);
    accepted
}
