//! A bare HTTP/1.1 server on 127.0.0.1 for tests that replay recorded answers of an outside API (Stripe's, the
//! Lambda Runtime API's): each request is handed to a function as it arrived (head and body), whose answer is
//! written back byte for byte. No routing, no behaviour of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as it arrived.
#[derive(Debug, Clone)]
pub struct StubRequest {
    pub head: String,
    pub body: String,
}

impl StubRequest {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    /// `METHOD /path?query HTTP/1.1`.
    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }
}

/// An answer: status, extra headers, JSON body, and a delay before it is sent.
#[derive(Debug, Clone)]
pub struct StubResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: Duration,
}

impl StubResponse {
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }
}

/// Serves `handler` on a free port; returns `http://127.0.0.1:<port>`. `None` closes the connection.
pub async fn serve<F, Fut>(handler: F) -> String
where
    F: Fn(StubRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<StubResponse>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a free port");
    let url = format!("http://{}", listener.local_addr().expect("local address"));
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(connection(stream, handler.clone()));
        }
    });
    url
}

async fn connection<F, Fut>(mut stream: TcpStream, handler: Arc<F>)
where
    F: Fn(StubRequest) -> Fut,
    Fut: Future<Output = Option<StubResponse>>,
{
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap_or(0))
            })
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
        buf.drain(..head_end + length);
        let Some(answer) = handler(StubRequest { head, body }).await else {
            return;
        };
        tokio::time::sleep(answer.delay).await;
        let mut out = format!(
            "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            answer.status,
            answer.body.len()
        );
        for (n, v) in &answer.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.push_str(&answer.body);
        if stream.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}
