//! A byte-level shim in front of hyper's HTTP/2 server that makes the kubelet's plugin
//! registration calls acceptable to it.
//!
//! The kubelet dials a plugin's registration socket by its bare path (grpc-go's passthrough
//! resolver), so grpc-go sends the percent-encoded path as `:authority`
//! (`%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2F...`). h2 refuses such a request
//! (`malformed authority`, RST_STREAM PROTOCOL_ERROR) and offers no way to relax it. The shim
//! copies the client's bytes to the server, decoding each header block (HPACK) and encoding it
//! again with `:authority: localhost` when the given one is not a valid authority. The blocks
//! it writes are literals never indexed, so the server's dynamic table stays empty while the
//! shim's decoder follows the client's. Everything else passes as it is, both ways.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame payload the shim writes (HTTP/2's default `SETTINGS_MAX_FRAME_SIZE`).
const MAX_FRAME: usize = 16_384;
/// The largest header block the shim accepts (the server's own limit is lower).
const MAX_BLOCK: usize = 1 << 20;

/// Why the shim dropped a connection.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("not an HTTP/2 connection (no client preface)")]
    Preface,
    #[error("a header block does not decode: {0}")]
    Hpack(String),
    #[error("malformed HTTP/2 frame: {0}")]
    Frame(&'static str),
}

/// Copies `client` to `server`, rewriting header blocks (see the module doc), until either
/// side closes.
pub async fn client_to_server<C, S>(mut client: C, mut server: S) -> Result<(), ShimError>
where
    C: AsyncRead + Unpin,
    S: AsyncWrite + Unpin,
{
    let mut preface = [0u8; 24];
    client.read_exact(&mut preface).await?;
    if preface != PREFACE {
        return Err(ShimError::Preface);
    }
    server.write_all(&preface).await?;
    let mut decoder = hpack::Decoder::new();
    loop {
        let Some((kind, flags, stream, payload)) = read_frame(&mut client).await? else {
            return Ok(());
        };
        if kind != HEADERS {
            server
                .write_all(&frame_header(payload.len(), kind, flags, stream))
                .await?;
            server.write_all(&payload).await?;
            continue;
        }
        let mut block = header_fragment(flags, &payload)?.to_vec();
        let mut end = flags & END_HEADERS != 0;
        while !end {
            let (k, f, s, p) = read_frame(&mut client)
                .await?
                .ok_or(ShimError::Frame("connection closed inside a header block"))?;
            if k != CONTINUATION || s != stream {
                return Err(ShimError::Frame("a header block not continued"));
            }
            block.extend_from_slice(&p);
            if block.len() > MAX_BLOCK {
                return Err(ShimError::Frame("header block too large"));
            }
            end = f & END_HEADERS != 0;
        }
        let headers = decoder
            .decode(&block)
            .map_err(|e| ShimError::Hpack(format!("{e:?}")))?;
        let block = encode(&fix_authority(headers));
        let mut chunks = block.chunks(MAX_FRAME).peekable();
        let mut first = true;
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let (k, mut f) = if first {
                (HEADERS, flags & END_STREAM)
            } else {
                (CONTINUATION, 0)
            };
            if last {
                f |= END_HEADERS;
            }
            server
                .write_all(&frame_header(chunk.len(), k, f, stream))
                .await?;
            server.write_all(chunk).await?;
            first = false;
        }
        if block.is_empty() {
            server
                .write_all(&frame_header(
                    0,
                    HEADERS,
                    (flags & END_STREAM) | END_HEADERS,
                    stream,
                ))
                .await?;
        }
    }
}

/// One frame: `(type, flags, stream id, payload)`; `None` at a clean end of the stream.
async fn read_frame<C: AsyncRead + Unpin>(
    client: &mut C,
) -> Result<Option<(u8, u8, u32, Vec<u8>)>, ShimError> {
    let mut head = [0u8; 9];
    match client.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    if len > MAX_BLOCK {
        return Err(ShimError::Frame("frame too large"));
    }
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    client.read_exact(&mut payload).await?;
    Ok(Some((head[3], head[4], stream, payload)))
}

fn frame_header(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; 9] {
    let s = stream.to_be_bytes();
    [
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        kind,
        flags,
        s[0],
        s[1],
        s[2],
        s[3],
    ]
}

