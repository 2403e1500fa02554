//! `sigil policy`: offline checks of ClusterImagePolicy and TrustRoot files
//! (`lint`) and conversion from sigstore policy-controller (`convert`), with
//! exactly the validation the controller applies in the cluster.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};

/// `sigil policy` arguments.
#[derive(Args)]
pub(crate) struct PolicyArgs {
    #[command(subcommand)]
    command: PolicyCommand,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Validate ClusterImagePolicy and TrustRoot YAML files offline, with the cluster's rules.
    Lint {
        /// YAML files (several documents per file allowed).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Convert policy.sigstore.dev (v1alpha1, v1beta1) objects to policy.sigil.dev/v1alpha1.
    ///
    /// The converted YAML goes to standard output; anything sigil does not
    /// support goes to standard error, and then the exit status is 1.
    Convert {
        /// YAML files with policy-controller objects.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

/// Runs `sigil policy …`.
pub(crate) fn run(args: &PolicyArgs) -> Result<()> {
    match &args.command {
        PolicyCommand::Lint { files } => lint(files),
        PolicyCommand::Convert { files } => convert(files),
    }
}

fn read(path: &PathBuf) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn lint(files: &[PathBuf]) -> Result<()> {
    let mut problems = 0;
    for path in files {
        let reports = sigil_api::lint::lint_yaml(&read(path)?)
            .with_context(|| format!("{}", path.display()))?;
        for r in reports {
            let what = format!("{}: {} {}", path.display(), r.kind, r.name);
            for note in &r.notes {
                println!("{what}: note: {note}");
            }
            if r.errors.is_empty() {
                println!("{what}: ok");
            }
            for e in &r.errors {
                println!("{what}: error: {e}");
            }
            problems += r.errors.len();
        }
    }
    if problems > 0 {
        bail!("{problems} problem(s) found");
    }
    Ok(())
}

fn convert(files: &[PathBuf]) -> Result<()> {
    let mut problems = 0;
    let mut first = true;
    for path in files {
        let c = sigil_api::convert::convert_yaml(&read(path)?)
            .with_context(|| format!("{}", path.display()))?;
        if c.converted > 0 {
            if !first {
                println!("---");
            }
            first = false;
            print!("{}", c.yaml);
        }
        for line in &c.report {
            eprintln!("{}: {line}", path.display());
        }
        problems += c.report.len();
    }
    if problems > 0 {
        bail!("{problems} item(s) need attention before the converted policies can be applied");
    }
    Ok(())
}
