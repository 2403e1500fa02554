//! Small registry-facing inputs: image references (parse → render → parse
//! is stable), digests, repositories, `WWW-Authenticate` challenges, `Link`
//! headers, docker config JSON (pull secrets), and policy image globs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sigil_policy::glob::{Glob, ImageName};
use sigil_registry::auth::{Credentials, normalize_host, parse_challenge};
use sigil_registry::client::next_link;
use sigil_registry::{Digest, ImageRef, Repository};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(r) = ImageRef::parse(text) {
            let rendered = r.to_string();
            let again = ImageRef::parse(&rendered).unwrap_or_else(|e| {
                panic!("{text:?} parsed, but its rendering {rendered:?} does not: {e}")
            });
            assert_eq!(
                again.to_string(),
                rendered,
                "rendering is not stable for {text:?}"
            );
        }
        if let Ok(d) = Digest::parse(text) {
            assert_eq!(Digest::parse(&d.to_string()).ok(), Some(d));
        }
        if let Ok(r) = Repository::parse(text) {
            let rendered = r.to_string();
            let again = Repository::parse(&rendered).unwrap_or_else(|e| {
                panic!("{text:?} parsed, but its rendering {rendered:?} does not: {e}")
            });
            assert_eq!(again.to_string(), rendered);
        }
        let _ = parse_challenge(text);
        let _ = normalize_host(text);
        let _ = sigil_webhook::static_judge::compile_glob(text);
        if let Some((pattern, image)) = text.split_once('\n')
            && let (Ok(g), Ok(name)) = (Glob::compile(pattern), ImageName::parse(image))
        {
            let _ = g.matches(&name);
        }
    }
    if let Ok(v) = http::HeaderValue::from_bytes(data) {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::LINK, v);
        let _ = next_link(&h);
    }
    if let Ok(c) = Credentials::from_docker_config_json(data) {
        let _ = c.for_host("registry.example.com");
    }
    let _ = Credentials::from_dockercfg(data);
});
