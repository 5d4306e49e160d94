//! A client's socket as the server reads and writes it: deadlines on what the client takes, and
//! a lingering close.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long, and for how many bytes, a closed connection's unread request is still read and
/// discarded (see [`ClientStream`]).
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1024 * 1024;

/// A client's connection, with three additions:
/// - writes fail with `TimedOut` once the peer has taken nothing for `stall`: a client that
///   stops reading an answer would otherwise hold its connection for as long as it likes;
/// - writes fail with `TimedOut` when, over a window of the send rate's (`min_send_rate`), the
///   server had more to send than the socket took (a write waited) and the peer took less than
///   the rate: a client reading a large image at a byte a second would otherwise hold its
///   connection for hours, always taking a little;
/// - once the server has closed its side (after answering a request whose body it did not read
///   whole, such as a 413), what the client still sends is read and discarded for a moment
///   ([`LINGER`], [`LINGER_BYTES`]). Closing a socket with unread data makes the kernel reset
///   the connection, and the client would see the reset instead of the answer.
pub(super) struct ClientStream {
    inner: Option<TcpStream>,
    stall: Duration,
    /// When a write that waits fails (`stall` after it began to wait), if one waits.
    stalled_at: Option<tokio::time::Instant>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    rate: SendRate,
    /// The current window of the send rate: its start, the bytes the peer took in it, and
    /// whether a write waited in it.
    window: (tokio::time::Instant, u64, bool),
    shut: bool,
}

/// The least a client must take while the server has more to send: `bytes` per `window`; 0
/// bytes: no minimum.
#[derive(Clone, Copy, Debug)]
pub struct SendRate {
    pub bytes: u64,
    pub window: Duration,
}

impl ClientStream {
    pub(super) fn new(inner: TcpStream, stall: Duration, rate: SendRate) -> Self {
        ClientStream {
            inner: Some(inner),
            stall,
            stalled_at: None,
            deadline: Box::pin(tokio::time::sleep(stall)),
            rate,
            window: (tokio::time::Instant::now(), 0, false),
            shut: false,
        }
    }

    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(self.inner.as_mut().expect("present until dropped"))
    }

    /// Fail the write, and have the close that follows reset the connection: a plain close
    /// would leave what the socket still holds (megabytes of an image) to be sent to the slow
    /// reader by the kernel, holding the memory and, to the client, the connection open.
    fn abort<R>(&mut self, why: &'static str) -> Poll<std::io::Result<R>> {
        if let Some(stream) = &self.inner {
            let _ = stream.set_zero_linger();
        }
        Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why)))
    }

    /// The outcome of a write attempt: progress counts toward the send rate and disarms the
    /// stall; a pending write arms the stall (once) and marks the rate's window; either fails
    /// when its deadline passes.
    fn watch<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<R>>,
        written: impl Fn(&R) -> usize,
    ) -> Poll<std::io::Result<R>> {
        let now = tokio::time::Instant::now();
        let waiting = match &polled {
            Poll::Ready(Ok(r)) => {
                self.window.1 += written(r) as u64;
                self.stalled_at = None;
                false
            }
            Poll::Ready(Err(_)) => return polled,
            Poll::Pending => {
                self.window.2 = true;
                self.stalled_at.get_or_insert(now + self.stall);
                true
            }
        };
        if self.rate.bytes > 0 && now >= self.window.0 + self.rate.window {
            let (_, took, waited) = self.window;
            if waited && took < self.rate.bytes {
                return self.abort("client reads slower than min_send_rate");
            }
            self.window = (now, 0, waiting);
        }
        if !waiting {
            return polled;
        }
        // Woken at whichever comes first: the stall, or the rate's window's end.
        let mut at = self.stalled_at.expect("set while waiting");
        if self.rate.bytes > 0 {
            at = at.min(self.window.0 + self.rate.window);
        }
        if self.deadline.deadline() != at {
            self.deadline.as_mut().reset(at);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) if self.stalled_at.is_some_and(|t| t <= now) => {
                self.abort("client stopped reading")
            }
            Poll::Ready(()) => {
                // The window's end: checked at the next poll, which this wake-up asks for.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for ClientStream {
    fn drop(&mut self) {
        let (Some(mut stream), true) = (self.inner.take(), self.shut) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = vec![0u8; 16 * 1024];
            let mut read = 0;
            let until = tokio::time::Instant::now() + LINGER;
            while read < LINGER_BYTES {
                match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => read += n,
                    _ => break,
                }
            }
        });
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.stream().poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = self.stream().poll_write(cx, buf);
        self.watch(cx, polled, |n| *n)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = self.stream().poll_flush(cx);
        self.watch(cx, polled, |_| 0)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.shut = true;
        self.stream().poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = self.stream().poll_write_vectored(cx, bufs);
        self.watch(cx, polled, |n| *n)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}
