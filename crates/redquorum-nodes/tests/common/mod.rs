//! Observations the tests make from outside a node: over a raw socket and through `/proc`, so
//! they do not trust the code under test to report on itself.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::wait::waitpid;
use nix::unistd::Pid;

/// A raw `PING` with a short read timeout: `Ok(reply)` or the I/O error that ended it.
pub fn raw_ping(port: u16, timeout: Duration) -> io::Result<String> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(b"PING\r\n")?;
    let mut reply = [0; 64];
    let n = stream.read(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply[..n]).into_owned())
}

/// Whether `pid` is a process that has not finished exiting: a zombie leader counts as alive
/// only while its other threads are still tearing down.
pub fn is_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    match state {
        None => false,
        Some("Z" | "X") => {
            std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| tasks.count() > 1)
        }
        Some(_) => true,
    }
}

/// Waits (bounded) until `pid` is no longer alive; `true` if it died in time.
pub fn dies_within(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while is_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Reaps a child of this process that the code under test let go of (detached or forgotten).
pub fn reap(pid: u32) {
    let _ = waitpid(Pid::from_raw(pid as i32), None);
}
