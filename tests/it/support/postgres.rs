//! A throwaway PostgreSQL for the tests: Debian's server binaries (installed by
//! `tests/postgres/install.sh` when missing, which fails loudly rather than let a test skip),
//! `initdb` in a temporary directory, listening on loopback only, on a free port.
//!
//! PostgreSQL refuses to run as root, and the tests run as root here and in CI: the cluster then
//! belongs to the `postgres` system user (the package makes it; else `nobody`), started through
//! `setpriv`, and its directory is handed to that user.
//!
//! A small shell keeper owns the server: it starts it, stops, kills or restarts it when the test
//! says so on its standard input, and when that input closes — the test process ending in any way
//! — it stops the server and removes the directory, so nothing is left running.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::WAIT;

/// The keeper: `$1` the directory, `$2` the port, `$3` the binaries, `$4` the user prefix.
const KEEPER: &str = r#"
dir=$1; port=$2; bin=$3; shift 3
start() {
    "$@" "$bin/postgres" -D "$dir/data" -k "$dir" -h 127.0.0.1 -p "$port" \
        -c fsync=off -c max_connections=200 >>"$dir/log" 2>&1 &
    pid=$!
}
start "$@"
echo started
while read -r cmd; do
    case $cmd in
        stop) kill -INT "$pid"; wait "$pid" ;;
        kill) kill -KILL "$pid"; wait "$pid" ;;
        start) start "$@" ;;
    esac
    echo "$cmd"
done
kill -INT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$dir"
"#;

/// A running PostgreSQL cluster; dropping it stops it and removes its directory.
pub(crate) struct Postgres {
    pub(crate) port: u16,
    bin: PathBuf,
    keeper: Child,
    /// The keeper's input (`None` once closed) and output.
    control: Mutex<(Option<ChildStdin>, BufReader<ChildStdout>)>,
    /// Databases made so far (`database`).
    made: Mutex<Vec<String>>,
    /// The `mediatord` role's password, when the cluster asks for one ([`Postgres::with_password`]).
    password: Option<String>,
}

/// The directory of the server's binaries, installing the package when there is none.
fn binaries() -> PathBuf {
    let find = || {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists() && b.join("postgres").exists())
            .collect();
        found.sort();
        found.pop()
    };
    if let Some(bin) = find() {
        return bin;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/postgres/install.sh");
    let status = Command::new("bash").arg(&script).status().expect("run tests/postgres/install.sh");
    assert!(
        status.success(),
        "tests/postgres/install.sh could not install PostgreSQL (its ERROR line says why)"
    );
    find().expect("PostgreSQL's binaries after tests/postgres/install.sh")
}

