//! A small blocking HTTP/1.1 client for tests and test environments: plain HTTP on a
//! [`TcpStream`], one request per connection (`Connection: close`).
//!
//! It is what slurm-testenv's readiness probe of slurmrestd, kube-testenv's etcd calls, the
//! tests' slurmrestd calls and the bridge's probe and metrics scrapes in tests and benchmarks
//! share, so none of them hand-writes HTTP. An async caller runs it on
//! `tokio::task::spawn_blocking`.
//!
//! - The request (head and body) goes out in one write: slurmrestd mishandles a request split
//!   over several segments (500, or a reset).
//! - The answer's body is read by `Content-Length`, as `Transfer-Encoding: chunked`, or up to
//!   the end of the connection; interim `1xx` answers are skipped.
//! - [`Client::connect_timeout`] bounds the connection and [`Client::timeout`] the whole exchange
//!   after it: a server that stops answering is a [`std::io::ErrorKind::TimedOut`] error.
//!
//! ```no_run
//! let addr = "127.0.0.1:6820".parse().unwrap();
//! let r = slurm_testenv::http::get(addr, "/slurm/v0.0.44/ping/", &[("X-SLURM-USER-TOKEN", "...")])?;
//! println!("{} {}", r.status, r.text());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The longest header section (status line and headers) read.
const MAX_HEAD: usize = 64 * 1024;

/// An answer: status code, headers in the order received, body (de-chunked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Timeouts of requests; [`Client::default`]: 2 s to connect, 10 s for the exchange.
#[derive(Clone, Copy, Debug)]
pub struct Client {
    /// Longest wait for the TCP connection.
    pub connect_timeout: Duration,
    /// Longest time from the connection to the last byte of the answer.
    pub timeout: Duration,
}

impl Default for Client {
    fn default() -> Self {
        Client {
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
        }
    }
}

/// `GET path` with [`Client::default`]'s timeouts.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
    Client::default().get(addr, path, headers)
}

/// `POST path` of `body` with [`Client::default`]'s timeouts.
pub fn post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Response> {
    Client::default().post(addr, path, headers, body)
}

/// `127.0.0.1:port`.
pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// slurm-testenv's readiness probe: `GET path` of slurmrestd on loopback `port` with the Slurm
/// token header; the status code.
pub(crate) fn get_status(port: u16, path: &str, token: &str) -> io::Result<u16> {
    let headers = [
        ("X-SLURM-USER-TOKEN", token),
        ("Accept", "application/json"),
    ];
    Ok(get(local(port), path, &headers)?.status)
}

impl Client {
    /// A client with these timeouts.
    pub fn with_timeouts(connect_timeout: Duration, timeout: Duration) -> Self {
        Client {
            connect_timeout,
            timeout,
        }
    }

    /// Sends `method path` with `headers` and `body` on a new connection to `addr` and reads the
    /// answer. `Host` (the address, unless `headers` has one), `Connection: close` and, with a
    /// body or for POST, PUT and PATCH, `Content-Length` are added.
    pub fn request(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        let stream = TcpStream::connect_timeout(&addr, self.connect_timeout)?;
        let deadline = Instant::now() + self.timeout;
        stream.set_write_timeout(Some(self.timeout))?;
        let request = encode(addr, method, path, headers, body);
        // One write: slurmrestd mishandles a request split over several segments.
        (&stream).write_all(&request)?;
        let mut reader = BufReader::new(Deadline { stream, deadline });
        read_response(&mut reader, method.eq_ignore_ascii_case("HEAD"))
    }

    /// `GET path`.
    pub fn get(
        &self,
        addr: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
    ) -> io::Result<Response> {
        self.request(addr, "GET", path, headers, &[])
    }

    /// `POST path` of `body`.
    pub fn post(
        &self,
        addr: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        self.request(addr, "POST", path, headers, body)
    }
}

/// The request's bytes: head and body.
fn encode(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !has("host") {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let sends_body = !body.is_empty()
        || ["POST", "PUT", "PATCH"]
            .iter()
            .any(|m| m.eq_ignore_ascii_case(method));
    if sends_body && !has("content-length") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    if !has("connection") {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// The stream, each read bounded by what is left until `deadline`.
struct Deadline {
    stream: TcpStream,
    deadline: Instant,
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no complete HTTP answer in time",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        match self.stream.read(buf) {
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no complete HTTP answer in time",
            )),
            r => r,
        }
    }
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Reads one answer from `r` (skipping interim 1xx answers). `head_only`: the request was HEAD,
/// so the answer has no body whatever its headers say.
fn read_response(r: &mut impl BufRead, head_only: bool) -> io::Result<Response> {
    loop {
        let (status, headers) = read_head(r)?;
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let mut response = Response {
            status,
            headers,
            body: Vec::new(),
        };
        if head_only || (100..200).contains(&status) || status == 204 || status == 304 {
            return Ok(response);
        }
        let chunked = response
            .header("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
        response.body = if chunked {
            read_chunked(r)?
        } else if let Some(len) = response.header("content-length") {
            let len: u64 = len
                .trim()
                .parse()
                .map_err(|_| invalid(format!("Content-Length {len:?}")))?;
            let mut body = Vec::new();
            (&mut *r).take(len).read_to_end(&mut body)?;
            if (body.len() as u64) < len {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("body of {} bytes, {len} announced", body.len()),
                ));
            }
            body
        } else {
            let mut body = Vec::new();
            r.read_to_end(&mut body)?;
            body
        };
        return Ok(response);
    }
}

