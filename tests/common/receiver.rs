//! A local webhook receiver on 127.0.0.1 that records every request and answers as told.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

/// How the receiver answers.
#[derive(Clone, Debug)]
pub enum Behaviour {
    Status(u16),
    /// Wait this long, then answer 200.
    Hang(Duration),
    /// 302 to this location.
    Redirect(String),
    /// Answer 200 with a body that never ends.
    EndlessBody,
}

#[derive(Clone, Debug)]
pub struct Received {
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    pub port: u16,
    behaviour: Arc<Mutex<Vec<Behaviour>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// Start a receiver whose answers come from `script` in turn (the last one repeats).
    pub async fn start(script: Vec<Behaviour>) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let receiver = Receiver {
            url: format!("http://127.0.0.1:{port}/hook"),
            port,
            behaviour: Arc::new(Mutex::new(script)),
            received: Arc::default(),
        };
        let app = Router::new()
            .route("/hook", post(handle))
            .route("/elsewhere", post(handle))
            .with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        receiver
    }

    pub fn set(&self, script: Vec<Behaviour>) {
        *self.behaviour.lock().unwrap() = script;
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

async fn handle(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    r.received.lock().unwrap().push(Received {
        at: Instant::now(),
        headers,
        body,
    });
    let behaviour = {
        let mut script = r.behaviour.lock().unwrap();
        if script.len() > 1 {
            script.remove(0)
        } else {
            script.first().cloned().unwrap_or(Behaviour::Status(200))
        }
    };
    match behaviour {
        Behaviour::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        Behaviour::Hang(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
        Behaviour::Redirect(to) => (StatusCode::FOUND, [("location", to)]).into_response(),
        Behaviour::EndlessBody => {
            let stream = futures::stream::unfold((), |_| async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Some((Ok::<_, std::io::Error>(Bytes::from_static(b"more ")), ()))
            });
            (StatusCode::OK, axum::body::Body::from_stream(stream)).into_response()
        }
    }
}
