//! Local servers for the tests of easel's outgoing HTTP (webhook deliveries, input images): a
//! router on a loopback port that records what it is sent, a raw one for answers no HTTP server
//! would give, and the endless bodies both kinds of client must cut off.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::Router;
use futures::stream;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// What a test server was sent, in order; clones share it.
pub struct Seen<T>(Arc<Mutex<Vec<T>>>);

impl<T> Clone for Seen<T> {
    fn clone(&self) -> Self {
        Seen(self.0.clone())
    }
}

impl<T: Clone> Seen<T> {
    pub fn record(&self, item: T) {
        self.0.lock().unwrap().push(item);
    }

    pub fn all(&self) -> Vec<T> {
        self.0.lock().unwrap().clone()
    }
}

/// A recording test server's state: what it was sent, and its own address (for answers that
/// point back at it).
pub type Recording<T> = (Seen<T>, SocketAddr);

/// Serves `router` as [`serve`] does, with a fresh [`Seen`] and its own address as its state.
pub async fn serve_recording<T: Send + 'static>(
    router: Router<Recording<T>>,
) -> (SocketAddr, Seen<T>) {
    let seen = Seen(Arc::default());
    let state = seen.clone();
    let addr = serve(|addr| router.with_state((state, addr))).await;
    (addr, seen)
}

/// Serves the router `app` makes for its own address on a free loopback port, with each
/// request's peer address (`ConnectInfo`), for as long as the test's runtime lives.
pub async fn serve(app: impl FnOnce(SocketAddr) -> Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = app(addr).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A raw server that reads each request, then runs `answer` on its connection.
pub async fn raw_server<F, Fut>(answer: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                answer(stream).await;
            });
        }
    });
    addr
}

/// A server that resets each connection once it has read the request.
pub async fn resetting_server() -> SocketAddr {
    raw_server(|stream| async move {
        let _ = stream.set_zero_linger();
        drop(stream);
    })
    .await
}

/// An address where nothing listens: a free port's, just given back.
pub async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// A body of `chunk`-byte pieces that never ends and never waits: only a size limit stops it.
pub fn endless(chunk: &'static [u8]) -> Body {
    Body::from_stream(stream::repeat_with(move || {
        Ok::<_, Infallible>(Bytes::from_static(chunk))
    }))
}

/// A body of a byte every 20 ms, forever: each read is quick, the whole never ends, so only a
/// deadline for the whole stops it.
pub fn trickle() -> Body {
    Body::from_stream(stream::unfold((), |()| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Some((Ok::<_, Infallible>(Bytes::from_static(b"a")), ()))
    }))
}
