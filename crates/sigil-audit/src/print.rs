//! `sigil audit`'s output: the findings as a table for people or as JSON
//! for scripts, the same results the reports hold.

use std::fmt::Write as _;

use crate::finding::{Finding, Outcome};

/// Characters of a message a table cell shows at most (the JSON output has
/// it whole).
const TABLE_MESSAGE_CHARS: usize = 160;

fn cell(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// The findings as an aligned table, worst first within the report order,
/// with a summary line.
pub fn table(findings: &[Finding]) -> String {
    let header = [
        "NAMESPACE",
        "WORKLOAD",
        "CONTAINER",
        "IMAGE",
        "POLICY",
        "MODE",
        "RESULT",
        "ENFORCED",
        "MESSAGE",
    ];
    let rows: Vec<[String; 9]> = findings
        .iter()
        .map(|f| {
            [
                f.namespace.clone(),
                format!(
                    "{}/{}",
                    f.workload.kind.to_ascii_lowercase(),
                    f.workload.name
                ),
                f.container.clone(),
                f.image.clone(),
                f.policy.clone(),
                if f.mode.is_empty() { "-" } else { &f.mode }.to_string(),
                f.outcome.as_str().to_string(),
                if f.enforced { "yes" } else { "no" }.to_string(),
                cell(&f.message, TABLE_MESSAGE_CHARS),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths.iter()).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    let counts: Vec<String> = Outcome::ALL
        .iter()
        .map(|o| {
            let n = findings.iter().filter(|f| f.outcome == *o).count();
            format!("{n} {}", o.as_str())
        })
        .collect();
    let _ = writeln!(out, "\n{} results: {}", findings.len(), counts.join(", "));
    out
}

/// Whether any finding in an enforced namespace would be denied (`fail`
/// or `error` under an enforcing policy; a `mode: audit` policy's failures
/// are reported, never denied): `sigil audit`'s exit status.
pub fn would_deny(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.enforced && f.denies())
}