/// The header block fragment of a HEADERS frame's payload (padding and priority removed; the
/// priority is advisory and dropped).
fn header_fragment(flags: u8, payload: &[u8]) -> Result<&[u8], ShimError> {
    let mut p = payload;
    let mut pad = 0usize;
    if flags & PADDED != 0 {
        let (&n, rest) = p
            .split_first()
            .ok_or(ShimError::Frame("padded without length"))?;
        pad = usize::from(n);
        p = rest;
    }
    if flags & PRIORITY != 0 {
        p = p.get(5..).ok_or(ShimError::Frame("priority too short"))?;
    }
    p.get(
        ..p.len()
            .checked_sub(pad)
            .ok_or(ShimError::Frame("padding too long"))?,
    )
    .ok_or(ShimError::Frame("padding too long"))
}

/// `:authority` made `localhost` when it is not a valid authority.
pub fn fix_authority(mut headers: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    for (name, value) in &mut headers {
        if name == b":authority" && http::uri::Authority::try_from(value.as_slice()).is_err() {
            *value = b"localhost".to_vec();
        }
    }
    headers
}

/// HPACK integer with an `n`-bit prefix, the first byte's other bits `high`.
fn put_int(out: &mut Vec<u8>, high: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(high | v as u8);
        return;
    }
    out.push(high | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A header block of literals never indexed (no Huffman coding): no dynamic table state.
pub fn encode(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0x10);
        put_int(&mut out, 0, 7, name.len());
        out.extend_from_slice(name);
        put_int(&mut out, 0, 7, value.len());
        out.extend_from_slice(value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (n.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn a_percent_encoded_socket_path_becomes_localhost_and_the_rest_is_kept() {
        let headers = vec![
            h(":method", "POST"),
            h(
                ":authority",
                "%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fx.sock",
            ),
            h(":path", "/pluginregistration.Registration/GetInfo"),
            h("grpc-timeout", "999m"),
        ];
        let fixed = fix_authority(headers.clone());
        assert_eq!(fixed[1], h(":authority", "localhost"));
        assert_eq!(fixed[2], headers[2]);
        let ok = vec![h(":authority", "localhost:80")];
        assert_eq!(fix_authority(ok.clone()), ok);
    }

    #[test]
    fn the_literals_written_decode_as_they_were() {
        let long = "x".repeat(300);
        let headers = vec![h(":path", "/a/b"), h("long", &long), h("", "")];
        let block = encode(&headers);
        assert_eq!(hpack::Decoder::new().decode(&block).unwrap(), headers);
    }

    #[tokio::test]
    async fn header_blocks_are_rewritten_other_frames_pass_as_they_are() {
        // A client block with Huffman coding and indexing (hpack's encoder), split over
        // HEADERS (padded, with priority) and CONTINUATION, then a DATA frame.
        let headers = vec![
            h(":method", "POST"),
            h(":authority", "%2Fa%2Fb.sock"),
            h(":path", "/p.S/M"),
        ];
        let block = hpack::Encoder::new().encode(headers.iter().map(|(n, v)| (&n[..], &v[..])));
        let (a, b) = block.split_at(3);
        let mut input = PREFACE.to_vec();
        let mut first = vec![2u8, 0, 0, 0, 1, 16];
        first.extend_from_slice(a);
        first.extend_from_slice(&[0, 0]);
        input.extend_from_slice(&frame_header(first.len(), HEADERS, PADDED | PRIORITY, 1));
        input.extend_from_slice(&first);
        input.extend_from_slice(&frame_header(b.len(), CONTINUATION, END_HEADERS, 1));
        input.extend_from_slice(b);
        input.extend_from_slice(&frame_header(3, 0x0, END_STREAM, 1));
        input.extend_from_slice(b"abc");
        let mut out = Vec::new();
        client_to_server(&input[..], &mut out).await.unwrap();
        assert_eq!(&out[..24], PREFACE);
        let rest = &out[24..];
        let len = usize::from(rest[2]);
        assert_eq!((rest[3], rest[4]), (HEADERS, END_HEADERS));
        let got = hpack::Decoder::new().decode(&rest[9..9 + len]).unwrap();
        assert_eq!(got, fix_authority(headers));
        assert_eq!(
            &rest[9 + len..],
            &{
                let mut d = frame_header(3, 0x0, END_STREAM, 1).to_vec();
                d.extend_from_slice(b"abc");
                d
            }[..]
        );
    }
}
