//! The one HTTP request slurm-testenv makes itself: a readiness probe of slurmrestd.
//! A hand-written HTTP/1.1 GET keeps this crate free of an HTTP client dependency.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `GET path` with the Slurm token header and returns the HTTP status code.
pub fn get_status(port: u16, path: &str, token: &str) -> std::io::Result<u16> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    // One write: slurmrestd mishandles a request split over several segments (500, or a reset).
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-SLURM-USER-TOKEN: {token}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head)?;
    parse_status(&head[..n])
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response"))
}

fn parse_status(head: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(head).ok()?;
    let mut words = text.split_whitespace();
    if !words.next()?.starts_with("HTTP/") {
        return None;
    }
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line() {
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(parse_status(b"HTTP/1.1 511 Network"), Some(511));
        assert_eq!(parse_status(b"garbage"), None);
    }
}
