//! Local servers that speak a model backend's documented protocol, one per protocol, for
//! tests/it/backends.rs: they
//! check what easel sends (answering 400 or 401 as the real server would when it is wrong),
//! record it for the test to look at, and misbehave on request through a [`Script`].

#![allow(dead_code)]
// A refusal is returned as the response to send, as the handlers do: its size does not matter here.
#![allow(clippy::result_large_err)]

pub mod comfyui;
pub mod openai;
pub mod sdwebui;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use easel::images::{encode_png, RgbaImage};

/// How a mock answers one job.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// As the protocol says.
    Ok,
    /// This status, with `Retry-After` when given, and the body.
    Status {
        code: u16,
        retry_after: Option<u64>,
        body: String,
    },
    /// Never answers (the test's timeout is far shorter).
    Hang,
    /// 200 with a body that is not JSON.
    BadJson,
    /// 200 with images whose base64 does not decode.
    BadBase64,
    /// 200 with images that are not images.
    NotImage,
    /// This many images, whatever was asked for.
    Count(usize),
    /// The connection is closed part-way through the answer.
    Drop,
    /// openai: 400 with `error.code` set to this (a content refusal); comfyui: 400 rejecting
    /// the graph with this node error.
    Refuse(&'static str),
    /// comfyui: the job runs and fails with this exception type.
    ExecError(&'static str),
    /// openai: four images, the second two pixels wider than the others.
    MixedSizes,
    /// openai: the images as usual, with every `/` of the answer written `\/` (as PHP's
    /// `json_encode` and some other encoders write it), which JSON allows.
    Escaped,
}

impl Fault {
    pub fn status(code: u16) -> Fault {
        Fault::Status {
            code,
            retry_after: None,
            body: format!("{{\"error\":{{\"message\":\"mock status {code}\"}}}}"),
        }
    }
}

/// The faults to act out, one per job in turn; then `then` for every job after.
pub struct Script {
    queue: Mutex<VecDeque<Fault>>,
    then: Mutex<Fault>,
}

impl Default for Script {
    fn default() -> Script {
        Script::new(vec![], Fault::Ok)
    }
}

impl Script {
    pub fn new(faults: Vec<Fault>, then: Fault) -> Script {
        Script {
            queue: Mutex::new(faults.into()),
            then: Mutex::new(then),
        }
    }

    pub fn next(&self) -> Fault {
        let queued = self.queue.lock().unwrap().pop_front();
        queued.unwrap_or_else(|| self.then.lock().unwrap().clone())
    }

    /// The next jobs get `faults`, in turn; every one after them is answered as the protocol
    /// says.
    pub fn set_next(&self, faults: Vec<Fault>) {
        *self.queue.lock().unwrap() = faults.into();
        *self.then.lock().unwrap() = Fault::Ok;
    }

    /// From now on, every job gets `fault`.
    pub fn set(&self, fault: Fault) {
        self.queue.lock().unwrap().clear();
        *self.then.lock().unwrap() = fault;
    }
}

/// The answer of a fault that is the same whatever the protocol; `None` for the others.
pub async fn common_answer(fault: &Fault) -> Option<Response> {
    match fault {
        Fault::Status {
            code,
            retry_after,
            body,
        } => {
            let mut response = (
                StatusCode::from_u16(*code).unwrap(),
                [("content-type", "application/json")],
                body.clone(),
            )
                .into_response();
            if let Some(secs) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", secs.to_string().parse().unwrap());
            }
            Some(response)
        }
        Fault::Hang => {
            tokio::time::sleep(Duration::from_secs(600)).await;
            Some(StatusCode::GATEWAY_TIMEOUT.into_response())
        }
        Fault::BadJson => Some(
            (
                [("content-type", "application/json")],
                "{\"data\": [ this is not json",
            )
                .into_response(),
        ),
        Fault::Drop => Some(dropped()),
        _ => None,
    }
}

/// A 200 whose body breaks off: the server closes the connection without finishing it.
pub fn dropped() -> Response {
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(b"{\"data\": [")),
        Err(std::io::Error::other("the mock drops the connection")),
    ];
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap()
}

/// A flat image: `shade` in red, its inverse in green.
pub fn flat(w: u32, h: u32, shade: u8) -> RgbaImage {
    let mut img = RgbaImage::new(w, h);
    for px in img.data.chunks_exact_mut(4) {
        px[..3].copy_from_slice(&[shade, 255 - shade, 128]);
    }
    img
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn png_b64(img: &RgbaImage) -> String {
    b64(&encode_png(img))
}

/// Bind a local port and serve `app` on it; the base URL.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Serve `app` over TLS (`tls`, HTTP/1.1 with upgrades, so WebSockets work) on a local port;
/// the base URL, by the name `localhost` that test certificates are made for.
pub async fn serve_tls(app: axum::Router, tls: Arc<rustls::ServerConfig>) -> String {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client that does not trust the certificate ends its handshake here.
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = TowerToHyperService::new(app);
                let _ = Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    url
}

/// A self-signed certificate for `localhost`, made now: its PEM (for `tls_ca_file`) and the
/// server's TLS configuration.
pub fn self_signed() -> (String, Arc<rustls::ServerConfig>) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![made.cert.der().clone()], key)
        .unwrap();
    (made.cert.pem(), Arc::new(config))
}

/// "WxH" as numbers.
pub fn parse_size(size: &str) -> Option<(u32, u32)> {
    let (w, h) = size.split_once('x')?;
    Some((w.parse().ok()?, h.parse().ok()?))
}