/// Whether this process is root, and so must hand the cluster to a system user.
fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// The system user the cluster runs as, when the tests are root.
fn system_user() -> &'static str {
    if Command::new("id").arg("postgres").output().is_ok_and(|o| o.status.success()) {
        "postgres"
    } else {
        "nobody"
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

impl Postgres {
    /// Makes a cluster and starts it; every role is trusted on loopback.
    pub(crate) fn start() -> Postgres {
        Postgres::start_with(None)
    }

    /// A cluster of its own that asks every client for its password (SCRAM-SHA-256), the role
    /// `mediatord`'s being `password`.
    pub(crate) fn with_password(password: &str) -> Postgres {
        Postgres::start_with(Some(password))
    }

    fn start_with(password: Option<&str>) -> Postgres {
        let bin = binaries();
        let dir = tempfile::Builder::new().prefix("mediatord-pg").tempdir().expect("tempdir").keep();
        let mut auth = vec!["-A".to_owned(), "trust".to_owned()];
        if let Some(password) = password {
            let file = dir.join("pwfile");
            std::fs::write(&file, format!("{password}\n")).expect("write the password file");
            auth = vec!["-A".to_owned(), "scram-sha-256".to_owned(), format!("--pwfile={}", file.display())];
        }
        let mut prefix: Vec<String> = Vec::new();
        if is_root() {
            let user = system_user();
            // The directory is the user's; /tmp's own mode lets it reach it.
            let chown =
                Command::new("chown").arg("-R").arg(format!("{user}:")).arg(&dir).status().expect("chown");
            assert!(chown.success(), "chown {dir:?} to {user}");
            prefix = ["setpriv", "--reuid", user, "--regid", user, "--clear-groups", "--"]
                .map(str::to_owned)
                .to_vec();
        }
        let mut initdb = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin.join("initdb"));
                c
            }
            None => Command::new(bin.join("initdb")),
        };
        let initdb = initdb
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "mediatord", "--no-sync", "-E", "UTF8"])
            .args(&auth)
            .output()
            .expect("run initdb");
        assert!(initdb.status.success(), "initdb failed: {}", String::from_utf8_lossy(&initdb.stderr));
        let port = free_port();
        let mut keeper = Command::new("sh")
            .arg("-c")
            .arg(KEEPER)
            .arg("keeper")
            .arg(&dir)
            .arg(port.to_string())
            .arg(&bin)
            .args(&prefix)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the PostgreSQL keeper");
        let stdin = keeper.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(keeper.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the keeper's first line");
        let pg = Postgres {
            port,
            bin,
            keeper,
            control: Mutex::new((Some(stdin), stdout)),
            made: Mutex::default(),
            password: password.map(str::to_owned),
        };
        pg.wait_ready(&dir);
        pg
    }

    /// The cluster shared by every test of this process (stopped when the process ends).
    pub(crate) fn shared() -> &'static Postgres {
        static SHARED: OnceLock<Postgres> = OnceLock::new();
        SHARED.get_or_init(Postgres::start)
    }

    /// Polls `pg_isready` until the server accepts connections (bounded by [`WAIT`]).
    fn wait_ready(&self, dir: &Path) {
        let deadline = Instant::now() + WAIT;
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "PostgreSQL did not start on port {}:\n{log}", self.port);
            std::thread::sleep(Duration::from_millis(50)); // polling readiness, bounded above
        }
    }

    /// Tells the keeper `cmd` (`stop`, `kill`, `start`) and waits until it is done.
    fn say(&self, cmd: &str) {
        let mut control = self.control.lock().expect("keeper");
        writeln!(control.0.as_mut().expect("the keeper's input"), "{cmd}").expect("tell the keeper");
        let mut line = String::new();
        control.1.read_line(&mut line).expect("the keeper's answer");
        assert_eq!(line.trim(), cmd, "the keeper's answer");
    }

    /// Stops the server (fast shutdown: its clients are disconnected).
    pub(crate) fn stop(&self) {
        self.say("stop");
    }

    /// Starts it again on the same port and data, and waits until it accepts connections.
    pub(crate) fn start_again(&self) {
        self.say("start");
        let deadline = Instant::now() + WAIT;
        while !Command::new(self.bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(Instant::now() < deadline, "PostgreSQL did not start again");
            std::thread::sleep(Duration::from_millis(50)); // polling readiness, bounded above
        }
    }

    /// A database of its own for `name` (made on first use), as a `--store` URL.
    pub(crate) fn database(&self, name: &str) -> String {
        let mut made = self.made.lock().expect("made");
        if !made.iter().any(|m| m == name) {
            let out = Command::new(self.bin.join("createdb"))
                .envs(self.password.iter().map(|p| ("PGPASSWORD", p)))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "mediatord", name])
                .output()
                .expect("createdb");
            assert!(out.status.success(), "createdb {name}: {}", String::from_utf8_lossy(&out.stderr));
            made.push(name.to_owned());
        }
        format!("postgres://mediatord@127.0.0.1:{}/{name}", self.port)
    }

    /// A fresh database, for a test of its own.
    pub(crate) fn fresh_database(&self) -> String {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.database(&format!("t{}_{n}", std::process::id()))
    }

    /// A database of its own for one daemon that asked for no store (`support::Backend::Postgres`),
    /// dropped when the guard is: hundreds of daemons each leave one, at about 7 MB apiece.
    pub(crate) fn throwaway_database(&'static self) -> Throwaway {
        let url = self.fresh_database();
        let name = url.rsplit_once('/').map(|(_, name)| name.to_owned()).expect("a database name");
        Throwaway { pg: self, name, url }
    }

    /// Runs SQL on `database` with `psql`, returning its unaligned output.
    pub(crate) fn sql(&self, database: &str, sql: &str) -> String {
        let out = self.psql(database, sql).expect("psql");
        assert!(out.status.success(), "psql: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn psql(&self, database: &str, sql: &str) -> std::io::Result<std::process::Output> {
        self.psql_as("mediatord", database, sql)
    }

    /// Runs `sql` on `database` as `role` (the cluster trusts every role on loopback), whatever
    /// the outcome: what another program connected as that role would see.
    pub(crate) fn psql_as(
        &self,
        role: &str,
        database: &str,
        sql: &str,
    ) -> std::io::Result<std::process::Output> {
        Command::new(self.bin.join("psql"))
            .envs(self.password.iter().map(|p| ("PGPASSWORD", p)))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                role,
                "-At",
                "-d",
                database,
                "-c",
                sql,
            ])
            .output()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Closing its input ends the keeper: it stops the server and removes the directory.
        if let Ok(control) = self.control.get_mut() {
            control.0.take();
        }
        let _ = self.keeper.wait();
    }
}

/// A database of the shared cluster for one daemon: its `--store` URL, and the database dropped
/// when the guard is (after the daemon, which [`super::Daemon`] kills first).
pub(crate) struct Throwaway {
    pg: &'static Postgres,
    name: String,
    pub(crate) url: String,
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        // FORCE: the killed daemon's connections may not have been noticed gone yet. Never a
        // panic here (it may run while a failed test unwinds): a database left behind goes with
        // the cluster's directory when the tests end.
        let _ = self.pg.psql("postgres", &format!("DROP DATABASE {} WITH (FORCE)", self.name));
        if let Ok(mut made) = self.pg.made.lock() {
            made.retain(|m| *m != self.name);
        }
    }
}

/// The database name a state directory stands for in a run against PostgreSQL: one per
/// directory, so a daemon restarted on the same directory finds its state again.
pub(crate) fn database_for(state_dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    state_dir.hash(&mut h);
    format!("s{:016x}", h.finish())
}
