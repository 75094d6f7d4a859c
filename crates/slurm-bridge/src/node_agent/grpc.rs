//! A minimal gRPC server for the kubelet's plugin sockets: unary calls only, over HTTP/2
//! without TLS (h2c, prior knowledge) on a unix socket, which is all the kubelet's plugin
//! registration and DRA clients use. Written on hyper (already a dependency) rather than
//! tonic, to keep the dependency tree small (docs/architecture.md).
//!
//! The wire format: a request and a response body each hold one message framed as a
//! compressed flag byte (always 0 here), a 4-byte big-endian length and the protobuf bytes;
//! the outcome is the `grpc-status` (and `grpc-message`) trailer.

use super::authority;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::stream;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::UnixListener;

/// gRPC status codes this server answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok = 0,
    InvalidArgument = 3,
    Unimplemented = 12,
    Internal = 13,
}

/// A failed call: its code and message (the `grpc-status` and `grpc-message` trailers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gRPC status {code:?}: {message}")]
pub struct Status {
    pub code: Code,
    pub message: String,
}

impl Status {
    /// A call of a method this server does not serve.
    pub fn unimplemented(method: &str) -> Status {
        Status {
            code: Code::Unimplemented,
            message: format!("unknown method {method}"),
        }
    }

    /// A request that does not decode.
    pub fn invalid(message: impl Into<String>) -> Status {
        Status {
            code: Code::InvalidArgument,
            message: message.into(),
        }
    }
}

/// The calls a socket serves: `method` is the request path, `/<package>.<Service>/<Method>`;
/// `request` the message's protobuf bytes; the answer the response's.
pub trait Service: Send + Sync + 'static {
    fn call(
        &self,
        method: &str,
        request: Bytes,
    ) -> impl Future<Output = Result<Bytes, Status>> + Send;

    /// True for a server-streaming `method` answered with a stream that stays open and sends
    /// nothing (a watch with nothing to report), until the client goes.
    fn is_silent_stream(&self, _method: &str) -> bool {
        false
    }
}

/// Decodes a protobuf request, the error a gRPC `InvalidArgument`.
pub fn decode<M: prost::Message + Default>(bytes: Bytes) -> Result<M, Status> {
    M::decode(bytes).map_err(|e| Status::invalid(format!("request does not decode: {e}")))
}

/// Encodes a protobuf response.
pub fn encode<M: prost::Message>(m: &M) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

/// Why a socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("creating the folder of {path}: {source}")]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("listening on {path}: {source}")]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A unix socket listening at `path` (its folder created, a stale socket replaced), removed
/// again when the value is dropped.
pub struct Socket {
    listener: Option<UnixListener>,
    path: PathBuf,
}

