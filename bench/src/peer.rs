//! What the daemon's check of each accepted connection's peer costs (`mediatord::peer`, issue
//! #41): the look-up itself, in this process, with and without processes below it to search; and
//! a fresh loopback connection to a daemon (connect, one request, close), whose latency includes
//! it, so two builds can be compared interleaved.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Children started to be searched: `sleep`, each with a few open files.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The mean cost of one `mediatord::peer::identify` of a loopback connection this process made
/// (found on this host, searched for among this process's descendants, not found there), with
/// `children` processes below this one, over `calls` calls.
pub fn identify_cost(calls: usize, children: usize) -> std::io::Result<Duration> {
    let kids = Children(
        (0..children)
            .map(|_| Command::new("sleep").arg("60").stdin(Stdio::null()).stdout(Stdio::null()).spawn())
            .collect::<std::io::Result<Vec<_>>>()?,
    );
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let _client = TcpStream::connect(listener.local_addr()?)?;
    let (accepted, remote) = listener.accept()?;
    let local = accepted.local_addr()?;
    let me = std::process::id();
    let started = Instant::now();
    for _ in 0..calls {
        let origin = mediatord::peer::identify(local, remote, me);
        assert_eq!(origin, mediatord::peer::Origin::Local);
    }
    let spent = started.elapsed();
    drop(kids);
    Ok(spent / calls.max(1) as u32)
}

/// The mean time of one fresh connection to `port` on loopback: connect, `GET /health`, read the
/// answer to its close; over `n` connections, one after another.
pub fn fresh_connection_cost(port: u16, n: usize) -> std::io::Result<Duration> {
    let request = format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::with_capacity(1024);
    let started = Instant::now();
    for _ in 0..n {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.write_all(request.as_bytes())?;
        answer.clear();
        stream.read_to_end(&mut answer)?;
        if !answer.starts_with(b"HTTP/1.1 200") {
            return Err(std::io::Error::other(format!(
                "unexpected answer: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(80)])
            )));
        }
    }
    Ok(started.elapsed() / n.max(1) as u32)
}
