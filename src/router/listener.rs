//! The router's listener threads (docs/decisions.md §19): `[router] threads` OS threads, each a
//! one-thread Tokio runtime with its own `SO_REUSEPORT` socket on the router address, accepting
//! and serving its connections on that thread with that thread's upstream connection pool, so
//! one request never hops between threads. The kernel spreads new connections over the
//! sockets. State shared by every thread (lanes, keys, affinity, the usage queue) stays behind
//! the router's `Arc`.
//! Must not: change what the router answers (that is `http` and `attempt`).

use std::future::Future;
use std::net::SocketAddr;

use axum::serve::ListenerExt;
use socket2::{Domain, Protocol, Socket, Type};
use tokio_util::sync::CancellationToken;

use super::Router;

/// Pending connections each socket's accept queue holds.
const BACKLOG: i32 = 1024;

/// The bound sockets of the router address, one per listener thread (not yet serving).
#[derive(Debug)]
pub struct RouterListeners {
    sockets: Vec<std::net::TcpListener>,
    addr: SocketAddr,
}

impl RouterListeners {
    /// Binds `threads` (≥ 1) sockets with `SO_REUSEADDR` and `SO_REUSEPORT` on `addr`. A plain
    /// socket is bound first and closed: it fails if anything listens there, another daemon's
    /// `SO_REUSEPORT` group included (which would otherwise be joined silently and share the
    /// connections), and it resolves port 0 for the group. Errors: a bind or listen fails (the
    /// address is taken, or not local).
    pub fn bind(addr: SocketAddr, threads: usize) -> std::io::Result<Self> {
        let addr = std::net::TcpListener::bind(addr)?.local_addr()?;
        let sockets = (0..threads.max(1))
            .map(|_| bind_one(addr))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self { sockets, addr })
    }

    /// The bound address (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Listener threads (one per socket).
    pub fn threads(&self) -> usize {
        self.sockets.len()
    }

    /// Starts one thread per socket serving `router` until `stop` resolves (then each thread
    /// stops accepting and lets its requests in flight finish; `TCP_NODELAY` on every accepted
    /// connection: an answer's last segment must not wait for the client's delayed ACK,
    /// docs/rules/router.md §6). Errors: a thread or its runtime cannot be started.
    pub fn serve<F>(self, router: &Router, stop: impl Fn() -> F) -> std::io::Result<RouterServer>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cut = CancellationToken::new();
        let mut done = Vec::with_capacity(self.sockets.len());
        for (i, socket) in self.sockets.into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let app = router.app();
            let stop = stop();
            let cut = cut.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            std::thread::Builder::new()
                .name(format!("qp-router-{i}"))
                .spawn(move || {
                    let served = runtime.block_on(async move {
                        let listener = tokio::net::TcpListener::from_std(socket)?;
                        let listener = listener.tap_io(|tcp| {
                            if let Err(e) = tcp.set_nodelay(true) {
                                tracing::debug!(error = %e, "router: cannot set TCP_NODELAY");
                            }
                        });
                        let serve = axum::serve(listener, app).with_graceful_shutdown(stop);
                        tokio::select! {
                            served = serve.into_future() => served,
                            () = cut.cancelled() => Ok(()),
                        }
                    });
                    // Dropping the runtime drops the connections still open (after a cut).
                    drop(runtime);
                    let _ = tx.send(served);
                })?;
            done.push(rx);
        }
        Ok(RouterServer { done, cut })
    }
}

fn bind_one(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    #[cfg(unix)]
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// The running listener threads.
#[derive(Debug)]
pub struct RouterServer {
    done: Vec<tokio::sync::oneshot::Receiver<std::io::Result<()>>>,
    cut: CancellationToken,
}

impl RouterServer {
    /// Waits until every thread has stopped (after the stop future resolved and its requests
    /// finished, or after [`RouterServer::cut`]); the first serving error, if any.
    /// Cancel-safe: a call cut short by a timeout leaves the threads not yet seen stopped.
    pub async fn stopped(&mut self) -> std::io::Result<()> {
        let mut first = Ok(());
        while let Some(rx) = self.done.last_mut() {
            let served = rx.await;
            self.done.pop();
            if let Ok(Err(e)) = served
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// Cuts every thread now: requests in flight are dropped (the shutdown deadline).
    pub fn cut(&self) {
        self.cut.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sockets_share_one_resolved_port_and_a_second_group_is_refused() {
        let first = RouterListeners::bind(SocketAddr::from(([127, 0, 0, 1], 0)), 3).unwrap();
        let addr = first.local_addr();
        assert_ne!(addr.port(), 0, "port 0 is resolved");
        assert_eq!(first.threads(), 3);
        for s in &first.sockets {
            assert_eq!(s.local_addr().unwrap(), addr);
        }
        let second = RouterListeners::bind(addr, 2);
        assert_eq!(
            second.unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse,
            "a second daemon on the address fails instead of sharing its connections"
        );
        drop(first);
        assert!(
            RouterListeners::bind(addr, 2).is_ok(),
            "free again once closed"
        );
    }
}
