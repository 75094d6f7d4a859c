//! The two framings under NRI's messages, without I/O so they can be tested on split input.
//!
//! - The multiplexer (containerd/nri `pkg/net/multiplex`): the one socket carries frames of an
//!   8-byte header, the logical connection id (u32, big-endian) and the payload length (u32,
//!   big-endian), then the payload. Connection 1 carries the plugin service (the runtime calls
//!   the plugin), connection 2 the runtime service (the plugin calls the runtime). The bytes of
//!   one connection, frame after frame, form a ttrpc stream.
//! - ttrpc (containerd/ttrpc `channel.go`, `request.proto`): a 10-byte header, the data length
//!   (u32, big-endian, at most 4 MiB), the stream id (u32, big-endian; odd for the client's
//!   calls), the message type (1 request, 2 response, 3 data) and flags (0 for a unary call),
//!   then a protobuf `Request` or `Response`.

use std::collections::HashMap;

/// Connection id of the plugin service: the runtime is the ttrpc client, the plugin the server.
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// Connection id of the runtime service: the plugin is the ttrpc client.
pub const RUNTIME_SERVICE_CONN: u32 = 2;

const MUX_HEADER: usize = 8;
/// ttrpc's header length.
pub const TTRPC_HEADER: usize = 10;
/// ttrpc's largest message data (4 MiB).
pub const TTRPC_MAX_DATA: usize = 4 << 20;
/// The multiplexer's largest frame payload: one whole ttrpc message.
const MUX_MAX_PAYLOAD: usize = TTRPC_HEADER + TTRPC_MAX_DATA;
/// The largest frame this side writes. The runtime's ttrpc reads its connection through a
/// 4096-byte buffer and its multiplexer refuses a frame that does not fit the reader's buffer
/// (ENOMEM), so larger messages go out as several frames of at most this size. Measured:
/// tests/containerd.rs sends a 15 kB UpdateContainers; as one frame, containerd 2.4.2 never
/// answers it.
pub const MUX_WRITE_CHUNK: usize = 4096;

/// ttrpc message type: a request opening a stream.
pub const TYPE_REQUEST: u8 = 1;
/// ttrpc message type: the response ending a stream.
pub const TYPE_RESPONSE: u8 = 2;

/// A malformed stream: the connection cannot continue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A multiplexer frame longer than any ttrpc message.
    #[error("multiplexer frame of {0} bytes (at most {MUX_MAX_PAYLOAD})")]
    MuxTooLong(usize),
    /// A ttrpc message longer than ttrpc allows.
    #[error("ttrpc message of {0} bytes (at most {TTRPC_MAX_DATA})")]
    TtrpcTooLong(usize),
}

/// Appends the frames carrying `data` on connection `conn` to `out`, each payload at most
/// [`MUX_WRITE_CHUNK`] bytes.
pub fn mux_encode(conn: u32, data: &[u8], out: &mut Vec<u8>) {
    for chunk in data.chunks(MUX_WRITE_CHUNK) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
}

/// Splits the socket's bytes into per-connection byte streams, however the reads cut them.
#[derive(Debug, Default)]
pub struct MuxDecoder {
    buf: Vec<u8>,
}

impl MuxDecoder {
    /// Takes more bytes read from the socket.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame: (connection id, payload); `Ok(None)` until one is complete.
    pub fn next_frame(&mut self) -> Result<Option<(u32, Vec<u8>)>, FrameError> {
        if self.buf.len() < MUX_HEADER {
            return Ok(None);
        }
        let conn = u32::from_be_bytes(self.buf[0..4].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(self.buf[4..8].try_into().expect("4 bytes")) as usize;
        if len > MUX_MAX_PAYLOAD {
            return Err(FrameError::MuxTooLong(len));
        }
        if self.buf.len() < MUX_HEADER + len {
            return Ok(None);
        }
        let payload = self.buf[MUX_HEADER..MUX_HEADER + len].to_vec();
        self.buf.drain(..MUX_HEADER + len);
        Ok(Some((conn, payload)))
    }
}

/// One ttrpc message: header fields and its data (a protobuf `Request` or `Response`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TtrpcMessage {
    /// Stream id.
    pub stream: u32,
    /// Message type ([`TYPE_REQUEST`], [`TYPE_RESPONSE`], 3 for stream data).
    pub kind: u8,
    /// Flags (0 for unary calls).
    pub flags: u8,
    /// The protobuf message.
    pub data: Vec<u8>,
}

