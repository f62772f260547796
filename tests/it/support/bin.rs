//! `Bin`, the one way the tests run a program: the real `sessionstore` binary (or,
//! for a child process that must run test code, this test binary itself), built up
//! like a `Command` (arguments, a store's flags, standard input, environment, a time
//! bound) and run to its end, bounded, or spawned. It never inherits the user's
//! SESSIONSTORE_* settings or home, and judges nothing about what the run printed.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sessionstore::Config;

/// One run of a program, built up step by step; see the module's comment.
pub struct Bin {
    cmd: Command,
    /// The store flags (`--db` and the roots), given after every other argument, as
    /// a user types them after the command's own words.
    store: Vec<OsString>,
    stdin: Option<Vec<u8>>,
    stdout: Option<Stdio>,
    stderr: Option<Stdio>,
    timeout: Option<Duration>,
}

impl Bin {
    /// The real binary, with no inherited SESSIONSTORE_* settings and HOME pointed into
    /// `home`, so a default path can never reach the developer's own data.
    pub fn new(home: &Path) -> Bin {
        Bin::in_home(Command::new(env!("CARGO_BIN_EXE_sessionstore")), home)
    }

    /// The real binary run through `wrapper` and its `args` (`setpriv` dropping to
    /// another user), with the environment `new` gives it.
    pub fn through(wrapper: &str, args: &[&str], home: &Path) -> Bin {
        let mut cmd = Command::new(wrapper);
        cmd.args(args).arg(env!("CARGO_BIN_EXE_sessionstore"));
        Bin::in_home(cmd, home)
    }

    fn in_home(mut cmd: Command, home: &Path) -> Bin {
        cmd.env_remove("SESSIONSTORE_DB")
            .env_remove("SESSIONSTORE_ATTACHMENTS_ROOT")
            .env_remove("SESSIONSTORE_LEGACY_ROOTS")
            .env_remove("SESSIONSTORE_KEY_FILE")
            .env_remove("SESSIONSTORE_NEW_KEY_FILE")
            .env_remove("SESSIONSTORE_SHARED_GROUP")
            .env_remove("SESSIONSTORE_REDACT")
            .env("HOME", home)
            .env("XDG_DATA_HOME", home.join(".local/share"));
        Bin::of(cmd)
    }

    /// This test binary run again as a child that executes only the ignored test
    /// `test` (by its full path), which reads what to do from its environment.
    pub fn reexec(test: &str) -> Bin {
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
        cmd.args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove("SESSIONSTORE_LONG");
        Bin::of(cmd)
    }

    fn of(cmd: Command) -> Bin {
        Bin {
            cmd,
            store: Vec::new(),
            stdin: None,
            stdout: None,
            stderr: None,
            timeout: None,
        }
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Bin {
        self.cmd.arg(arg);
        self
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut Bin
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// `--db`, `--attachments-root` and one `--legacy-root` per legacy root of
    /// `config`: the binary on that store.
    pub fn on(&mut self, config: &Config) -> &mut Bin {
        self.store = vec![
            "--db".into(),
            db_arg(&config.database),
            "--attachments-root".into(),
            config.roots.configured.clone().into(),
        ];
        for legacy in &config.roots.legacy {
            self.store.push("--legacy-root".into());
            self.store.push(legacy.clone().into());
        }
        self
    }

    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Bin {
        self.cmd.env(key, value);
        self
    }

    pub fn envs<'a>(&mut self, vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> &mut Bin {
        self.cmd.envs(vars);
        self
    }

    pub fn env_clear(&mut self) -> &mut Bin {
        self.cmd.env_clear();
        self
    }

    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Bin {
        self.cmd.current_dir(dir);
        self
    }

    /// Bytes fed to the program's standard input, which is then closed; without them
    /// it reads an empty stdin.
    pub fn stdin(&mut self, input: impl Into<Vec<u8>>) -> &mut Bin {
        self.stdin = Some(input.into());
        self
    }

    /// Where the program's stdout goes instead of being captured (a closed pipe, a
    /// full disk); `output` then holds none.
    pub fn stdout(&mut self, to: impl Into<Stdio>) -> &mut Bin {
        self.stdout = Some(to.into());
        self
    }

    /// Where the program's stderr goes instead of being captured (a log file a test
    /// reads while the program runs).
    pub fn stderr(&mut self, to: impl Into<Stdio>) -> &mut Bin {
        self.stderr = Some(to.into());
        self
    }

    /// How long a run may take: past it the program is killed, and `output` fails the
    /// test, where `bounded` says it hung.
    pub fn timeout(&mut self, limit: Duration) -> &mut Bin {
        self.timeout = Some(limit);
        self
    }

    /// Runs the program to its end and returns what it printed.
    pub fn output(&mut self) -> Output {
        let limit = self.timeout;
        self.bounded()
            .unwrap_or_else(|| panic!("{:?} did not end within {limit:?}", self.cmd.get_program()))
    }

    /// Runs the program to its end, or kills it once the timeout passed: `None` means
    /// it hung, so a hang is a counted failure and never a stuck test.
    pub fn bounded(&mut self) -> Option<Output> {
        let mut child = self.start();
        // Written from a thread of its own, so a child that never reads cannot block
        // the timeout. A child that exits before reading closes the pipe: that write
        // error is its answer.
        let feed = child.stdin.take().map(|mut pipe| {
            let input = self.stdin.clone().unwrap_or_default();
            std::thread::spawn(move || {
                let _ = pipe.write_all(&input);
            })
        });
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let status = match self.timeout {
            None => Some(child.wait().expect("the program can be waited on")),
            Some(limit) => {
                let start = Instant::now();
                loop {
                    if let Some(status) = child.try_wait().expect("the program can be waited on") {
                        break Some(status);
                    }
                    if start.elapsed() > limit {
                        let _ = child.kill();
                        let _ = child.wait();
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        };
        if let Some(feed) = feed {
            let _ = feed.join();
        }
        let stdout = out.join().expect("the stdout reader");
        let stderr = err.join().expect("the stderr reader");
        status.map(|status| Output {
            status,
            stdout,
            stderr,
        })
    }

    /// Starts the program with its standard input, output and error piped (or where
    /// `stdout` and `stderr` sent them), and hands it over: for a test that talks to it or
    /// kills it. The `stdin` bytes, if any, are not written.
    pub fn spawn(&mut self) -> Child {
        self.start()
    }

    fn start(&mut self) -> Child {
        self.cmd.args(std::mem::take(&mut self.store));
        let stdout = self.stdout.take().unwrap_or_else(Stdio::piped);
        let stderr = self.stderr.take().unwrap_or_else(Stdio::piped);
        self.cmd
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("the program starts")
    }
}

/// What `--db` is given for `database`: the file's path, or the whole connection
/// string (its password included, as a user would type it).
pub fn db_arg(database: &sessionstore::config::Database) -> std::ffi::OsString {
    match database {
        sessionstore::config::Database::Sqlite(path) => path.clone().into(),
        sessionstore::config::Database::Postgres(url) => url.as_str().into(),
    }
}