/// One line without its line ending; an error at the end of the stream.
fn read_line(r: &mut impl BufRead, limit: usize) -> io::Result<String> {
    let mut line = Vec::new();
    let n = (&mut *r).take(limit as u64).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection closed before the HTTP answer",
        ));
    }
    if line.last() != Some(&b'\n') {
        return Err(invalid("an HTTP line too long or cut short"));
    }
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| invalid("an HTTP line not in UTF-8"))
}

/// The status line and headers.
fn read_head(r: &mut impl BufRead) -> io::Result<(u16, Vec<(String, String)>)> {
    let status_line = read_line(r, MAX_HEAD)?;
    let mut words = status_line.split_whitespace();
    let status = match (words.next(), words.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => code.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| invalid(format!("not an HTTP answer: {status_line:?}")))?;
    let mut headers = Vec::new();
    let mut read = status_line.len();
    loop {
        let line = read_line(r, MAX_HEAD.saturating_sub(read).max(1))?;
        read += line.len() + 2;
        if line.is_empty() {
            return Ok((status, headers));
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| invalid(format!("a header line without ':': {line:?}")))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
}

/// A chunked body, de-chunked; trailers are read and dropped.
fn read_chunked(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(r, 1024)?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| invalid(format!("a chunk size {line:?}")))?;
        if size == 0 {
            // Trailers up to the empty line.
            while !read_line(r, MAX_HEAD)?.is_empty() {}
            return Ok(body);
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        if !read_line(r, 2)?.is_empty() {
            return Err(invalid("no line end after a chunk"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A server of one connection: reads the request head (and as many body bytes as its
    /// Content-Length says), sends it over `requests`, answers `answer` in pieces and closes.
    fn serve(answer: &'static [&'static [u8]]) -> (SocketAddr, mpsc::Receiver<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                    if n == 0 {
                        break;
                    }
                    continue;
                };
                let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if got.len() >= end + 4 + len || n == 0 {
                    break;
                }
            }
            let _ = tx.send(got);
            for piece in answer {
                if s.write_all(piece).is_err() {
                    return; // the client is gone
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        (addr, rx)
    }

    #[test]
    fn content_length_body_and_headers() {
        let (addr, requests) = serve(&[
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Two: a\r\n",
            b"Content-Length: 11\r\n\r\n{\"ok\":",
            b"true}trailing garbage",
        ]);
        let r = get(addr, "/ping", &[("X-SLURM-USER-TOKEN", "t")]).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("X-TWO"), Some("a"));
        assert_eq!(r.text(), "{\"ok\":true}");
        let sent = String::from_utf8(requests.recv().unwrap()).unwrap();
        assert_eq!(
            sent,
            format!(
                "GET /ping HTTP/1.1\r\nHost: {addr}\r\nX-SLURM-USER-TOKEN: t\r\nConnection: close\r\n\r\n"
            )
        );
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let (addr, _) = serve(&[
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"5\r\nhello\r\n7;ext=1\r\n, world\r\n",
            b"0\r\nX-Trailer: x\r\n\r\n",
        ]);
        let r = post(addr, "/submit", &[], b"{}").unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(r.text(), "hello, world");
    }

    #[test]
    fn body_up_to_the_end_of_the_connection() {
        let (addr, _) = serve(&[b"HTTP/1.0 503 Service Unavailable\r\n\r\nnot ", b"synced"]);
        let r = get(addr, "/readyz", &[]).unwrap();
        assert_eq!(r.status, 503);
        assert!(r.headers.is_empty());
        assert_eq!(r.text(), "not synced");
    }

    #[test]
    fn interim_answers_are_skipped_and_bodiless_statuses_read_no_body() {
        let (addr, _) = serve(&[
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
        ]);
        let r = get(addr, "/", &[]).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (204, &b""[..]));
    }

    #[test]
    fn the_request_is_one_piece_with_its_body_and_length() {
        let (addr, requests) = serve(&[b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]);
        let r = Client::default()
            .request(
                addr,
                "PUT",
                "/faults",
                &[("Host", "example"), ("Content-Type", "application/json")],
                b"{\"a\":1}",
            )
            .unwrap();
        assert_eq!((r.status, r.body.len()), (200, 0));
        let sent = String::from_utf8(requests.recv().unwrap()).unwrap();
        assert_eq!(
            sent,
            "PUT /faults HTTP/1.1\r\nHost: example\r\nContent-Type: application/json\r\nContent-Length: 7\r\nConnection: close\r\n\r\n{\"a\":1}"
        );
        assert_eq!(
            encode(addr, "POST", "/x", &[], b""),
            format!(
                "POST /x HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .into_bytes()
        );
    }

    #[test]
    fn a_short_body_a_garbage_answer_and_a_silent_server_are_errors() {
        let (addr, _) = serve(&[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"]);
        let e = get(addr, "/", &[]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");

        let (addr, _) = serve(&[b"SSH-2.0-OpenSSH\r\n\r\n"]);
        let e = get(addr, "/", &[]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");

        let (addr, _) = serve(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]);
        let e = get(addr, "/", &[]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");

        // Accepts and never answers.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let started = Instant::now();
        let e = Client::with_timeouts(Duration::from_secs(1), Duration::from_millis(200))
            .get(addr, "/", &[])
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(listener);
    }
}
