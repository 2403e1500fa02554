//! `sigil-fakecloud`: the cloud fakes as a process, for the e2e suite.
//!
//! ```text
//! sigil-fakecloud --sa-key sa.pub --subject system:serviceaccount:NS:SA \
//!   --upstream http://127.0.0.1:5000 --tls-name 10.244.0.1 --state fakes.env \
//!   [--listen IP] [--issuer URL] [--lifetime ecr_token=120 ...]
//! ```
//!
//! Writes `FAKECLOUD_*=host:port` lines and `FAKECLOUD_CA=PATH` (the TLS
//! CA, beside the state file) to `--state`, then runs until SIGTERM.
#![forbid(unsafe_code)]

use anyhow::{Context as _, Result, bail};
use sigil_fakecloud::{Config, start};

fn main() -> Result<()> {
    let mut config = Config {
        subjects: Vec::new(),
        ..Config::default()
    };
    let mut state_file = None;
    let mut args = std::env::args().skip(1);
    // Bounded by the arguments.
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => config.listen = value()?.parse()?,
            "--tls-name" => config.tls_names.push(value()?),
            "--sa-key" => {
                let path = value()?;
                config.service_account_keys +=
                    &std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            }
            "--issuer" => config.issuer = Some(value()?),
            "--subject" => config.subjects.push(value()?),
            "--role-arn" => config.role_arn = value()?,
            "--upstream" => config.upstream = Some(value()?),
            "--state" => state_file = Some(value()?),
            "--lifetime" => {
                let spec = value()?;
                let (name, seconds) = spec.split_once('=').context("--lifetime NAME=SECONDS")?;
                let seconds: i64 = seconds.parse()?;
                let l = &mut config.lifetimes;
                match name {
                    "aws_credentials" => l.aws_credentials = seconds,
                    "ecr_token" => l.ecr_token = seconds,
                    "google_token" => l.google_token = seconds,
                    "entra_token" => l.entra_token = seconds,
                    "acr_refresh" => l.acr_refresh = seconds,
                    "registry_token" => l.registry_token = seconds,
                    other => bail!("unknown lifetime {other}"),
                }
            }
            other => bail!("unknown flag {other}"),
        }
    }
    let state_file = state_file.context("--state FILE is required")?;
    if config.subjects.is_empty() {
        bail!("--subject is required (the ServiceAccounts the fakes trust)");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let running = start(config).await?;
        let ca = format!("{state_file}.ca.pem");
        std::fs::write(&ca, &running.ca_pem)?;
        let lines = format!("{}FAKECLOUD_CA={ca}\n", running.env_lines());
        let tmp = format!("{state_file}.tmp");
        std::fs::write(&tmp, lines)?;
        std::fs::rename(&tmp, &state_file)?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}