impl Socket {
    /// Binds `path`.
    pub fn bind(path: &Path) -> Result<Socket, ServeError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ServeError::Folder {
                path: path.to_path_buf(),
                source,
            })?;
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|source| ServeError::Bind {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Socket {
            listener: Some(listener),
            path: path.to_path_buf(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves `service` on the socket until the returned future is dropped.
    pub async fn serve<S: Service>(mut self, service: Arc<S>) {
        let listener = self.listener.take().expect("served once");
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(socket = %self.path.display(), error = %e, "accepting a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let service = service.clone();
            let path = self.path.clone();
            // hyper serves one end of a socket pair; the shim relays the client to the other
            // (super::authority: the kubelet's `:authority` is not one h2 accepts).
            let (ours, theirs) = match tokio::net::UnixStream::pair() {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(socket = %self.path.display(), error = %e, "socket pair");
                    continue;
                }
            };
            let (client_read, mut client_write) = stream.into_split();
            let (mut server_read, server_write) = ours.into_split();
            let shim_path = path.clone();
            tokio::spawn(async move {
                if let Err(e) = authority::client_to_server(client_read, server_write).await {
                    tracing::debug!(socket = %shim_path.display(), error = %e, "gRPC client connection ended");
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
            tokio::spawn(async move {
                let handler = hyper::service::service_fn(move |req| handle(service.clone(), req));
                if let Err(e) = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(theirs), handler)
                    .await
                {
                    tracing::debug!(socket = %path.display(), error = %e, "gRPC connection ended");
                }
            });
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

type Body = StreamBody<stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

async fn handle<S: Service>(
    service: Arc<S>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.uri().path().to_string();
    if service.is_silent_stream(&method) {
        return Ok(response(Box::pin(stream::pending())));
    }
    let outcome = match req.into_body().collect().await {
        Ok(body) => match unframe(body.to_bytes()) {
            Ok(message) => service.call(&method, message).await,
            Err(status) => Err(status),
        },
        Err(e) => Err(Status {
            code: Code::Internal,
            message: format!("reading the request: {e}"),
        }),
    };
    if let Err(status) = &outcome {
        tracing::debug!(%method, ?status, "gRPC call failed");
    }
    Ok(reply(outcome))
}

/// The one message of a request body.
pub fn unframe(mut body: Bytes) -> Result<Bytes, Status> {
    if body.len() < 5 {
        return Err(Status::invalid(format!(
            "a gRPC message needs a 5-byte prefix; the body has {} bytes",
            body.len()
        )));
    }
    if body.get_u8() != 0 {
        return Err(Status::invalid("compressed messages are not accepted"));
    }
    let len = body.get_u32() as usize;
    if body.len() != len {
        return Err(Status::invalid(format!(
            "one message of {len} bytes expected; the body holds {} bytes",
            body.len()
        )));
    }
    Ok(body)
}

/// A message framed for a body.
pub fn frame(message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.put_u8(0);
    b.put_u32(message.len() as u32);
    b.put_slice(message);
    b.freeze()
}

/// `grpc-message` is percent-encoded: printable ASCII but `%` as is, the rest as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn reply(outcome: Result<Bytes, Status>) -> Response<Body> {
    let mut trailers = HeaderMap::new();
    let mut frames = Vec::new();
    match outcome {
        Ok(message) => {
            frames.push(Ok(Frame::data(frame(&message))));
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
        }
        Err(status) => {
            trailers.insert("grpc-status", HeaderValue::from(status.code as u16));
            if let Ok(v) = HeaderValue::from_str(&percent_encode(&status.message)) {
                trailers.insert("grpc-message", v);
            }
        }
    }
    frames.push(Ok(Frame::trailers(trailers)));
    response(Box::pin(stream::iter(frames)))
}

fn response(
    frames: stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>,
) -> Response<Body> {
    let mut response = Response::new(StreamBody::new(frames));
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_and_unframed() {
        let f = frame(b"abc");
        assert_eq!(&f[..], &[0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(unframe(f).unwrap(), Bytes::from_static(b"abc"));
        assert_eq!(unframe(frame(b"")).unwrap(), Bytes::new());
        assert!(unframe(Bytes::from_static(&[0, 0, 0])).is_err());
        assert!(unframe(Bytes::from_static(&[1, 0, 0, 0, 0])).is_err());
        assert!(unframe(Bytes::from_static(&[0, 0, 0, 0, 2, 1])).is_err());
    }

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(percent_encode("a b%c\né"), "a b%25c%0A%C3%A9");
    }

    struct Echo;
    impl Service for Echo {
        async fn call(&self, method: &str, request: Bytes) -> Result<Bytes, Status> {
            match method {
                "/t.Echo/Say" => Ok(request),
                _ => Err(Status::unimplemented(method)),
            }
        }
    }

    /// One HTTP/2 request on the socket: the response's data and `grpc-status`.
    async fn call(path: &Path, method: &str, body: Bytes) -> (Bytes, String) {
        let stream = tokio::net::UnixStream::connect(path).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let req = Request::post(format!("http://localhost{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(http_body_util::Full::new(body))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.headers()["content-type"], "application/grpc");
        let collected = resp.into_body().collect().await.unwrap();
        let status = collected.trailers().expect("trailers")["grpc-status"]
            .to_str()
            .unwrap()
            .to_string();
        (collected.to_bytes(), status)
    }

    #[tokio::test]
    async fn a_unary_call_over_a_unix_socket_answers_with_its_message_and_status() {
        let path = std::env::temp_dir().join(format!("sb-grpc-{}/x.sock", std::process::id()));
        let socket = Socket::bind(&path).unwrap();
        let server = tokio::spawn(socket.serve(Arc::new(Echo)));
        let (data, status) = call(&path, "/t.Echo/Say", frame(b"hi")).await;
        assert_eq!((data, status.as_str()), (frame(b"hi"), "0"));
        let (data, status) = call(&path, "/t.Echo/Other", frame(b"")).await;
        assert_eq!((data, status.as_str()), (Bytes::new(), "12"));
        let (_, status) = call(&path, "/t.Echo/Say", Bytes::from_static(b"x")).await;
        assert_eq!(status, "3");
        server.abort();
        let _ = server.await;
        assert!(!path.exists(), "the socket is removed with the server");
        let _ = std::fs::remove_dir(path.parent().unwrap());
    }
}
