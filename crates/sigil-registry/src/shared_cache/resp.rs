//! The few RESP2 exchanges the shared cache needs with Redis or Valkey:
//! `AUTH`, `SELECT`, `GET` and `SET key value PX ms`, over TCP or TLS.
//!
//! Why not the `redis` crate: sigil needs three commands, a hard bound on
//! every reply it reads (a hostile or broken server must not make it
//! allocate without limit) and the process's one TLS stack (rustls on
//! aws-lc-rs). The `redis` crate brings its own connection managers,
//! parsers and TLS choices for hundreds of commands; this is a page of code
//! over tokio and tokio-rustls, which the workspace already builds.

use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::SharedCacheError;

/// The longest status, error or length line read from the server.
const MAX_LINE: u64 = 1024;

/// Where the server is and how to log in, parsed from a `redis://` or
/// `rediss://` URL.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) tls: Option<(TlsConnector, ServerName<'static>)>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: u32,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Endpoint")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

/// One reply, as far as sigil reads replies.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK` and other status lines.
    Status(String),
    /// `-ERR ...`: the server refused the command.
    Error(String),
    /// `:n`.
    Integer(i64),
    /// `$n` bulk string, `None` for `$-1` (no such key).
    Bulk(Option<Vec<u8>>),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An open, logged-in connection.
pub(crate) struct Connection {
    io: BufReader<Box<dyn Io>>,
}

impl Connection {
    /// Connects, shakes hands over TLS when asked, and logs in.
    pub(crate) async fn open(
        endpoint: &Endpoint,
        max_reply: usize,
    ) -> Result<Self, SharedCacheError> {
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| SharedCacheError::Connect(e.to_string()))?;
        // Requests are small and latency matters more than packets.
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &endpoint.tls {
            None => Box::new(tcp),
            Some((connector, name)) => Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| SharedCacheError::Tls(e.to_string()))?,
            ),
        };
        let mut conn = Self {
            io: BufReader::new(io),
        };
        if let Some(password) = &endpoint.password {
            let reply = match &endpoint.username {
                Some(user) => {
                    conn.call(&[b"AUTH", user.as_bytes(), password.as_bytes()], max_reply)
                        .await?
                }
                None => {
                    conn.call(&[b"AUTH", password.as_bytes()], max_reply)
                        .await?
                }
            };
            match reply {
                Reply::Status(_) => {}
                Reply::Error(e) => return Err(SharedCacheError::Auth(e)),
                other => return Err(unexpected("AUTH", &other)),
            }
        }
        if endpoint.db != 0 {
            let db = endpoint.db.to_string();
            match conn.call(&[b"SELECT", db.as_bytes()], max_reply).await? {
                Reply::Status(_) => {}
                Reply::Error(e) => {
                    return Err(SharedCacheError::Server(format!("SELECT {db}: {e}")));
                }
                other => return Err(unexpected("SELECT", &other)),
            }
        }
        Ok(conn)
    }

    /// Sends one command and reads its reply; a bulk reply longer than
    /// `max_reply` bytes is an error (and the connection must be dropped:
    /// its body was not read).
    pub(crate) async fn call(
        &mut self,
        args: &[&[u8]],
        max_reply: usize,
    ) -> Result<Reply, SharedCacheError> {
        let request = encode(args);
        self.io
            .get_mut()
            .write_all(&request)
            .await
            .map_err(io_error)?;
        self.io.get_mut().flush().await.map_err(io_error)?;
        self.read_reply(max_reply).await
    }

    async fn read_reply(&mut self, max_reply: usize) -> Result<Reply, SharedCacheError> {
        let line = self.read_line().await?;
        let (kind, rest) = match line.split_first() {
            Some((k, rest)) => (*k, rest),
            None => return Err(SharedCacheError::Protocol("an empty reply line".into())),
        };
        let text = || String::from_utf8_lossy(rest).into_owned();
        match kind {
            b'+' => Ok(Reply::Status(text())),
            b'-' => Ok(Reply::Error(text())),
            b':' => parse_int(rest).map(Reply::Integer),
            b'$' => {
                let len = parse_int(rest)?;
                if len == -1 {
                    return Ok(Reply::Bulk(None));
                }
                let len = usize::try_from(len).map_err(|_| {
                    SharedCacheError::Protocol(format!("a bulk reply of length {len}"))
                })?;
                if len > max_reply {
                    return Err(SharedCacheError::TooLarge { limit: max_reply });
                }
                let mut body = vec![0; len + 2];
                self.io.read_exact(&mut body).await.map_err(io_error)?;
                if !body.ends_with(b"\r\n") {
                    return Err(SharedCacheError::Protocol(
                        "a bulk reply not ended by CRLF".into(),
                    ));
                }
                body.truncate(len);
                Ok(Reply::Bulk(Some(body)))
            }
            other => Err(SharedCacheError::Protocol(format!(
                "a reply of type {:?}, which sigil never asks for",
                char::from(other)
            ))),
        }
    }

    /// One CRLF-ended line without its CRLF, at most [`MAX_LINE`] bytes.
    async fn read_line(&mut self) -> Result<Vec<u8>, SharedCacheError> {
        let mut line = Vec::new();
        (&mut self.io)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await
            .map_err(io_error)?;
        if line.is_empty() {
            return Err(SharedCacheError::Connect(
                "the server closed the connection".into(),
            ));
        }
        if !line.ends_with(b"\r\n") {
            return Err(SharedCacheError::Protocol(format!(
                "a reply line longer than {MAX_LINE} bytes or cut short"
            )));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }
}

