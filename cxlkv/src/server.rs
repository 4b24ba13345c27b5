//! A worker process's event loop (docs/design.md §16.5): one thread, one epoll set, the
//! listening socket every worker shares (inherited from the supervisor) and the connections it
//! accepted; each readable connection's complete commands run against the worker's table handle
//! and the replies are written back, buffered while the socket is full.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::layout::Stat;
use crate::protocol::{self, Conn, ServerInfo};
use crate::store::Worker;

/// Set by SIGTERM/SIGINT: the loop ends after the current batch.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    // Relaxed: the loop polls it at least every 100 ms.
    STOP.store(true, Ordering::Relaxed);
}

/// Installs the stop handler for SIGTERM and SIGINT (async-signal-safe: one atomic store).
pub fn handle_stop_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: `on_stop` only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_stop as *const () as libc::sighandler_t) };
    }
}

/// A non-blocking TCP socket listening on `addr:port`, inherited by the workers (not
/// close-on-exec). One socket for all: a worker that dies takes no queued connection with it.
pub fn bind(addr: &str, port: u16) -> Result<RawFd, String> {
    let ip: std::net::Ipv4Addr = addr.parse().map_err(|_| format!("--listen {addr}: not an IPv4 address"))?;
    // SAFETY: socket has no memory-safety preconditions.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    let one: libc::c_int = 1;
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: `one` and `sa` outlive the calls, with the sizes given.
    let ok = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        ) == 0
            && libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), std::mem::size_of::<libc::sockaddr_in>() as u32)
                == 0
            && libc::listen(fd, 1024) == 0
    };
    if !ok {
        let e = std::io::Error::last_os_error();
        // SAFETY: the socket created above.
        unsafe { libc::close(fd) };
        return Err(format!("listen on {addr}:{port}: {e}"));
    }
    Ok(fd)
}

/// Output above which a connection's input is not read until its output drains.
const OUT_HIGH: usize = 4 << 20;

struct Connection {
    input: Vec<u8>,
    output: Vec<u8>,
    state: Conn,
    events: u32,
}

/// The connections, indexed by their fd (small, dense numbers: a lookup per event without
/// hashing).
#[derive(Default)]
struct Conns(Vec<Option<Connection>>);

impl Conns {
    fn get_mut(&mut self, fd: &RawFd) -> Option<&mut Connection> {
        self.0.get_mut(usize::try_from(*fd).ok()?)?.as_mut()
    }

    fn insert(&mut self, fd: RawFd, c: Connection) {
        let Ok(i) = usize::try_from(fd) else { return };
        if self.0.len() <= i {
            self.0.resize_with(i + 1, || None);
        }
        self.0[i] = Some(c);
    }

    fn remove(&mut self, fd: &RawFd) {
        if let Some(slot) = usize::try_from(*fd).ok().and_then(|i| self.0.get_mut(i)) {
            *slot = None;
        }
    }

    /// Takes every connection out; yields their fds.
    fn drain(&mut self) -> impl Iterator<Item = RawFd> + '_ {
        self.0.iter_mut().enumerate().filter_map(|(fd, c)| c.take().map(|_| fd as RawFd))
    }
}

/// The last OS error, as a message.
fn os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// How long a worker that let a connection pass (it had more than the least loaded worker)
/// stops watching the listening socket; a connection still waiting after that, it takes.
const DEFER: Duration = Duration::from_millis(2);

/// Whether this worker takes the next connection now: only if no worker has fewer connections
/// (memcached hands connections to its threads in turn; the shared socket alone would give a
/// burst of connections to whichever worker wakes first).
fn least_loaded(w: &Worker<'_>, workers: usize) -> bool {
    let mine = w.store().worker_stat(w.index(), Stat::CurrConnections);
    (0..workers).all(|k| w.store().worker_stat(k, Stat::CurrConnections) >= mine)
}

