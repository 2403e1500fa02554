//! The matcher behind image globs and host patterns: literal bytes, `*`
//! (any run of bytes without `/`) and `**` (any run of bytes).
//!
//! A policy set holds one pattern per `images[].glob` and the webhook tries
//! every one of them on every image, so a pattern must be small and a miss
//! must be cheap. A compiled regex costs tens of KiB per pattern (its
//! automata and the caches they grow), which at thousands of policies was
//! most of sigil's memory; this matcher holds the pattern's bytes and
//! nothing else. A miss is usually decided by the literal prefix alone;
//! otherwise matching simulates the pattern's automaton, one set of
//! positions per input byte: O(input × pattern), no backtracking, so no
//! input makes it slow beyond that bound.

/// One element of a compiled pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    /// This byte (lower case when the pattern ignores case).
    Byte(u8),
    /// `*`: any run of bytes without `/`, the empty run included.
    Segment,
    /// `**`: any run of bytes, the empty run included.
    Any,
}

/// A compiled wildcard pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wildcard {
    elements: Box<[Element]>,
    /// How many elements at the start are bytes: the literal prefix every
    /// match begins with.
    prefix: usize,
    /// Whether ASCII letters match regardless of case.
    ignore_case: bool,
}

impl Wildcard {
    /// An image glob: `**` is any run of bytes, a lone `*` any run
    /// without `/`, every other byte literal; case matters.
    pub(crate) fn glob(pattern: &str) -> Self {
        Self::new(pattern, true, false)
    }

    /// A host pattern: every `*` is any run without `/`, every other byte
    /// literal; ASCII letters match in either case.
    pub(crate) fn host(pattern: &str) -> Self {
        Self::new(pattern, false, true)
    }

    fn new(pattern: &str, double_star: bool, ignore_case: bool) -> Self {
        let mut elements = Vec::with_capacity(pattern.len());
        let bytes = pattern.as_bytes();
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            if b == b'*' {
                if double_star && bytes.get(i + 1) == Some(&b'*') {
                    i += 1;
                    elements.push(Element::Any);
                } else {
                    elements.push(Element::Segment);
                }
            } else if ignore_case {
                elements.push(Element::Byte(b.to_ascii_lowercase()));
            } else {
                elements.push(Element::Byte(b));
            }
            i += 1;
        }
        let prefix = elements
            .iter()
            .take_while(|e| matches!(e, Element::Byte(_)))
            .count();
        Self {
            elements: elements.into_boxed_slice(),
            prefix,
            ignore_case,
        }
    }

    fn byte_eq(&self, pattern: u8, input: u8) -> bool {
        if self.ignore_case {
            pattern == input.to_ascii_lowercase()
        } else {
            pattern == input
        }
    }

    /// Whether the whole of `input` matches.
    pub(crate) fn is_match(&self, input: &str) -> bool {
        self.is_match_bytes(input.bytes())
    }

    /// Whether the whole of `input` matches, given as bytes (so a caller
    /// can chain the parts of a reference without building the string).
    pub(crate) fn is_match_bytes(&self, input: impl Iterator<Item = u8>) -> bool {
        let (literal, rest) = self.elements.split_at(self.prefix);
        let mut input = input;
        for element in literal {
            match (element, input.next()) {
                (Element::Byte(p), Some(b)) if self.byte_eq(*p, b) => {}
                _ => return false,
            }
        }
        match rest {
            [] => input.next().is_none(),
            [Element::Any] => true,
            [Element::Segment] => input.all(|b| b != b'/'),
            _ => self.simulate(rest, input),
        }
    }

    /// Runs `elements` over `input` as an automaton: `active[p]` says the
    /// input read so far can end just before element `p`.
    fn simulate(&self, elements: &[Element], input: impl Iterator<Item = u8>) -> bool {
        let mut active = vec![false; elements.len() + 1];
        let mut next = vec![false; elements.len() + 1];
        if let Some(first) = active.first_mut() {
            *first = true;
        }
        close(elements, &mut active);
        for b in input {
            next.fill(false);
            let mut any = false;
            for (p, element) in elements.iter().enumerate() {
                if !active.get(p).copied().unwrap_or(false) {
                    continue;
                }
                let (stay, advance) = match *element {
                    Element::Byte(e) => (false, self.byte_eq(e, b)),
                    Element::Segment => (b != b'/', false),
                    Element::Any => (true, false),
                };
                if stay && let Some(n) = next.get_mut(p) {
                    *n = true;
                    any = true;
                }
                if advance && let Some(n) = next.get_mut(p + 1) {
                    *n = true;
                    any = true;
                }
            }
            if !any {
                return false;
            }
            close(elements, &mut next);
            std::mem::swap(&mut active, &mut next);
        }
        active.last().copied().unwrap_or(false)
    }
}

