//! Shell completion scripts (`sigil completion SHELL`) and man pages
//! (`sigil manpages --out-dir DIR`, run by `make man`), both generated from
//! the clap definitions, so they cannot disagree with `--help`.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, Command};

use crate::verdict::Verdict;

/// `sigil completion`.
#[derive(Args)]
pub(crate) struct CompletionArgs {
    /// The shell to write a completion script for. Load it with, e.g.,
    /// `source <(sigil completion bash)`, or save it where the shell looks
    /// (`sigil completion zsh > "${fpath[1]}/_sigil"`).
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `sigil manpages`.
#[derive(Args)]
pub(crate) struct ManArgs {
    /// Directory to write `sigil.1` and one page per subcommand
    /// (`sigil-policy-lint.1`, …) into; created when missing.
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
}

/// Writes the completion script for `args.shell` to standard output.
pub(crate) fn completion(args: &CompletionArgs, mut cmd: Command) -> Verdict {
    clap_complete::generate(args.shell, &mut cmd, "sigil", &mut std::io::stdout());
    Verdict::Allow
}

/// The man pages of `cmd` and of every visible subcommand, as (file name,
/// roff text).
pub(crate) fn pages(cmd: Command) -> Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = cmd;
    cmd.build();
    let mut out = Vec::new();
    render(&cmd, "sigil", "sigil", &mut out)?;
    Ok(out)
}

fn render(
    cmd: &Command,
    file_stem: &str,
    invocation: &str,
    out: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    // The parent was built, so a subcommand's usage reads `sigil policy lint`.
    let mut roff = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .title(file_stem)
        .render(&mut roff)
        .with_context(|| format!("cannot render the man page of {invocation}"))?;
    out.push((format!("{file_stem}.1"), roff));
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        render(
            sub,
            &format!("{file_stem}-{}", sub.get_name()),
            &format!("{invocation} {}", sub.get_name()),
            out,
        )?;
    }
    Ok(())
}

/// Writes the man pages into `args.out_dir`.
pub(crate) fn write_pages(args: &ManArgs, cmd: Command) -> Result<Verdict> {
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("cannot create {}", args.out_dir.display()))?;
    for (name, roff) in pages(cmd)? {
        let path = args.out_dir.join(&name);
        std::fs::write(&path, roff).with_context(|| format!("cannot write {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(Verdict::Allow)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;
    use crate::Cli;

    /// Every visible subcommand path, by its man page's file stem.
    fn visible(cmd: &Command, stem: &str, out: &mut Vec<(String, String)>) {
        for sub in cmd.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            let name = format!("{stem}-{}", sub.get_name());
            let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
            out.push((name.clone(), about));
            visible(sub, &name, out);
        }
    }

    #[test]
    fn a_man_page_is_generated_for_every_visible_subcommand() {
        let pages = pages(Cli::command()).unwrap_or_default();
        let mut expected = Vec::new();
        visible(&Cli::command(), "sigil", &mut expected);
        assert!(
            expected.iter().any(|(n, _)| n == "sigil-doctor")
                && expected.iter().any(|(n, _)| n == "sigil-policy-lint"),
            "the walk reaches nested subcommands: {expected:?}"
        );
        assert_eq!(
            pages.len(),
            expected.len() + 1,
            "sigil.1 and one per subcommand"
        );
        assert!(pages.iter().any(|(f, _)| f == "sigil.1"));
        assert!(
            !pages
                .iter()
                .any(|(f, _)| f == "sigil-manpages.1" || f == "sigil-help.1"),
            "hidden and help subcommands get no page"
        );
        for (stem, about) in expected {
            let file = format!("{stem}.1");
            let (_, roff) = pages
                .iter()
                .find(|(f, _)| *f == file)
                .unwrap_or_else(|| panic!("no {file}"));
            let text = String::from_utf8_lossy(roff);
            assert!(text.starts_with(".ie \\n(.g .ds Aq"), "{file} is roff");
            assert!(text.contains(".TH "), "{file} has a title");
            // roff escapes dashes; compare the first word of the summary.
            let first = about.split_whitespace().next().unwrap_or_default();
            assert!(text.contains(first), "{file} carries its summary `{about}`");
        }
    }

    #[test]
    fn completion_scripts_name_every_subcommand_for_each_shell() {
        use clap::ValueEnum as _;
        for shell in clap_complete::Shell::value_variants() {
            let mut cmd = Cli::command();
            let mut buf = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "sigil", &mut buf);
            let script = String::from_utf8_lossy(&buf);
            for sub in [
                "verify-bundle",
                "verify",
                "policy",
                "audit",
                "doctor",
                "completion",
            ] {
                assert!(script.contains(sub), "{shell}: no {sub} in\n{script}");
            }
        }
    }
}
