//! Read deadlines of one HTTP/1.1 webhook connection: a kept-alive connection may wait
//! [`Deadlines::idle`] for its next request, while a request's headers, once its first byte has
//! come, must be complete within [`Deadlines::header`] (and a new connection's first request
//! within that too).
//!
//! hyper's `header_read_timeout` counts the wait between kept-alive requests as header time, so a
//! 10 s header limit closed every connection idle for 10 s. The API server's webhook client keeps
//! idle connections for 90 s and does not retry a POST on a connection the server closed just
//! as the request went out: the webhook call failed, and with `failurePolicy: Fail` the pod
//! creation with it. With the idle wait longer than the client's, the client always closes first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How long a connection may wait in each phase.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From the connection's start, or a request's first byte, to the end of its headers.
    pub header: Duration,
    /// From the end of a response to the next request's first byte.
    pub idle: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's first byte (the deadline is the header limit on a new
    /// connection, the idle limit after a response).
    Waiting,
    /// Reading headers; `matched` bytes of `\r\n\r\n` seen so far.
    Headers { matched: u8 },
    /// Headers complete: the body and the handler are bounded by the request timeout.
    Request,
}

/// A connection with the read deadlines of [`Limits`]; a deadline passed fails the read with
/// [`io::ErrorKind::TimedOut`], which ends the connection.
pub struct Deadlines<T> {
    io: T,
    limits: Limits,
    phase: Phase,
    /// Set while a deadline applies (waiting or reading headers).
    sleep: Pin<Box<Sleep>>,
    /// Something was written since the last read: a response went out.
    wrote: bool,
}

impl<T> Deadlines<T> {
    /// Wraps a fresh connection: its first request's headers are due within `limits.header`.
    pub fn new(io: T, limits: Limits) -> Self {
        Deadlines {
            io,
            limits,
            phase: Phase::Waiting,
            sleep: Box::pin(tokio::time::sleep(limits.header)),
            wrote: false,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    fn restart(&mut self, after: Duration) {
        self.sleep.as_mut().reset(Instant::now() + after);
    }

    /// Follows the bytes just read: the first byte starts the headers, `\r\n\r\n` ends them.
    fn saw(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match self.phase {
                Phase::Waiting => {
                    self.phase = Phase::Headers { matched: 0 };
                    self.restart(self.limits.header);
                    self.step(b);
                }
                Phase::Headers { .. } => self.step(b),
                Phase::Request => return,
            }
        }
    }

    fn step(&mut self, b: u8) {
        let Phase::Headers { matched } = self.phase else {
            return;
        };
        let want = b"\r\n\r\n"[matched as usize];
        let matched = if b == want {
            matched + 1
        } else if b == b'\r' {
            1
        } else {
            0
        };
        self.phase = if matched == 4 {
            Phase::Request
        } else {
            Phase::Headers { matched }
        };
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Deadlines<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.wrote {
            // A read after a response: the connection now waits for its next request.
            this.wrote = false;
            if this.phase == Phase::Request {
                this.phase = Phase::Waiting;
                this.restart(this.limits.idle);
            }
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.saw(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if this.phase != Phase::Request {
                    ready!(this.sleep.as_mut().poll(cx));
                    let what = match this.phase {
                        Phase::Headers { .. } => "the request's headers were not complete",
                        _ => "no request came",
                    };
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{what} in time"),
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Deadlines<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.io).poll_write(cx, data))?;
        self.wrote |= n > 0;
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, bufs))?;
        self.wrote |= n > 0;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    // Real time, short limits: the idle waits below are a scenario (a client pausing), and the
    // assertions are on what the connection did, not on how long it took.
    const LIMITS: Limits = Limits {
        header: Duration::from_millis(300),
        idle: Duration::from_secs(3),
    };
    /// A client pause: longer than the header limit, well within the idle limit.
    const PAUSE: Duration = Duration::from_secs(1);

    /// Reads what is there, or the error a deadline gives.
    async fn read_some<T: AsyncRead + Unpin>(c: &mut Deadlines<T>) -> io::Result<Vec<u8>> {
        let mut buf = [0u8; 256];
        let n = c.read(&mut buf).await?;
        Ok(buf[..n].to_vec())
    }

    #[tokio::test]
    async fn an_idle_kept_alive_connection_outlives_the_header_limit() {
        let (mut client, server) = duplex(1024);
        let mut conn = Deadlines::new(server, LIMITS);
        client
            .write_all(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(!read_some(&mut conn).await.unwrap().is_empty());
        conn.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        let next = async {
            tokio::time::sleep(PAUSE).await;
            client.write_all(b"POST / HTTP/1.1\r\n\r\n").await.unwrap();
            client
        };
        let (read, _client) = tokio::join!(read_some(&mut conn), next);
        assert_eq!(read.unwrap(), b"POST / HTTP/1.1\r\n\r\n");
    }

    #[tokio::test]
    async fn idle_past_the_idle_limit_ends_the_connection() {
        let (mut client, server) = duplex(1024);
        let mut conn = Deadlines::new(server, LIMITS);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        read_some(&mut conn).await.unwrap();
        conn.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        let started = Instant::now();
        let err = read_some(&mut conn).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("no request came"), "{err}");
        assert!(
            started.elapsed() >= LIMITS.idle,
            "closed before the idle limit"
        );
    }

    #[tokio::test]
    async fn headers_sent_slowly_or_never_end_the_connection_at_the_header_limit() {
        // Half-sent headers: `\r\n\r\n` never completes.
        let (mut client, server) = duplex(1024);
        let mut conn = Deadlines::new(server, LIMITS);
        client
            .write_all(b"POST / HTTP/1.1\r\nHost: x\r\n\r")
            .await
            .unwrap();
        read_some(&mut conn).await.unwrap();
        let err = read_some(&mut conn).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(
            err.to_string().contains("headers were not complete"),
            "{err}"
        );
        // A new connection that sends nothing gets the header limit, not the idle one.
        let (_client, server) = duplex(1024);
        let mut conn = Deadlines::new(server, LIMITS);
        let started = Instant::now();
        let err = read_some(&mut conn).await.unwrap_err();
        assert!(err.to_string().contains("no request came"), "{err}");
        assert!(
            started.elapsed() < LIMITS.idle,
            "a silent new connection waited the idle limit"
        );
    }

    #[tokio::test]
    async fn a_body_after_complete_headers_is_not_bound_by_the_header_limit() {
        let (mut client, server) = duplex(1024);
        let mut conn = Deadlines::new(server, LIMITS);
        client
            .write_all(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n{")
            .await
            .unwrap();
        read_some(&mut conn).await.unwrap();
        let rest = async {
            tokio::time::sleep(PAUSE).await;
            client.write_all(b"\"}\n").await.unwrap();
            client
        };
        let (read, _client) = tokio::join!(read_some(&mut conn), rest);
        assert_eq!(read.unwrap(), b"\"}\n");
    }
}