/// A command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn parse_int(digits: &[u8]) -> Result<i64, SharedCacheError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            SharedCacheError::Protocol(format!(
                "`{}` where a number was expected",
                String::from_utf8_lossy(digits)
            ))
        })
}

fn io_error(e: std::io::Error) -> SharedCacheError {
    SharedCacheError::Connect(e.to_string())
}

pub(crate) fn unexpected(command: &str, reply: &Reply) -> SharedCacheError {
    let what = match reply {
        Reply::Status(s) => format!("status `{s}`"),
        Reply::Error(e) => format!("error `{e}`"),
        Reply::Integer(n) => format!("integer {n}"),
        Reply::Bulk(_) => "a bulk string".to_string(),
    };
    SharedCacheError::Protocol(format!("{command} was answered with {what}"))
}

/// The TLS connector for `rediss://`: the web roots and the certificates
/// in `ca_pem`.
pub(crate) fn tls_connector(ca_pem: &[u8]) -> Result<TlsConnector, SharedCacheError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if !ca_pem.is_empty() {
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| {
                SharedCacheError::CaFile(format!("the CA file is not valid PEM: {e}"))
            })?;
            roots.add(cert).map_err(|e| {
                SharedCacheError::CaFile(format!("a CA certificate is invalid: {e}"))
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(SharedCacheError::CaFile(
                "the CA file holds no PEM certificate".into(),
            ));
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(crate::tls::default_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| SharedCacheError::Config(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::duplex;

    async fn reply_to(server_says: &[u8], max: usize) -> Result<Reply, SharedCacheError> {
        let (client, mut server) = duplex(1 << 16);
        server.write_all(server_says).await.unwrap();
        drop(server);
        let mut conn = Connection {
            io: BufReader::new(Box::new(client)),
        };
        conn.read_reply(max).await
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            encode(&[b"SET", b"k", b"v\r\n", b"PX", b"30000"]),
            b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n$2\r\nPX\r\n$5\r\n30000\r\n"
        );
    }

    #[tokio::test]
    async fn replies_of_each_kind_are_read() {
        assert_eq!(
            reply_to(b"+OK\r\n", 8).await.unwrap(),
            Reply::Status("OK".into())
        );
        assert_eq!(
            reply_to(b"-WRONGPASS no\r\n", 8).await.unwrap(),
            Reply::Error("WRONGPASS no".into())
        );
        assert_eq!(reply_to(b":42\r\n", 8).await.unwrap(), Reply::Integer(42));
        assert_eq!(reply_to(b"$-1\r\n", 8).await.unwrap(), Reply::Bulk(None));
        assert_eq!(
            reply_to(b"$4\r\na\r\nb\r\n", 8).await.unwrap(),
            Reply::Bulk(Some(b"a\r\nb".to_vec()))
        );
    }

    #[tokio::test]
    async fn a_bulk_reply_past_the_bound_is_refused_before_it_is_read() {
        let err = reply_to(b"$1000000000000\r\n", 1024).await.unwrap_err();
        assert!(
            matches!(err, SharedCacheError::TooLarge { limit: 1024 }),
            "{err}"
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_replies_never_panic_nor_pass_the_bound(
            kind in proptest::sample::select(vec![&b"+"[..], b"-", b":", b"$", b"*", b""]),
            length in "-?[0-9]{0,20}",
            rest in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
        ) {
            let mut bytes = kind.to_vec();
            bytes.extend_from_slice(length.as_bytes());
            bytes.extend_from_slice(b"\r\n");
            bytes.extend_from_slice(&rest);
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            if let Ok(Reply::Bulk(Some(body))) = rt.block_on(reply_to(&bytes, 64)) {
                proptest::prop_assert!(body.len() <= 64);
            }
        }
    }

    #[tokio::test]
    async fn malformed_replies_are_protocol_errors_not_panics() {
        for bad in [
            &b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"[..],
            b"$x\r\n",
            b"$3\r\nabcde",
            b"?\r\n",
            b"\r\n",
            &[b'+'; 4096],
            b"$-9223372036854775808\r\n",
        ] {
            assert!(reply_to(bad, 1024).await.is_err(), "{bad:?}");
        }
        assert!(matches!(
            reply_to(b"", 8).await.unwrap_err(),
            SharedCacheError::Connect(_)
        ));
    }
}