/// Serves `listen` (non-blocking, listening) until [`STOP`] is set.
pub fn serve(w: &mut Worker<'_>, listen: RawFd, info: ServerInfo) -> Result<(), String> {
    // SAFETY: epoll_create1 has no memory-safety preconditions.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(os_error("epoll_create1"));
    }
    ctl(ep, libc::EPOLL_CTL_ADD, listen, libc::EPOLLIN as u32)?;
    let mut conns = Conns::default();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    // Set while the listening socket is unwatched after letting a connection pass.
    let mut deferred: Option<Instant> = None;
    let mut take_next = false;
    while !STOP.load(Ordering::Relaxed) {
        let timeout = deferred.map_or(100, |t| t.saturating_duration_since(Instant::now()).as_millis().max(1) as i32);
        // SAFETY: `events` has room for its length of entries.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, timeout) };
        if deferred.is_some_and(|t| Instant::now() >= t) {
            deferred = None;
            take_next = true;
            ctl(ep, libc::EPOLL_CTL_MOD, listen, libc::EPOLLIN as u32)?;
        }
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(os_error("epoll_wait"));
        }
        for ev in &events[..n as usize] {
            let fd = ev.u64 as RawFd;
            if fd == listen {
                if take_next || least_loaded(w, info.workers) {
                    take_next = false;
                    accept_one(ep, listen, w, &mut conns);
                } else {
                    ctl(ep, libc::EPOLL_CTL_MOD, listen, 0)?;
                    deferred = Some(Instant::now() + DEFER);
                }
                continue;
            }
            let Some(c) = conns.get_mut(&fd) else { continue };
            let mut close =
                ev.events & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 && ev.events & libc::EPOLLIN as u32 == 0;
            if !close && ev.events & libc::EPOLLIN as u32 != 0 {
                close = read_input(fd, c);
            }
            if !close && !c.input.is_empty() && c.output.len() < OUT_HIGH {
                let used = protocol::process(w, &info, &mut c.state, &c.input, &mut c.output);
                c.input.drain(..used);
            }
            if !close {
                close = flush(fd, c) || (c.state.close && c.output.is_empty());
            }
            if !close {
                let want = interest(c);
                if want != c.events && ctl(ep, libc::EPOLL_CTL_MOD, fd, want).is_ok() {
                    c.events = want;
                }
            }
            if close {
                conns.remove(&fd);
                // SAFETY: `fd` is a connection this loop owns; removed above, closed once.
                unsafe { libc::close(fd) };
                w.count(Stat::CurrConnections, -1);
            }
        }
    }
    for fd in conns.drain() {
        // SAFETY: connections this loop owns, closed once.
        unsafe { libc::close(fd) };
        w.count(Stat::CurrConnections, -1);
    }
    // SAFETY: the epoll fd this function created.
    unsafe { libc::close(ep) };
    Ok(())
}

fn ctl(ep: RawFd, op: libc::c_int, fd: RawFd, events: u32) -> Result<(), String> {
    let mut ev = libc::epoll_event { events, u64: fd as u64 };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    if unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) } < 0 {
        return Err(os_error("epoll_ctl"));
    }
    Ok(())
}

fn interest(c: &Connection) -> u32 {
    let mut e = 0;
    if c.output.len() < OUT_HIGH && !c.state.close {
        e |= libc::EPOLLIN as u32;
    }
    if !c.output.is_empty() {
        e |= libc::EPOLLOUT as u32;
    }
    e
}

/// Accepts one connection (the listening socket stays readable while more wait, and the
/// balance is judged again for each).
fn accept_one(ep: RawFd, listen: RawFd, w: &mut Worker<'_>, conns: &mut Conns) {
    {
        // SAFETY: null address arguments are allowed; the flags make the socket non-blocking.
        let fd = unsafe {
            libc::accept4(listen, std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
        };
        if fd < 0 {
            // EAGAIN: another worker took it. Other errors (EMFILE…): try at the next wake-up.
            return;
        }
        let one: libc::c_int = 1;
        // SAFETY: `one` outlives the call; TCP_NODELAY takes an int. A failure only costs latency.
        unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        let events = libc::EPOLLIN as u32;
        if ctl(ep, libc::EPOLL_CTL_ADD, fd, events).is_err() {
            // SAFETY: the fd just accepted, not registered anywhere.
            unsafe { libc::close(fd) };
            return;
        }
        conns.insert(fd, Connection { input: Vec::new(), output: Vec::new(), state: Conn::default(), events });
        w.count(Stat::CurrConnections, 1);
        w.count(Stat::TotalConnections, 1);
    }
}

/// Bytes of room a read asks for (reading straight into the connection's input buffer).
const READ_CHUNK: usize = 16 << 10;

/// Reads what the socket has, straight into the connection's input; returns whether to close.
fn read_input(fd: RawFd, c: &mut Connection) -> bool {
    loop {
        c.input.reserve(READ_CHUNK);
        let spare = c.input.spare_capacity_mut();
        let room = spare.len();
        // SAFETY: `spare` is writable for `room` bytes (uninitialized memory is fine for read).
        let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), room) };
        if n == 0 {
            return true;
        }
        if n < 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            if e == Some(libc::EAGAIN) {
                break;
            }
            if e == Some(libc::EINTR) {
                continue;
            }
            return true;
        }
        let len = c.input.len() + n as usize;
        // SAFETY: read initialized the first `n` bytes of the spare capacity.
        unsafe { c.input.set_len(len) };
        if (n as usize) < room {
            break;
        }
    }
    false
}

/// Writes what the socket takes; returns whether the connection failed.
fn flush(fd: RawFd, c: &mut Connection) -> bool {
    let mut done = 0;
    while done < c.output.len() {
        let rest = &c.output[done..];
        // SAFETY: `rest` is readable for its length. MSG_NOSIGNAL: a closed peer is an error
        // here, not a SIGPIPE.
        let n = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            if e == Some(libc::EAGAIN) {
                break;
            }
            if e == Some(libc::EINTR) {
                continue;
            }
            return true;
        }
        done += n as usize;
    }
    c.output.drain(..done);
    false
}
