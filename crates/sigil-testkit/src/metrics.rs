//! What the chart's Grafana dashboard and PrometheusRules ask Prometheus
//! for, beside what sigil's binaries export: a renamed metric would leave an
//! empty panel, or an alert that can never fire.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The chart's files that query sigil's metrics: its dashboards and its
/// PrometheusRule templates.
pub fn chart_query_files() -> Vec<PathBuf> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/sigil");
    let mut files = Vec::new();
    for (dir, wanted) in [
        ("dashboards", ".json"),
        ("templates", "prometheusrule.yaml"),
    ] {
        let Ok(entries) = std::fs::read_dir(chart.join(dir)) else {
            continue;
        };
        files.extend(
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(wanted)),
        );
    }
    files.sort();
    files
}

/// Every `sigil_…` series name in `text` (a query, a rule file, a
/// dashboard), where it starts a name.
pub fn sigil_names(text: &str) -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("sigil_") {
        let starts_a_name = !rest[..at].ends_with(ident);
        let tail = &rest[at..];
        let end = tail.find(|c: char| !ident(c)).unwrap_or(tail.len());
        if starts_a_name {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The series names of the samples in a text exposition (families without
/// samples are not exposed, so a test records one of each first).
pub fn series(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(str::to_owned))
        .collect()
}

/// The names the chart's queries use that `owned` says belong to this
/// binary and that `exposition` lacks, with the file that asks: empty when
/// every one is exported.
pub fn unexported(exposition: &str, owned: impl Fn(&str) -> bool) -> Vec<String> {
    let exported = series(exposition);
    let mut missing = Vec::new();
    for file in chart_query_files() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for name in sigil_names(&text) {
            if owned(&name) && !exported.contains(&name) {
                missing.push(format!("{} asks for {name}", file.display()));
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_from_queries_and_series_from_expositions() {
        let used = sigil_names(
            "sum(rate(sigil_a_total{x=\"y\"}[5m])) / my_sigil_b + sigil_c_bucket{le=\"1\"}",
        );
        assert_eq!(
            used.into_iter().collect::<Vec<_>>(),
            ["sigil_a_total", "sigil_c_bucket"]
        );
        let exported = series(
            "# HELP sigil_a A.\n# TYPE sigil_a counter\nsigil_a_total 2\nsigil_g{k=\"v\"} 1\n# EOF\n",
        );
        assert_eq!(
            exported.into_iter().collect::<Vec<_>>(),
            ["sigil_a_total", "sigil_g"]
        );
    }

    #[test]
    fn the_chart_has_queries_to_check() {
        let files = chart_query_files();
        assert!(files.len() >= 3, "{files:?}");
        let names: BTreeSet<String> = files
            .iter()
            .flat_map(|f| sigil_names(&std::fs::read_to_string(f).unwrap_or_default()))
            .collect();
        assert!(names.len() >= 10, "{names:?}");
    }
}
