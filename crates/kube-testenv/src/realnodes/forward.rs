//! The in-cluster network of the kubelet nodes' pods, as far as tests need it, without
//! kube-proxy: TCP forwarders in the instance's owning process from addresses on the instance's
//! bridge `kt<slot>` (which pods reach through their CNI bridge's gateway, the host) to ports
//! on the host's loopback.
//!
//! - The `kubernetes` Service: its ClusterIP (the first address of the instance's own service
//!   CIDR, [`super::service_cidr`]) port 443 forwards to kube-apiserver on `127.0.0.1`, so a
//!   pod's in-cluster configuration (`KUBERNETES_SERVICE_HOST`/`_PORT`, which kubelet sets)
//!   reaches the API server, whose serving certificate names that address.
//! - [`crate::Instance::expose_host_port`]: any loopback port of the host (slurmrestd's, for a
//!   bridge running in a pod) at the instance's host address ([`super::host_ip`]).
//!
//! Other Services' ClusterIPs lead nowhere from a pod; kube-apiserver reaches webhooks behind
//! a Service through its endpoints (`--enable-aggregator-routing`), not its ClusterIP.

use crate::error::{Error, Result};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};

/// Listens on `listen` (an address of the host) and copies each connection to and from a new
/// connection to `to`, until the returned handle is aborted (which closes every connection).
/// A connection to `to` that fails closes the accepted one: the client sees a reset, as from a
/// Service without endpoints.
pub(crate) async fn spawn(listen: SocketAddr, to: SocketAddr) -> Result<AbortHandle> {
    let listener = TcpListener::bind(listen).await.map_err(Error::io(format!(
        "listen on {listen} (forwarding to {to})"
    )))?;
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((mut inbound, _)) => {
                        conns.spawn(async move {
                            let Ok(mut outbound) = TcpStream::connect(to).await else {
                                return;
                            };
                            let _ = inbound.set_nodelay(true);
                            let _ = outbound.set_nodelay(true);
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        });
                    }
                    // Out of file descriptors and the like: try again shortly.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    });
    Ok(task.abort_handle())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn copies_both_ways_and_stops_when_aborted() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = server.local_addr().unwrap();
        let echo = tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        // A free port on loopback to listen on.
        let listen = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let handle = spawn(listen, to).await.unwrap();
        let mut c = TcpStream::connect(listen).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        echo.await.unwrap();
        handle.abort();
        // The listener goes with the task.
        for _ in 0..100 {
            if TcpStream::connect(listen).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("still listening after abort");
    }
}
