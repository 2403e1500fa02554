//! Docker credential helpers on a laptop: the `credHelpers` / `credsStore`
//! programs `~/.docker/config.json` names (`docker-credential-desktop`,
//! `-ecr-login`, `-gcloud`, ...), run as docker, cosign and crane run them:
//! `docker-credential-NAME get` with the server URL on stdin, answering
//! `{"ServerURL", "Username", "Secret"}`. Only the CLI registers this
//! provider ([`super::KeychainSettings::laptop`]): the in-cluster binaries
//! never execute a program a configuration names. A run is bounded in time
//! and output, and its answer is kept five minutes.

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;

use super::cache::Timed;
use super::{CloudError, Context, ErrorKind, Provider, ProviderId};
use crate::auth::Credential;

const P: ProviderId = ProviderId::Helper;
/// The largest answer read from a helper.
const MAX_OUTPUT: u64 = 64 * 1024;
/// How long a helper's answer is used before it is asked again.
const LIFE: Duration = Duration::from_secs(300);

/// Runs docker credential helpers.
#[derive(Debug)]
pub struct Helpers {
    context: Arc<Context>,
}

impl Helpers {
    /// Helpers, each run within the context's exchange timeout.
    pub fn new(context: Arc<Context>) -> Self {
        Self { context }
    }
}

/// The server URL a helper is asked for: Docker Hub under its legacy key,
/// as `docker login` stores it.
fn server_url(host: &str) -> String {
    match crate::auth::normalize_host(host).as_str() {
        "index.docker.io" => "https://index.docker.io/v1/".into(),
        h => h.to_string(),
    }
}

impl Provider for Helpers {
    fn id(&self) -> ProviderId {
        P
    }

    fn serves(&self, _host: &str) -> Option<String> {
        // Chosen by the docker config, not by host: see Keychain::credential.
        None
    }

    /// `target` is `NAME\0HOST`.
    fn fetch(
        self: Arc<Self>,
        target: String,
    ) -> BoxFuture<'static, Result<Timed<Credential>, CloudError>> {
        let timeout = self.context.exchange_timeout;
        async move {
            let (name, host) = target.split_once('\u{0}').unwrap_or((target.as_str(), ""));
            let (name, host) = (name.to_string(), host.to_string());
            let step = format!("running docker-credential-{name} for {host}");
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
            {
                return Err(CloudError::config(
                    P,
                    step,
                    format!("`{name}` is not a credential helper name"),
                    "fix credHelpers / credsStore in ~/.docker/config.json",
                ));
            }
            let url = server_url(&host);
            let program = format!("docker-credential-{name}");
            let step2 = step.clone();
            let run = tokio::task::spawn_blocking(move || run(&program, &url, timeout))
                .await
                .map_err(|e| CloudError::config(P, step2, e.to_string(), "try again"))?;
            let output = run.map_err(|(kind, reason)| {
                CloudError::new(
                    P,
                    kind,
                    step.clone(),
                    reason,
                    format!(
                        "run `docker login {host}` (or the helper's own login), or remove the \
                         helper from ~/.docker/config.json"
                    ),
                )
            })?;
            parse(&step, &output)
        }
        .boxed()
    }

    fn source(&self) -> String {
        "the docker credential helper ~/.docker/config.json names".into()
    }

    fn refused_fix(&self) -> &'static str {
        "the registry refused the helper's credentials: log in again"
    }
}

/// Runs `program get` with `url` on stdin; its stdout within [`MAX_OUTPUT`]
/// bytes and `timeout` (then it is killed).
fn run(program: &str, url: &str, timeout: Duration) -> Result<Vec<u8>, (ErrorKind, String)> {
    let mut child = Command::new(program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| (ErrorKind::Config, format!("cannot run {program}: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits before reading is judged by its exit status.
        let _ = stdin.write_all(url.as_bytes());
    }
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stdout {
            let _ = s.take(MAX_OUTPUT + 1).read_to_end(&mut out);
        }
        out
    });
    let deadline = Instant::now() + timeout;
    // Bounded by the deadline.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err((
                    ErrorKind::Timeout,
                    format!("{program} did not answer within {} ms", timeout.as_millis()),
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err((ErrorKind::Config, format!("waiting for {program}: {e}"))),
        }
    };
    let out = reader.join().unwrap_or_default();
    if out.len() as u64 > MAX_OUTPUT {
        return Err((
            ErrorKind::Malformed,
            format!("{program} wrote more than {MAX_OUTPUT} bytes"),
        ));
    }
    if !status.success() {
        let text: String = String::from_utf8_lossy(&out)
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        return Err((
            ErrorKind::Refused,
            format!("{program} exited with {status}: {}", text.trim()),
        ));
    }
    Ok(out)
}

fn parse(step: &str, output: &[u8]) -> Result<Timed<Credential>, CloudError> {
    let v: serde_json::Value = serde_json::from_slice(output).map_err(|e| {
        CloudError::new(
            P,
            ErrorKind::Malformed,
            step,
            format!("the helper's answer is not JSON: {e}"),
            "check the helper",
        )
    })?;
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    let (username, secret) = (text("Username"), text("Secret"));
    if secret.is_empty() {
        return Err(CloudError::new(
            P,
            ErrorKind::Malformed,
            step,
            "the helper's answer has no Secret",
            "log in again",
        ));
    }
    // `<token>` marks an identity token; registries take it as the password
    // of that user, as for docker config identity tokens.
    Ok(Timed::new(
        Credential::Basic {
            username,
            password: secret,
        },
        LIFE,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_is_asked_for_under_its_legacy_server_url() {
        assert_eq!(server_url("docker.io"), "https://index.docker.io/v1/");
        assert_eq!(
            server_url("registry-1.docker.io"),
            "https://index.docker.io/v1/"
        );
        assert_eq!(server_url("ghcr.io"), "ghcr.io");
    }

    #[test]
    fn a_helper_is_run_bounded_and_its_answer_read() {
        let dir = std::env::temp_dir().join(format!("sigil-helper-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("docker-credential-good");
        std::fs::write(
            &good,
            "#!/bin/sh\nread url\necho \"{\\\"ServerURL\\\":\\\"$url\\\",\\\"Username\\\":\\\"u\\\",\\\"Secret\\\":\\\"s-$url\\\"}\"\n",
        )
        .unwrap();
        let slow = dir.join("docker-credential-slow");
        std::fs::write(&slow, "#!/bin/sh\nsleep 5\n").unwrap();
        let failing = dir.join("docker-credential-failing");
        std::fs::write(
            &failing,
            "#!/bin/sh\necho 'credentials not found in native keychain'\nexit 1\n",
        )
        .unwrap();
        for f in [&good, &slow, &failing] {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let out = run(good.to_str().unwrap(), "ghcr.io", Duration::from_secs(5)).unwrap();
        let t = parse("s", &out).unwrap();
        assert_eq!(
            t.value,
            Credential::Basic {
                username: "u".into(),
                password: "s-ghcr.io".into()
            }
        );
        let (kind, reason) =
            run(slow.to_str().unwrap(), "x", Duration::from_millis(200)).unwrap_err();
        assert_eq!(kind, ErrorKind::Timeout, "{reason}");
        let (kind, reason) =
            run(failing.to_str().unwrap(), "x", Duration::from_secs(5)).unwrap_err();
        assert_eq!(kind, ErrorKind::Refused);
        assert!(reason.contains("not found in native keychain"), "{reason}");
        let (kind, _) = run(
            "/nonexistent/docker-credential-x",
            "x",
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert_eq!(kind, ErrorKind::Config);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
