//! A raw TCP webhook receiver that misbehaves below HTTP: resets, closes, hangs, endless bodies.
//! It reads each request head (and body, by Content-Length), records the time, then acts.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this status and an empty body.
    Status(u16),
    /// 302 to a private address.
    RedirectToPrivate,
    /// Reset the connection (RST) without answering.
    Reset,
    /// Close the connection without answering.
    Close,
    /// Say nothing for this long, then close.
    Hang(Duration),
    /// 200 with a chunked body that never ends.
    EndlessBody,
}

#[derive(Clone)]
pub struct ChaosReceiver {
    pub url: String,
    script: Arc<Mutex<Vec<Fault>>>,
    pub arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl ChaosReceiver {
    /// Act out `script` in turn, one fault per request (the last repeats).
    pub async fn start(script: Vec<Fault>) -> ChaosReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let receiver = ChaosReceiver {
            url,
            script: Arc::new(Mutex::new(script)),
            arrivals: Arc::default(),
        };
        let r = receiver.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let r = r.clone();
                tokio::spawn(async move { r.serve(stream).await });
            }
        });
        receiver
    }

    pub fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().unwrap().clone()
    }

    async fn serve(&self, mut stream: TcpStream) {
        // Several requests may come over one keep-alive connection.
        loop {
            if !read_request(&mut stream).await {
                return;
            }
            self.arrivals.lock().unwrap().push(Instant::now());
            let fault = {
                let mut script = self.script.lock().unwrap();
                if script.len() > 1 {
                    script.remove(0)
                } else {
                    script[0].clone()
                }
            };
            match fault {
                Fault::Status(code) => {
                    let head = format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\n\r\n");
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                }
                Fault::RedirectToPrivate => {
                    let head = "HTTP/1.1 302 Found\r\nlocation: http://10.0.0.1/internal\r\ncontent-length: 0\r\n\r\n";
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                }
                Fault::Reset => {
                    // A zero linger makes close send RST at once; it never blocks.
                    #[allow(deprecated)]
                    let _ = stream.set_linger(Some(Duration::ZERO));
                    return;
                }
                Fault::Close => return,
                Fault::Hang(d) => {
                    tokio::time::sleep(d).await;
                    return;
                }
                Fault::EndlessBody => {
                    let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while Instant::now() < deadline {
                        if stream.write_all(b"400\r\n").await.is_err()
                            || stream.write_all(&[b'x'; 1024]).await.is_err()
                            || stream.write_all(b"\r\n").await.is_err()
                        {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    return;
                }
            }
        }
    }
}

/// Read one request head and its Content-Length body. False when the peer closed first.
async fn read_request(stream: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => have += n,
        }
    }
    true
}
