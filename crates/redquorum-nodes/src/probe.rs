//! Talking to a fresh server over a plain `std` TCP socket: free ports and the readiness probe.
//!
//! No redis client library: the probe needs three commands and a few reply shapes, and keeping it
//! in `std` keeps this crate small and independent of the library it helps test.
//!
//! A `+PONG` alone does not prove the server is *ours*: when another process already listens on
//! the port we picked, our server fails to bind, but the other one answers. So the probe also
//! asks `INFO server` and compares `process_id` with the pid we spawned.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::LaunchError;

/// Connecting to loopback either works at once or is refused; a long timeout only hides a stuck
/// machine.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
/// A server that is up answers in microseconds; one that is being started may be busy for a while
/// loading, in which case it still answers `-LOADING` quickly.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);
/// `INFO server` is about 1 KiB; anything near this limit is not a redis reply we understand.
const MAX_BULK: usize = 1 << 20;

/// Ports for `n` nodes, each learnt by binding `127.0.0.1:0`.
///
/// All listeners are held until every port is known, so the kernel cannot hand out the same port
/// twice; they are released before returning, so another process may grab one before redis binds
/// it. Callers handle that race by retrying with a new port.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, LaunchError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()
        .map_err(LaunchError::NoFreePort)?;
    listeners
        .iter()
        .map(|listener| Ok(listener.local_addr()?.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(LaunchError::NoFreePort)
}

/// What one readiness probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// `+PONG` from the expected process.
    Ready,
    /// Not ready (yet): the reason, for the error message if we give up.
    NotYet(String),
}

/// Asks the server on `port` whether it is ready: `AUTH` (when a password is set), `PING` and
/// `INFO server`, pipelined on one connection.
pub(crate) fn probe(port: u16, password: Option<&str>, expected_pid: u32) -> Probe {
    match try_probe(port, password, expected_pid) {
        Ok(probe) => probe,
        Err(e) => Probe::NotYet(e.to_string()),
    }
}

fn try_probe(port: u16, password: Option<&str>, expected_pid: u32) -> io::Result<Probe> {
    let mut replies = send(port, password, &[&["PING"], &["INFO", "server"]])?;
    let ping = read_reply(&mut replies)?;
    let info = read_reply(&mut replies)?;
    Ok(judge(&ping, &info, expected_pid))
}

/// Opens a connection to the server on `port` and sends `commands` on it, pipelined, after an
/// `AUTH` when a password is set. Returns the connection to read one reply per command from: the
/// `AUTH` reply is already read and ignored, as `AUTH` is allowed while loading and a wrong
/// password shows up again as `-NOAUTH` on the next command.
fn send(
    port: u16,
    password: Option<&str>,
    commands: &[&[&str]],
) -> io::Result<BufReader<TcpStream>> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    stream.set_write_timeout(Some(REPLY_TIMEOUT))?;

    let mut request = Vec::new();
    if let Some(password) = password {
        encode(&mut request, &["AUTH", password]);
    }
    for command in commands {
        encode(&mut request, command);
    }
    (&stream).write_all(&request)?;

    let mut replies = BufReader::new(stream);
    if password.is_some() {
        read_reply(&mut replies)?;
    }
    Ok(replies)
}

/// The library's marker key (its `MARKER_KEY`; a library test checks the two agree): present on
/// a node for as long as it kept its data. A brand-new node has no data to lose, so it gets a
/// marker that vouches at once; without one, a client quarantines the node for `max_ttl`.
pub const MARKER_KEY: &str = "redlock-node-marker";
/// The value written on a brand-new node: unique to it (a different server put behind the same
/// address shows a different marker), with no time after the colon to wait for.
fn fresh_marker(port: u16) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("fresh-{port}-{}-{nanos}:0", std::process::id())
}