/// Adds to `active` the positions reachable without input: past a star,
/// which may match the empty run.
fn close(elements: &[Element], active: &mut [bool]) {
    for (p, element) in elements.iter().enumerate() {
        if matches!(element, Element::Segment | Element::Any)
            && active.get(p).copied().unwrap_or(false)
            && let Some(n) = active.get_mut(p + 1)
        {
            *n = true;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// The regex a pattern stands for, as glob.rs compiled it before: a
    /// glob (`host` false) or a host pattern (`host` true).
    fn as_regex(pattern: &str, host: bool) -> regex::Regex {
        let mut re = String::from(if host { "(?i)^" } else { "^" });
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' if !host && chars.peek() == Some(&'*') => {
                    chars.next();
                    re.push_str("(?s:.*)");
                }
                '*' => re.push_str("[^/]*"),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
        }
        re.push('$');
        regex::Regex::new(&re).unwrap()
    }

    #[test]
    fn stars_match_within_a_segment_and_double_stars_across() {
        let cases: &[(&str, &str, bool)] = &[
            ("ghcr.io/org/*", "ghcr.io/org/app", true),
            ("ghcr.io/org/*", "ghcr.io/org/app:v1", true),
            ("ghcr.io/org/*", "ghcr.io/org/team/app", false),
            ("ghcr.io/org/**", "ghcr.io/org/team/app:v1", true),
            ("ghcr.io/org/**", "ghcr.io/org/", true),
            ("ghcr.io/org/**", "ghcr.io/or", false),
            ("ghcr.io/*/app", "ghcr.io/org/app", true),
            ("ghcr.io/*/app", "ghcr.io/org/x/app", false),
            ("ghcr.io/**/app", "ghcr.io/org/x/app", true),
            ("ghcr.io/**/app", "ghcr.io/app", false),
            ("*/*", "a/b", true),
            ("*/*", "a/b/c", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY/c", false),
            ("a**c", "ab/bc", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("", "", true),
            ("", "x", false),
            ("*", "", true),
            ("**", "any/thing", true),
        ];
        for &(pattern, input, want) in cases {
            assert_eq!(
                Wildcard::glob(pattern).is_match(input),
                want,
                "{pattern} on {input}"
            );
        }
    }

    #[test]
    fn hosts_ignore_case_and_globs_do_not() {
        assert!(Wildcard::host("*.Corp.example").is_match("mirror.corp.EXAMPLE"));
        assert!(!Wildcard::glob("*.Corp.example").is_match("mirror.corp.example"));
        assert!(Wildcard::glob("Registry.example.com/**").is_match("Registry.example.com/a"));
        // In a host pattern every star stays within the host.
        assert!(Wildcard::host("a**b").is_match("axxb"));
        assert!(!Wildcard::host("a**b").is_match("ax/xb"));
    }

    /// A small deterministic generator (xorshift), so the differential
    /// below is the same on every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn pick(&mut self, from: &[&str]) -> String {
            let n = usize::try_from(self.next() % from.len() as u64).unwrap();
            from.get(n).unwrap().to_string()
        }
    }

    #[test]
    fn it_agrees_with_the_regex_it_replaces() {
        let mut rng = Rng(0x5eed_5191_1c0d);
        let pattern_parts = ["a", "b", "/", ".", ":", "*", "**", "A", "ab"];
        let input_parts = ["a", "b", "/", ".", ":", "A", "B", "ab", "x"];
        let mut matched = 0;
        for _ in 0..4000 {
            let pattern: String = (0..rng.next() % 7)
                .map(|_| rng.pick(&pattern_parts))
                .collect();
            let host = rng.next().is_multiple_of(2);
            let wildcard = if host {
                Wildcard::host(&pattern)
            } else {
                Wildcard::glob(&pattern)
            };
            let regex = as_regex(&pattern, host);
            for _ in 0..8 {
                let input: String = (0..rng.next() % 9)
                    .map(|_| rng.pick(&input_parts))
                    .collect();
                let want = regex.is_match(&input);
                matched += usize::from(want);
                assert_eq!(
                    wildcard.is_match(&input),
                    want,
                    "pattern {pattern:?} (host: {host}) on {input:?}"
                );
            }
        }
        // Both outcomes were exercised, not only misses.
        assert!(matched > 1000, "only {matched} matches among 32,000 cases");
    }

    #[test]
    fn long_adversarial_inputs_stay_linear() {
        // Many stars against a long input that almost matches: a
        // backtracking matcher takes exponential time here.
        let pattern = "a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b";
        let input = "a".repeat(1000);
        assert!(!Wildcard::glob(pattern).is_match(&input));
        assert!(!Wildcard::host(pattern).is_match(&input));
        let pattern = "**a**a**a**a**a**a**a**a**a**a**b";
        assert!(!Wildcard::glob(pattern).is_match(&input));
    }
}
