//! A minimal SMTP receiver for the alert tests: plain SMTP on 127.0.0.1 (EHLO/HELO, MAIL FROM,
//! RCPT TO, DATA, RSET, NOOP, QUIT; no AUTH, no TLS) that keeps every message it accepted, with
//! a switch that answers `421` to every new connection to play "SMTP down". Bound before
//! `start` returns, so nothing waits for it to be ready.
//! (mailin-embedded was considered: it runs on blocking threads with no way to stop it or to
//! answer 421 on demand, which is all this test needs.)

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// One accepted message.
#[derive(Debug, Clone)]
pub struct Received {
    pub mail_from: String,
    pub rcpt_to: Vec<String>,
    /// The DATA section, dot-unstuffed, with CRLF line ends.
    pub data: Vec<u8>,
}

impl Received {
    /// The message, parsed (MIME decoded by mail-parser).
    pub fn parsed(&self) -> mail_parser::Message<'_> {
        mail_parser::MessageParser::default()
            .parse(&self.data)
            .expect("a parsable message")
    }
}

#[derive(Default)]
struct State {
    down: bool,
    received: Vec<Received>,
    refused: usize,
}

/// The running receiver; stops when dropped.
pub struct SmtpServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SmtpServer {
    /// Binds 127.0.0.1:0 and serves in the background.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let _ = session(sock, st).await;
                });
            }
        });
        Self { addr, state, task }
    }

    /// `smtp://127.0.0.1:<port>` (plain SMTP).
    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    /// `true`: every new connection gets `421 Service not available` and is closed.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    /// Every accepted message, oldest first.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// Connections answered with 421.
    pub fn refused(&self) -> usize {
        self.state.lock().unwrap().refused
    }
}

async fn session(sock: TcpStream, st: Arc<Mutex<State>>) -> std::io::Result<()> {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    let down = {
        let mut g = st.lock().unwrap();
        if g.down {
            g.refused += 1;
        }
        g.down
    };
    if down {
        w.write_all(b"421 4.3.2 test server is down\r\n").await?;
        return w.shutdown().await;
    }
    w.write_all(b"220 127.0.0.1 ESMTP test\r\n").await?;
    let (mut from, mut rcpt) = (String::new(), Vec::new());
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let cmd = line.trim_end().to_string();
        let upper = cmd.to_ascii_uppercase();
        let reply: &[u8] = if upper.starts_with("EHLO") {
            b"250-127.0.0.1 greets you\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n"
        } else if upper.starts_with("HELO") {
            b"250 127.0.0.1\r\n"
        } else if upper.starts_with("MAIL FROM:") {
            from = address(&cmd["MAIL FROM:".len()..]);
            rcpt.clear();
            b"250 2.1.0 OK\r\n"
        } else if upper.starts_with("RCPT TO:") {
            rcpt.push(address(&cmd["RCPT TO:".len()..]));
            b"250 2.1.5 OK\r\n"
        } else if upper == "DATA" {
            w.write_all(b"354 end data with <CR><LF>.<CR><LF>\r\n")
                .await?;
            let mut data = Vec::new();
            loop {
                line.clear();
                if r.read_line(&mut line).await? == 0 {
                    return Ok(());
                }
                if line == ".\r\n" || line == ".\n" {
                    break;
                }
                let unstuffed = line.strip_prefix('.').unwrap_or(&line);
                data.extend_from_slice(unstuffed.as_bytes());
            }
            st.lock().unwrap().received.push(Received {
                mail_from: std::mem::take(&mut from),
                rcpt_to: std::mem::take(&mut rcpt),
                data,
            });
            b"250 2.0.0 OK queued as test-1\r\n"
        } else if upper == "RSET" || upper == "NOOP" {
            b"250 2.0.0 OK\r\n"
        } else if upper == "QUIT" {
            w.write_all(b"221 2.0.0 bye\r\n").await?;
            return w.shutdown().await;
        } else {
            b"502 5.5.2 command not implemented\r\n"
        };
        w.write_all(reply).await?;
    }
}

/// `<a@b> BODY=8BITMIME` ⇒ `a@b`.
fn address(arg: &str) -> String {
    let arg = arg.trim();
    let end = arg.find('>').map_or(arg.len(), |i| i + 1);
    arg[..end]
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_string()
}
