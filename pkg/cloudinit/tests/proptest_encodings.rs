//! Property tests: any bytes, encoded with any encoding and embedded in a cloud-config, come back exact.

use capkk_cloudinit::{Action, Encoding, TemplateVars, parse};
use proptest::prelude::*;

fn roundtrip(spelling: &str, content_yaml: &str) -> Vec<u8> {
    let doc = format!(
        "#cloud-config\nwrite_files:\n- path: /p\n  encoding: {spelling}\n  content: {content_yaml}\n"
    );
    let plan = parse(doc.as_bytes(), "cloud-config", &TemplateVars::new()).expect("parses");
    match plan.steps.into_iter().next().map(|s| s.action) {
        Some(Action::WriteFile(f)) => f.content,
        other => panic!("expected one file, got {other:?}"),
    }
}

fn wrap(b64: &[u8], width: usize) -> String {
    b64.chunks(width.max(4))
        .map(|c| format!("    {}\n", String::from_utf8_lossy(c)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn base64_roundtrips(data in proptest::collection::vec(any::<u8>(), 0..4096), spelling in prop::sample::select(vec!["base64", "b64", "BASE64"])) {
        let enc = Encoding::Base64.encode(&data);
        prop_assert_eq!(roundtrip(spelling, &format!("\"{}\"", String::from_utf8(enc).unwrap())), data);
    }

    #[test]
    fn wrapped_base64_roundtrips(data in proptest::collection::vec(any::<u8>(), 1..2048), width in 4usize..120) {
        let enc = Encoding::Base64.encode(&data);
        prop_assert_eq!(roundtrip("b64", &format!("|\n{}", wrap(&enc, width))), data);
    }

    #[test]
    fn gzip_base64_roundtrips(data in proptest::collection::vec(any::<u8>(), 0..4096), spelling in prop::sample::select(vec!["gzip+base64", "gz+base64", "gzip+b64", "gz+b64"])) {
        let enc = Encoding::GzipBase64.encode(&data);
        prop_assert_eq!(roundtrip(spelling, &format!("|\n{}", wrap(&enc, 76))), data);
    }

    #[test]
    fn gzip_binary_roundtrips(data in proptest::collection::vec(any::<u8>(), 0..4096), spelling in prop::sample::select(vec!["gzip", "gz"])) {
        let b64 = Encoding::Base64.encode(&Encoding::Gzip.encode(&data));
        prop_assert_eq!(roundtrip(spelling, &format!("!!binary |\n{}", wrap(&b64, 76))), data);
    }

    #[test]
    fn text_content_roundtrips_through_a_literal_block(lines in proptest::collection::vec("[ -~]{0,40}", 1..20)) {
        // A literal block keeps every line and one final newline ("clip" chomping).
        let text: String = lines.iter().map(|l| format!("{}\n", l.trim_end())).collect();
        // YAML takes a literal block's indentation from its first non-empty line, so that line
        // must not start with a space (an indentation indicator would be needed otherwise).
        let first = text.lines().find(|l| !l.is_empty());
        prop_assume!(first.is_some_and(|l| !l.starts_with(' ')));
        let block: String = text.lines().map(|l| if l.is_empty() { "\n".to_owned() } else { format!("    {l}\n") }).collect();
        let want = format!("{}\n", text.trim_end_matches('\n'));
        prop_assert_eq!(roundtrip("text/plain", &format!("|\n{block}")), want.into_bytes());
    }

    #[test]
    fn parse_never_panics_on_arbitrary_text(s in "\\PC{0,300}") {
        let _ = parse(format!("#cloud-config\n{s}").as_bytes(), "", &TemplateVars::new());
        let _ = parse(format!("## template: jinja\n#cloud-config\n{s}").as_bytes(), "", &TemplateVars::new());
    }
}