impl TtrpcMessage {
    /// The message's bytes: header then data.
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        if self.data.len() > TTRPC_MAX_DATA {
            return Err(FrameError::TtrpcTooLong(self.data.len()));
        }
        let mut out = Vec::with_capacity(TTRPC_HEADER + self.data.len());
        out.extend_from_slice(&(self.data.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.data);
        Ok(out)
    }
}

/// Cuts one connection's byte stream into ttrpc messages, whatever the frames' boundaries.
#[derive(Debug, Default)]
pub struct TtrpcDecoder {
    buf: Vec<u8>,
}

impl TtrpcDecoder {
    /// Takes a frame's payload.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message; `Ok(None)` until one is complete.
    pub fn next_message(&mut self) -> Result<Option<TtrpcMessage>, FrameError> {
        if self.buf.len() < TTRPC_HEADER {
            return Ok(None);
        }
        let len = u32::from_be_bytes(self.buf[0..4].try_into().expect("4 bytes")) as usize;
        if len > TTRPC_MAX_DATA {
            return Err(FrameError::TtrpcTooLong(len));
        }
        if self.buf.len() < TTRPC_HEADER + len {
            return Ok(None);
        }
        let msg = TtrpcMessage {
            stream: u32::from_be_bytes(self.buf[4..8].try_into().expect("4 bytes")),
            kind: self.buf[8],
            flags: self.buf[9],
            data: self.buf[TTRPC_HEADER..TTRPC_HEADER + len].to_vec(),
        };
        self.buf.drain(..TTRPC_HEADER + len);
        Ok(Some(msg))
    }
}

/// Per-connection ttrpc decoders over one multiplexer decoder: bytes in, (connection,
/// message) out. Frames for connections other than 1 and 2 are dropped, as the runtime's
/// multiplexer drops frames for connections it has not opened.
#[derive(Debug, Default)]
pub struct Demux {
    mux: MuxDecoder,
    conns: HashMap<u32, TtrpcDecoder>,
}

impl Demux {
    /// Takes bytes read from the socket; returns the messages they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<(u32, TtrpcMessage)>, FrameError> {
        self.mux.push(bytes);
        let mut out = Vec::new();
        while let Some((conn, payload)) = self.mux.next_frame()? {
            if conn != PLUGIN_SERVICE_CONN && conn != RUNTIME_SERVICE_CONN {
                tracing::debug!(
                    conn,
                    len = payload.len(),
                    "NRI: frame for an unknown connection dropped"
                );
                continue;
            }
            let d = self.conns.entry(conn).or_default();
            d.push(&payload);
            while let Some(m) = d.next_message()? {
                out.push((conn, m));
            }
        }
        Ok(out)
    }
}

/// ttrpc's `Request` (request.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    /// Fully qualified service name, e.g. `nri.pkg.api.v1alpha1.Plugin`.
    #[prost(string, tag = "1")]
    pub service: String,
    /// Method name, e.g. `CreateContainer`.
    #[prost(string, tag = "2")]
    pub method: String,
    /// The method's protobuf argument.
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    /// The caller's deadline from now, in nanoseconds; 0 for none.
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    /// Metadata (gRPC-style headers).
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<KeyValue>,
}

