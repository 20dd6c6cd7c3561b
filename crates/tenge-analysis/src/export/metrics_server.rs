//! The `/metrics` endpoint of `watch --prometheus`: hyper on a one-thread
//! tokio runtime, over TLS when the web config asks for it (rustls), to the
//! web config's users only when it names some (HTTP basic auth).
//!
//! Each connection is one request (no keep-alive) and has [`CLIENT_TIMEOUT`]
//! for all of it, TLS handshake included; at most [`MAX_CLIENTS`] are served
//! at once, and more are turned away at once. A slow or silent client delays
//! nobody else: connections are tasks, and bcrypt runs off the runtime.

use super::basic_auth::Users;
use super::prometheus::{registry, text_004, Snapshot};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::text;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};

/// The OpenMetrics text format, as prometheus-client writes it: for
/// scrapers that ask for it (Prometheus does).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The Prometheus text format, for everyone else.
pub const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";
/// A connection not done after this long (handshake, request and answer)
/// is dropped: a byte now and then does not keep it.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more are closed at once (plain HTTP ones
/// told 503 first).
pub const MAX_CLIENTS: usize = 16;
/// How long the server waits after a failed accept (out of descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Who may scrape and over what: users (basic auth) and a TLS configuration,
/// each optional (see `export::web_config`).
#[derive(Default)]
pub struct Access {
    pub users: Option<Users>,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

pub struct MetricsServer {
    addr: SocketAddr,
    scheme: &'static str,
    snapshot: Arc<Mutex<Snapshot>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port) and serves an empty snapshot
    /// until the first publish.
    pub fn start(addr: SocketAddr, access: Access) -> io::Result<MetricsServer> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let listener = {
            let _context = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let snapshot = Arc::new(Mutex::new(Snapshot::default()));
        let scheme = if access.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let site = Arc::new(Site {
            registry: registry(Arc::clone(&snapshot)),
            users: access.users.map(Arc::new),
            tls: access.tls.map(tokio_rustls::TlsAcceptor::from),
        });
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("tt-metrics".into())
            .spawn(move || runtime.block_on(serve(listener, site, stopped)))?;
        Ok(MetricsServer {
            addr,
            scheme,
            snapshot,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where to scrape: `http(s)://ADDR:PORT/metrics`.
    pub fn url(&self) -> String {
        format!("{}://{}/metrics", self.scheme, self.addr)
    }

    /// Replaces what the next scrapes see.
    pub fn publish(&self, snapshot: Snapshot) {
        *self.snapshot.lock().unwrap_or_else(PoisonError::into_inner) = snapshot;
    }
}

impl Drop for MetricsServer {
    /// Stops accepting and drops the connections in flight.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the server serves, and to whom.
struct Site {
    registry: Registry,
    users: Option<Arc<Users>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

async fn serve(listener: TcpListener, site: Arc<Site>, mut stop: oneshot::Receiver<()>) {
    let clients = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&clients).try_acquire_owned() else {
            if site.tls.is_none() {
                let _ = stream.try_write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
            continue;
        };
        let site = Arc::clone(&site);
        tokio::spawn(async move {
            // A client that misbehaves is its own problem; the server goes on.
            let _ = tokio::time::timeout(CLIENT_TIMEOUT, site.connection(stream)).await;
            drop(permit);
        });
    }
}

impl Site {
    /// One request on one connection, through TLS if configured.
    async fn connection(self: Arc<Self>, stream: TcpStream) -> Result<(), io::Error> {
        let http = {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.keep_alive(false);
            builder
        };
        let site = Arc::clone(&self);
        let service = hyper::service::service_fn(move |request| {
            let site = Arc::clone(&site);
            async move { Ok::<_, Infallible>(site.respond(&request).await) }
        });
        let served = match &self.tls {
            Some(acceptor) => {
                let stream = acceptor.accept(stream).await?;
                http.serve_connection(TokioIo::new(stream), service).await
            }
            None => http.serve_connection(TokioIo::new(stream), service).await,
        };
        served.map_err(io::Error::other)
    }

    /// `GET /metrics` gets the registry (the users' only, if any).
    async fn respond(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        if request.method() != Method::GET {
            return answer(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        }
        match request.uri().path() {
            "/metrics" if !self.allowed(request).await => {
                let mut refused = answer(StatusCode::UNAUTHORIZED, "");
                refused.headers_mut().insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"tenge-trace\""),
                );
                refused
            }
            "/metrics" => {
                let mut body = String::new();
                if text::encode(&mut body, &self.registry).is_err() {
                    return answer(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode\n");
                }
                let (body, content_type) = match wants_openmetrics(request) {
                    true => (body, OPENMETRICS),
                    false => (text_004(&body), TEXT_004),
                };
                let mut metrics = answer(StatusCode::OK, body);
                metrics
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
                metrics
            }
            "/" => answer(StatusCode::OK, "tenge-trace: metrics at /metrics\n"),
            _ => answer(StatusCode::NOT_FOUND, "not found\n"),
        }
    }

    /// Whether the request names a user and their password (bcrypt is slow
    /// on purpose: it runs beside the runtime, not on it).
    async fn allowed(&self, request: &Request<Incoming>) -> bool {
        let Some(users) = &self.users else {
            return true;
        };
        let Some(authorization) = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let (users, authorization) = (Arc::clone(users), authorization.to_string());
        tokio::task::spawn_blocking(move || users.allow(Some(&authorization)))
            .await
            .unwrap_or(false)
    }
}

/// Whether the scraper's `Accept` names OpenMetrics (any weight above 0).
fn wants_openmetrics(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get_all(hyper::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| {
            let mut parts = media.split(';').map(str::trim);
            parts.next() == Some("application/openmetrics-text")
                && !parts.any(|p| p.replace(' ', "") == "q=0")
        })
}

fn answer(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if status != StatusCode::OK {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::web_config::tests::Pki;
    use std::collections::BTreeMap;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    #[test]
    fn server_answers_metrics_and_404() {
        let server =
            MetricsServer::start("127.0.0.1:0".parse().unwrap(), Access::default()).unwrap();
        server.publish(Snapshot {
            events: 42,
            ..Snapshot::default()
        });
        let metrics = get(
            server.local_addr(),
            "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        // Without an Accept naming OpenMetrics: the text format 0.0.4.
        assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
        assert!(metrics
            .to_lowercase()
            .contains(&format!("content-type: {TEXT_004}")));
        assert!(metrics.contains("\n# TYPE tenge_trace_events_total counter\n"));
        assert!(metrics.contains("\ntenge_trace_events_total 42\n"));
        assert!(!metrics.contains("# EOF"), "{metrics}");
        // Prometheus's own Accept header.
        let openmetrics = get(
            server.local_addr(),
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,\
             text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n\r\n",
        );
        assert!(openmetrics
            .to_lowercase()
            .contains(&format!("content-type: {OPENMETRICS}")));
        assert!(openmetrics.contains("\n# TYPE tenge_trace_events counter\n"));
        assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
        let missing = get(
            server.local_addr(),
            "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let posted = get(
            server.local_addr(),
            "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        );
        assert!(posted.starts_with("HTTP/1.1 405"), "{posted}");
        assert_eq!(
            server.url(),
            format!("http://{}/metrics", server.local_addr())
        );
    }

    /// With users, `/metrics` answers 401 but to one of them.
    #[test]
    fn only_users_are_served_when_there_are_users() {
        use base64::Engine;
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let users = Users::new(BTreeMap::from([("prometheus".to_string(), hash)])).unwrap();
        let access = Access {
            users: Some(users),
            tls: None,
        };
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), access).unwrap();
        let with = |authorization: &str| {
            get(
                server.local_addr(),
                &format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{authorization}\r\n"),
            )
        };
        let basic = |user_password: &str| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
            format!("Authorization: Basic {encoded}\r\n")
        };
        let refused = with("");
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        assert!(
            refused.to_lowercase().contains("www-authenticate: basic"),
            "{refused}"
        );
        assert!(with(&basic("prometheus:guess")).starts_with("HTTP/1.1 401"));
        let served = with(&basic("prometheus:s3cret"));
        assert!(served.starts_with("HTTP/1.1 200 OK"), "{served}");
        assert!(served.contains("tenge_trace_events_total"), "{served}");
    }

    /// A client sending a byte now and then holds up no scrape beside it,
    /// and is dropped once its time is up.
    #[test]
    fn a_slow_client_stalls_no_scrape() {
        let server =
            MetricsServer::start("127.0.0.1:0".parse().unwrap(), Access::default()).unwrap();
        let mut slow = std::net::TcpStream::connect(server.local_addr()).unwrap();
        let trickle = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            for byte in b"GET /metrics HTTP/1.1\r\n".iter().cycle() {
                if slow.write_all(&[*byte]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(400));
            }
            started.elapsed()
        });
        std::thread::sleep(Duration::from_millis(200));
        for _ in 0..3 {
            let started = std::time::Instant::now();
            let response = get(
                server.local_addr(),
                "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
            );
            assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
            assert!(
                started.elapsed() < Duration::from_millis(500),
                "{:?}",
                started.elapsed()
            );
        }
        let dropped_after = trickle.join().unwrap();
        assert!(
            dropped_after < CLIENT_TIMEOUT + Duration::from_secs(2),
            "{dropped_after:?}"
        );
    }

    /// Past [`MAX_CLIENTS`] silent connections a scrape is turned away at
    /// once, and served again once they are dropped.
    #[test]
    fn clients_past_the_limit_are_turned_away() {
        let server =
            MetricsServer::start("127.0.0.1:0".parse().unwrap(), Access::default()).unwrap();
        let silent: Vec<_> = (0..MAX_CLIENTS)
            .map(|_| std::net::TcpStream::connect(server.local_addr()).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        // Told before it asks (one that has asked may see the close as a reset).
        let busy = get(server.local_addr(), "");
        assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
        drop(silent);
        std::thread::sleep(Duration::from_millis(200));
        let served = get(
            server.local_addr(),
            "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    }

    /// A TLS client of the test PKI, with the client certificate or not.
    fn tls_get(addr: SocketAddr, pki: &Pki, with_certificate: bool) -> io::Result<String> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(pki.dir.join("ca.crt")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match with_certificate {
            true => builder
                .with_client_auth_cert(
                    CertificateDer::pem_file_iter(pki.dir.join("client.crt"))
                        .unwrap()
                        .map(Result::unwrap)
                        .collect(),
                    PrivateKeyDer::from_pem_file(pki.dir.join("client.key")).unwrap(),
                )
                .unwrap(),
            false => builder.with_no_client_auth(),
        };
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let stream = std::net::TcpStream::connect(addr)?;
        let mut tls = rustls::StreamOwned::new(connection, stream);
        tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
        let mut response = String::new();
        tls.read_to_string(&mut response)?;
        Ok(response)
    }

    /// Over TLS with client certificates: a client with one signed by the
    /// CA is served, one without is refused in the handshake, and plain HTTP
    /// gets no metrics.
    #[test]
    fn tls_serves_verified_clients_only() {
        let pki = Pki::new("server");
        let access = pki
            .config(
                "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
                 client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
            )
            .unwrap();
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), access).unwrap();
        assert_eq!(
            server.url(),
            format!("https://{}/metrics", server.local_addr())
        );
        let served = tls_get(server.local_addr(), &pki, true).unwrap();
        assert!(served.starts_with("HTTP/1.1 200 OK"), "{served}");
        assert!(served.contains("tenge_trace_events_total"), "{served}");
        let refused = tls_get(server.local_addr(), &pki, false);
        assert!(refused.is_err(), "{refused:?}");
        let plain = get(
            server.local_addr(),
            "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert!(!plain.contains("tenge_trace"), "{plain}");
    }
}