/// Writes the marker on a server that just came up for the first time (`SET … NX`: a marker
/// already there, in a reused directory, is kept).
pub(crate) fn mark(port: u16, password: Option<&str>) -> io::Result<()> {
    let marker = fresh_marker(port);
    let mut replies = send(port, password, &[&["SET", MARKER_KEY, &marker, "NX"]])?;
    match read_reply(&mut replies)? {
        Reply::Simple(_) | Reply::Other(_) => Ok(()),
        // A replica gets its master's marker by replication.
        Reply::Error(e) if e.starts_with("READONLY") => Ok(()),
        other => Err(io::Error::other(format!(
            "SET of the marker answered {other}"
        ))),
    }
}

/// Decides from the `PING` and `INFO server` replies (pure, so it is unit-tested).
fn judge(ping: &Reply, info: &Reply, expected_pid: u32) -> Probe {
    match ping {
        Reply::Simple(s) if s == "PONG" => {}
        other => return Probe::NotYet(format!("PING answered {other}")),
    }
    let Reply::Bulk(text) = info else {
        return Probe::NotYet(format!("INFO answered {info}"));
    };
    let pid = text
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse::<u32>().ok());
    match pid {
        Some(pid) if pid == expected_pid => Probe::Ready,
        Some(pid) => Probe::NotYet(format!(
            "the port is answered by pid {pid}, not by our pid {expected_pid}"
        )),
        None => Probe::NotYet("INFO server has no process_id".to_owned()),
    }
}

/// The reply shapes the probe can meet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Simple(String),
    Error(String),
    Bulk(String),
    Other(String),
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Simple(s) => write!(f, "+{s}"),
            Self::Error(s) => write!(f, "-{s}"),
            Self::Bulk(s) => write!(f, "a {}-byte bulk string", s.len()),
            Self::Other(s) => write!(f, "{s:?}"),
        }
    }
}

/// Encodes a command as a RESP array of bulk strings (safe for any password bytes).
fn encode(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

fn read_reply(r: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        "$" => {
            let len: i64 = rest
                .parse()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad bulk length"))?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Other("null bulk string".to_owned()));
            };
            if len > MAX_BULK {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "bulk string too long",
                ));
            }
            let mut body = vec![0; len + 2];
            r.read_exact(&mut body)?;
            body.truncate(len);
            Reply::Bulk(String::from_utf8_lossy(&body).into_owned())
        }
        _ => Reply::Other(line.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Reply {
        read_reply(&mut &bytes[..]).unwrap()
    }

    #[test]
    fn parses_the_reply_shapes() {
        assert_eq!(parse(b"+PONG\r\n"), Reply::Simple("PONG".into()));
        assert_eq!(
            parse(b"-LOADING busy\r\n"),
            Reply::Error("LOADING busy".into())
        );
        assert_eq!(parse(b"$3\r\na\r\n\r\n"), Reply::Bulk("a\r\n".into()));
        assert_eq!(parse(b":1\r\n"), Reply::Other(":1".into()));
        assert!(read_reply(&mut &b""[..]).is_err());
        assert!(read_reply(&mut &b"$5\r\nab"[..]).is_err());
    }

    #[test]
    fn encodes_commands_as_resp_arrays() {
        let mut out = Vec::new();
        encode(&mut out, &["AUTH", "p w"]);
        assert_eq!(out, b"*2\r\n$4\r\nAUTH\r\n$3\r\np w\r\n");
    }

    #[test]
    fn ready_only_on_pong_from_the_expected_pid() {
        let pong = Reply::Simple("PONG".into());
        let info =
            |pid: u32| Reply::Bulk(format!("# Server\r\nprocess_id:{pid}\r\ntcp_port:1\r\n"));
        assert_eq!(judge(&pong, &info(42), 42), Probe::Ready);
        assert!(matches!(judge(&pong, &info(7), 42), Probe::NotYet(m) if m.contains("pid 7")));
        let loading = Reply::Error("LOADING Redis is loading the dataset in memory".into());
        assert!(
            matches!(judge(&loading, &info(42), 42), Probe::NotYet(m) if m.contains("LOADING"))
        );
        let noauth = Reply::Error("NOAUTH Authentication required.".into());
        assert!(matches!(judge(&noauth, &info(42), 42), Probe::NotYet(_)));
    }

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(8).unwrap();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
    }
}
