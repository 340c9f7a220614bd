//! `simulate` never stops on bad bytes: lines of arbitrary bytes (not UTF-8) mixed into valid
//! input become `malformed` dead letters at their own line numbers, keep their bytes, and change
//! nothing the valid lines produce. Checked as a property over random inputs, and through the
//! binary's exit status.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use proptest::prelude::*;
use std::path::PathBuf;

const PIPELINE: &str = r#"
name = "bytes"
allowed_lateness = "1s"
[input]
key = "user"
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[watermark]
max_out_of_orderness = "200ms"
[[aggregations]]
name = "n"
op = "count"
"#;

/// Runs simulate over `input`; returns (panes, dead letters as JSON).
fn simulate(input: &[u8]) -> (Vec<String>, Vec<serde_json::Value>) {
    let (spec, _) = tidemark::config::parse_raw(PIPELINE, Vec::new())
        .unwrap()
        .validate()
        .unwrap();
    crate::common::simulate_bytes(&spec, input)
}

/// A line of arbitrary bytes without a newline, with at least one byte that never occurs in UTF-8
/// (0xC0, 0xC1, 0xFE, 0xFF).
fn garbage() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(
            any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
            0..40,
        ),
        0usize..40,
        prop_oneof![Just(0xFFu8), Just(0xFE), Just(0xC0), Just(0xC1)],
    )
        .prop_map(|(mut bytes, at, bad)| {
            bytes.insert(at.min(bytes.len()), bad);
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn garbage_lines_become_dead_letters_and_change_nothing_else(
        events in proptest::collection::vec((0u8..5, 0i64..400), 1..60),
        junk in proptest::collection::vec((0usize..80, garbage()), 0..12),
    ) {
        // Valid events in time order, with garbage lines slipped in between.
        let valid: Vec<Vec<u8>> = events
            .iter()
            .enumerate()
            .map(|(i, (k, jitter))| {
                let ts = 1_000_000 + i as i64 * 50 + jitter;
                format!(r#"{{"user":"u{k}","ts":{ts}}}"#).into_bytes()
            })
            .collect();
        let mut lines = valid.clone();
        let mut junk_at = Vec::new();
        for (at, bytes) in &junk {
            let at = (*at).min(lines.len());
            lines.insert(at, bytes.clone());
            junk_at.iter_mut().for_each(|j: &mut usize| if *j >= at { *j += 1 });
            junk_at.push(at);
        }
        let mixed = lines.join(&b'\n');
        let (panes, dead) = simulate(&mixed);
        let (clean_panes, clean_dead) = simulate(&valid.join(&b'\n'));

        // The valid lines produce exactly what they produce alone.
        prop_assert_eq!(panes, clean_panes);
        // Every garbage line is a malformed dead letter at its own line number, with its bytes.
        let garbage_dead: Vec<&serde_json::Value> =
            dead.iter().filter(|d| d.get("original_base64").is_some()).collect();
        prop_assert_eq!(garbage_dead.len(), junk.len());
        let mut lines_seen: Vec<usize> = garbage_dead
            .iter()
            .map(|d| d["line"].as_u64().unwrap() as usize - 1)
            .collect();
        lines_seen.sort_unstable();
        junk_at.sort_unstable();
        prop_assert_eq!(&lines_seen, &junk_at);
        for d in &garbage_dead {
            prop_assert_eq!(d["reason"].as_str(), Some("malformed"));
            let line = d["line"].as_u64().unwrap() as usize - 1;
            let kept = BASE64.decode(d["original_base64"].as_str().unwrap()).unwrap();
            // A trailing carriage return belongs to a CRLF line end, not to the line.
            let line_bytes = lines[line].strip_suffix(b"\r").unwrap_or(&lines[line]);
            prop_assert_eq!(&kept[..], line_bytes);
        }
        // The valid lines' own dead letters (late records) are unchanged too.
        prop_assert_eq!(dead.len() - garbage_dead.len(), clean_dead.len());
    }
}

#[test]
fn the_binary_exits_zero_on_a_file_with_bytes_that_are_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pipeline.toml");
    std::fs::write(&cfg, PIPELINE).unwrap();
    let input = dir.path().join("events.jsonl");
    let mut bytes = br#"{"user":"a","ts":1000}"#.to_vec();
    bytes.extend_from_slice(b"\n\xff\xfe not text\n");
    bytes.extend_from_slice(br#"{"user":"a","ts":5000}"#);
    std::fs::write(&input, &bytes).unwrap();
    let (panes, dead) = (dir.path().join("p.jsonl"), dir.path().join("d.jsonl"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["simulate", "--config"])
        .arg(&cfg)
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&panes)
        .arg("--dead-letter")
        .arg(&dead)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let panes = std::fs::read_to_string(panes).unwrap();
    assert_eq!(
        panes.lines().count(),
        2,
        "both valid events still fire: {panes}"
    );
    let dead: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(dead).unwrap().trim()).unwrap();
    assert_eq!(dead["line"], 2);
    assert_eq!(dead["reason"], "malformed");
    assert_eq!(
        BASE64
            .decode(dead["original_base64"].as_str().unwrap())
            .unwrap(),
        b"\xff\xfe not text"
    );
}