/// ttrpc's `KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// Key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// ttrpc's `Response`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    /// The call's status; absent or code 0 for success.
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    /// The method's protobuf result.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// `google.rpc.Status` (details left out).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// gRPC code: 0 OK, 2 Unknown, 12 Unimplemented...
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// Message.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// gRPC code Unknown: what a Go ttrpc server sends for a plain error.
pub const CODE_UNKNOWN: i32 = 2;
/// gRPC code InvalidArgument.
pub const CODE_INVALID_ARGUMENT: i32 = 3;
/// gRPC code Unimplemented: the runtime then falls back (e.g. to StateChange) or skips.
pub const CODE_UNIMPLEMENTED: i32 = 12;

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn msg(stream: u32, kind: u8, data: Vec<u8>) -> TtrpcMessage {
        TtrpcMessage {
            stream,
            kind,
            flags: 0,
            data,
        }
    }

    #[test]
    fn ttrpc_header_layout() {
        let bytes = msg(7, TYPE_RESPONSE, vec![0xaa, 0xbb]).encode().unwrap();
        assert_eq!(bytes, [0, 0, 0, 2, 0, 0, 0, 7, 2, 0, 0xaa, 0xbb]);
    }

    #[test]
    fn mux_header_layout() {
        let mut out = Vec::new();
        mux_encode(2, &[1, 2, 3], &mut out);
        assert_eq!(out, [0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3]);
    }

    #[test]
    fn request_round_trip_through_mux_and_ttrpc() {
        let req = Request {
            service: "nri.pkg.api.v1alpha1.Plugin".into(),
            method: "CreateContainer".into(),
            payload: vec![1, 2, 3],
            timeout_nano: 2_000_000_000,
            metadata: vec![],
        };
        let ttrpc = msg(3, TYPE_REQUEST, req.encode_to_vec()).encode().unwrap();
        let mut wire = Vec::new();
        mux_encode(PLUGIN_SERVICE_CONN, &ttrpc, &mut wire);
        let mut demux = Demux::default();
        let got = demux.push(&wire).unwrap();
        assert_eq!(got.len(), 1);
        let (conn, m) = &got[0];
        assert_eq!((*conn, m.stream, m.kind, m.flags), (1, 3, TYPE_REQUEST, 0));
        assert_eq!(Request::decode(m.data.as_slice()).unwrap(), req);
    }

    #[test]
    fn response_status_round_trip() {
        let resp = Response {
            status: Some(Status {
                code: CODE_UNKNOWN,
                message: "no CPUs left".into(),
            }),
            payload: vec![],
        };
        let back = Response::decode(resp.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, resp);
        // An OK status encodes as an empty submessage: present, code 0.
        let ok = Response {
            status: Some(Status::default()),
            payload: vec![9],
        };
        assert_eq!(ok.encode_to_vec(), [0x0a, 0x00, 0x12, 0x01, 9]);
    }

    /// Two connections interleaved, a message cut across frames, and the bytes read one at a
    /// time: every message comes out whole, on its connection, in order.
    #[test]
    fn split_reads_and_interleaved_connections() {
        let big = vec![0x5a; 3 * MUX_WRITE_CHUNK + 17];
        let a = msg(1, TYPE_REQUEST, big.clone()).encode().unwrap();
        let b = msg(2, TYPE_RESPONSE, vec![4, 5]).encode().unwrap();
        let c = msg(3, TYPE_REQUEST, vec![]).encode().unwrap();
        let mut wire = Vec::new();
        // a's first chunk, then b whole on the other connection, then the rest of a, then c.
        mux_encode(1, &a[..100], &mut wire);
        mux_encode(2, &b, &mut wire);
        mux_encode(1, &a[100..], &mut wire);
        mux_encode(1, &c, &mut wire);
        for step in [1, 7, 4096, wire.len()] {
            let mut demux = Demux::default();
            let mut got = Vec::new();
            for chunk in wire.chunks(step) {
                got.extend(demux.push(chunk).unwrap());
            }
            assert_eq!(
                got,
                vec![
                    (2, msg(2, TYPE_RESPONSE, vec![4, 5])),
                    (1, msg(1, TYPE_REQUEST, big.clone())),
                    (1, msg(3, TYPE_REQUEST, vec![])),
                ],
                "read {step} bytes at a time"
            );
        }
    }

    #[test]
    fn large_messages_leave_in_chunks_the_runtime_can_read() {
        let data = vec![1u8; 10_000];
        let mut wire = Vec::new();
        mux_encode(2, &data, &mut wire);
        let mut d = MuxDecoder::default();
        d.push(&wire);
        let mut sizes = Vec::new();
        while let Some((conn, p)) = d.next_frame().unwrap() {
            assert_eq!(conn, 2);
            sizes.push(p.len());
        }
        assert_eq!(sizes, [4096, 4096, 1808]);
    }

    #[test]
    fn oversized_lengths_are_refused() {
        let mut d = MuxDecoder::default();
        d.push(&[0, 0, 0, 1, 0xff, 0, 0, 0]);
        assert!(matches!(d.next_frame(), Err(FrameError::MuxTooLong(_))));
        let mut t = TtrpcDecoder::default();
        t.push(&[0x01, 0, 0, 0, 0, 0, 0, 1, 1, 0]);
        assert!(matches!(t.next_message(), Err(FrameError::TtrpcTooLong(_))));
        let too_long = msg(1, 1, vec![0; TTRPC_MAX_DATA + 1]);
        assert!(too_long.encode().is_err());
    }
}
