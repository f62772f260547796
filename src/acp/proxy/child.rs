//! The agent behind the proxy as a child process: its standard input and output piped
//! to the proxy, its standard error the proxy's own (never the protocol). The process
//! is killed when the proxy lets go of it.

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use tokio::io::BufReader;
use tokio::process::{ChildStdin, ChildStdout, Command};

/// The agent's program and arguments, as given after `--`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    pub program: OsString,
    pub args: Vec<OsString>,
}

impl AgentCommand {
    /// The agent's name as a session's binding keeps it: the program's file name, so a
    /// session is found again when the same agent is installed elsewhere.
    pub fn name(&self) -> String {
        Path::new(&self.program)
            .file_name()
            .unwrap_or(self.program.as_os_str())
            .to_string_lossy()
            .into_owned()
    }

    pub fn shown(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Starts `command`: its process, which the caller keeps to wait on or kill, and the
/// two pipes the proxy speaks through. A program that cannot be started is an error
/// naming it.
pub fn spawn(command: &AgentCommand) -> io::Result<(Process, ChildStdin, BufReader<ChildStdout>)> {
    let mut process = Command::new(&command.program)
        .args(&command.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        // A group of its own, so that stopping it reaches what it started too (an
        // npm wrapper's real binary, say), and a signal meant for the proxy's own
        // terminal group does not hit it first.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let (Some(stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
        return Err(io::Error::other("the agent's pipes were not set up"));
    };
    let stdout = BufReader::with_capacity(64 * 1024, stdout);
    Ok((Process(process), stdin, stdout))
}

/// The agent's process once its pipes are handed out.
#[derive(Debug)]
pub struct Process(tokio::process::Child);

impl Process {
    pub fn id(&self) -> Option<u32> {
        self.0.id()
    }

    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.0.wait().await
    }

    /// SIGTERM to the process group, SIGKILL if it has not ended after `grace`; then
    /// reaps the process.
    pub async fn terminate(&mut self, grace: std::time::Duration) {
        if let Some(pid) = self
            .0
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32))
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
            if tokio::time::timeout(grace, self.0.wait()).await.is_ok() {
                return;
            }
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.0.kill().await;
    }
}
